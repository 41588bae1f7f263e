//! A run in three steps: [`prepare`] (every decision, once), *execute* (the runner),
//! and *report* (the metrics and the end of the event stream). Reporters are built in
//! one place ([`reporters`]); the edge adds the ones only it knows (terminal, NDJSON).

mod ahead;
mod cache;
mod dry;
mod local;
mod node;
pub use node::slurm_job;
mod prepare;
mod reporters;
mod schedule;
mod slurm;
mod surroundings;

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

pub use dry::DryPlan;
pub use prepare::{choose_sandbox, prepare, Execution, Prepared};
pub use schedule::Schedule;

use crate::config::{RunConfig, Selection};
use crate::discovery::{DiscoverOptions, Discovery};
use crate::error::{ConfigError, DiscoveryError, Error, ReportError};
use crate::events::{EventSender, RunEvent};
use crate::halt::{Halt, HaltReason};
use crate::lock::FileLock;
use crate::model::{Device, PerformanceMetrics, Platform, RunInfo, ScriptSummary};
use crate::report::Reporter;
use crate::runner::{self, RunContext, Stop};

/// What a finished run hands back to the edge.
#[derive(Debug)]
pub struct RunReport {
    pub metrics: PerformanceMetrics,
    /// Reports that could not be written.
    pub report_errors: Vec<ReportError>,
    /// Why the runner stopped starting scripts, when its file system filled up.
    pub halted: Option<HaltReason>,
}

/// Runs the scripts of `config`: prepare, execute, report. `edge` are the reporters
/// the binary adds (terminal log, progress, NDJSON); `stop` lets it interrupt, and
/// `halt` is raised when the runner's own files cannot be written.
///
/// A stop request during *prepare* (which may build a Python environment for
/// minutes) ends the run at once with [`Error::Interrupted`]: no reporter has seen an
/// event yet, so nothing of the previous run was touched.
pub async fn run(
    config: Arc<RunConfig>,
    edge: Vec<Box<dyn Reporter>>,
    stop: watch::Receiver<Stop>,
    halt: Halt,
) -> Result<RunReport, Error> {
    let started_at = SystemTime::now();
    let started = Instant::now();
    let mut prepared = {
        let mut stop = stop.clone();
        tokio::select! {
            prepared = prepare(&config) => prepared?,
            _ = stop.wait_for(|s| *s != Stop::Run) => return Err(Error::Interrupted),
        }
    };
    if *stop.borrow() != Stop::Run {
        return Err(Error::Interrupted);
    }
    let sizes = (prepared.history_sizes.take()).and_then(|read| read.join().ok());
    let swept = crate::results::sweep::before_run(
        &config,
        &prepared.discovery,
        prepared.gnn.as_ref(),
        sizes.as_ref(),
    );
    let (events, dispatcher) = reporters::start(&config, &prepared, edge, halt.clone());
    for message in std::mem::take(&mut prepared.warnings)
        .into_iter()
        .chain(swept.warnings)
    {
        events.emit(RunEvent::Warning { message });
    }
    let (results, spare_slots) = execute(
        &config,
        &mut prepared,
        swept.standing,
        &events,
        &stop,
        &halt,
    )
    .await;
    let mut warnings = prepared.discovery.warnings.clone();
    warnings.extend(end_strays(&events).await);
    let mut run = run_info(&config, &prepared, started_at, started, &stop);
    run.halted = halt.reason().map(|r| r.to_string());
    run.spare_slots = spare_slots;
    let mut metrics =
        PerformanceMetrics::build(run, results, prepared.discovery.missing.clone(), warnings)
            .with_refused(prepared.discovery.refused.clone())
            .with_render_failures(prepared.discovery.render_failures.clone());
    metrics.environment = prepared.environment.take();
    events.emit(RunEvent::RunFinished {
        metrics: Box::new(metrics.clone()),
    });
    drop(events);
    let report_errors = dispatcher.await.unwrap_or_default();
    Ok(RunReport {
        metrics,
        report_errors,
        halted: halt.reason(),
    })
}

/// Ends what the scripts left that no attempt's sweep could trace ([`runner::reaper::strays`]),
/// once every script is over; the warning names each.
async fn end_strays(events: &EventSender) -> Option<String> {
    let keep = runner::sentinel::pid();
    let strays = tokio::task::spawn_blocking(move || runner::reaper::strays(keep))
        .await
        .unwrap_or_default();
    if strays.is_empty() {
        return None;
    }
    let named: Vec<String> = strays
        .iter()
        .map(|l| format!("{} ({})", l.pid, l.command))
        .collect();
    let message = format!(
        "ended {} process(es) the scripts left that no script's sweep could trace (they \
         left their session and overwrote their environment): {}",
        strays.len(),
        crate::listing::first_named(&named, 10)
    );
    events.emit(RunEvent::Warning {
        message: message.clone(),
    });
    Some(message)
}

/// `--dry-run`: *prepare* only, with the plan in [`Prepared::dry`]. Nothing is
/// written and no script starts.
pub async fn dry_run(
    config: Arc<RunConfig>,
    mut stop: watch::Receiver<Stop>,
) -> Result<Prepared, Error> {
    tokio::select! {
        prepared = prepare(&config) => prepared,
        _ = stop.wait_for(|s| *s != Stop::Run) => Err(Error::Interrupted),
    }
}

/// Step 2: the kept results go out as they are, the rest run. Returns the scripts'
/// lines and the spare slots the run opened (see `runner/spare.rs`).
async fn execute(
    config: &Arc<RunConfig>,
    prepared: &mut Prepared,
    standing: Vec<crate::model::ScriptResult>,
    events: &EventSender,
    stop: &watch::Receiver<Stop>,
    halt: &Halt,
) -> (Vec<ScriptSummary>, usize) {
    let (Some(exec), Some(interp)) = (prepared.execution.take(), &prepared.interpreter) else {
        // Nothing of this run's to start: the records that stand are still the tree's.
        let carried =
            crate::results::carry::left_out(config, &prepared.discovery, standing, events);
        return (crate::results::carry::in_discovery_order(carried), 0);
    };
    let total = prepared.discovery.scripts.len();
    events.emit(RunEvent::RunStarted {
        run_id: config.run_id.clone(),
        total: exec.schedule.order.len(),
        kept: exec.schedule.kept.len(),
        jobs: prepared.plan.jobs,
        // A GPU already known to be unusable sends every script to the CPU from the
        // start: the run says so, not "on gpu" followed by a fallback.
        device: match (&prepared.plan.gpu_unusable, config.fallback_to_cpu) {
            (Some(_), true) => Platform::Cpu,
            _ => prepared.plan.platform,
        },
        interpreter: interp.path.display().to_string(),
        expected_s: exec
            .schedule
            .expected_s
            .map(|total| total / prepared.plan.jobs.max(1) as f64),
    });
    let mut summaries: Vec<Option<ScriptSummary>> = vec![None; total];
    let record_files = crate::results::carry::record_files(prepared.gnn.as_ref());
    for (i, previous) in exec.schedule.kept {
        summaries[i] = Some(crate::results::carry::kept(
            config,
            previous,
            &record_files,
            events,
        ));
    }
    let carried = crate::results::carry::left_out(config, &prepared.discovery, standing, events);
    let ctx = Arc::new(RunContext {
        config: config.clone(),
        plan: Arc::new(prepared.plan.clone()),
        backend: exec.backend,
        gpu_broken: Mutex::new(prepared.plan.gpu_unusable.clone()),
        sandbox_info: exec.sandbox_info,
        data_dirs: exec.schedule.data_dirs,
        record_files,
        settings: exec.schedule.settings,
        fingerprints: exec.schedule.fingerprints,
        device_times: exec.schedule.device_times,
        families: exec.schedule.families,
        earlier_logs: crate::results::archive::EarlierLogs::read(&config.results_dir),
        spare_opened: Default::default(),
        halt: halt.clone(),
        fail_budget: runner::budget::FailBudget::new(
            config.max_fail.map(std::num::NonZeroUsize::get),
        )
        .stopping(config.fail_now),
    });
    let scripts = exec.schedule.order.iter().map(|(_, s)| s.clone()).collect();
    let sandboxed = ctx.sandbox_info.kind != "none";
    let ran = runner::run_all(ctx.clone(), scripts, events.clone(), stop.clone()).await;
    // The filter refuses setuid and setgid modes; should one get past it, no file of
    // the sandbox user's in the cache keeps it once the run is over.
    if let (true, Some(cache)) = (sandboxed, &prepared.compilation_cache) {
        if let Err(e) = crate::confined::clear_privilege_bits(cache) {
            tracing::warn!("failed to clear setuid bits in {}: {e}", cache.display());
        }
    }
    for ((i, _), line) in exec.schedule.order.iter().zip(ran) {
        summaries[*i] = Some(line);
    }
    let scripts = &prepared.discovery.scripts;
    let lines = scripts
        .iter()
        .zip(summaries)
        .filter_map(|(s, l)| Some((s.relative_path.clone(), l?)));
    let spare_slots = ctx.spare_opened.load(std::sync::atomic::Ordering::Relaxed);
    (
        crate::results::carry::in_discovery_order(lines.chain(carried).collect()),
        spare_slots,
    )
}

/// Step 3's record of the run itself.
fn run_info(
    config: &RunConfig,
    prepared: &Prepared,
    started_at: SystemTime,
    started: Instant,
    stop: &watch::Receiver<Stop>,
) -> RunInfo {
    let plan = &prepared.plan;
    let interp = prepared.interpreter.as_ref();
    RunInfo {
        run_id: config.run_id.clone(),
        runner_version: env!("CARGO_PKG_VERSION").to_string(),
        argv: config.argv.clone(),
        started_at: started_at.into(),
        finished_at: crate::model::Timestamp::now(),
        wall_time_s: started.elapsed().as_secs_f64(),
        device_requested: config.device,
        device: plan.starts_on(config.fallback_to_cpu),
        jobs: plan.jobs,
        spare_slots: 0,
        interpreter: interp.map(|i| i.path.display().to_string()),
        interpreter_source: interp.map(|i| i.source.as_str().to_string()),
        python_version: interp.map(|i| i.info.python_version.clone()),
        jax_version: interp.and_then(|i| i.info.jax_version.clone()),
        jaxlib_version: interp.and_then(|i| i.info.jaxlib_version.clone()),
        output_dir: config.output_dir.display().to_string(),
        results_dir: config.results_dir.display().to_string(),
        compilation_cache: prepared
            .compilation_cache
            .as_ref()
            .map(|p| p.display().to_string()),
        sandbox_layers: prepared.sandbox_layers.clone(),
        interrupted: *stop.borrow() != Stop::Run,
        retries: config.retry.retries,
        retry_on: config.retry.retry_on.iter().copied().collect(),
        fallback: if config.fallback_to_cpu {
            "cpu"
        } else {
            "none"
        }
        .into(),
        device_fallback_reason: plan
            .gpu_unusable
            .clone()
            .filter(|_| config.fallback_to_cpu && config.device != Device::Cpu),
        runner_peak_rss_mb: runner_peak_rss_mb(),
        halted: None,
        device_choice: plan.reason.clone(),
        settings: effective_settings(config, plan.jobs, prepared.compilation_cache.as_deref()),
        profile: config.profile.clone(),
        gpu_share: plan.gpu.as_ref().map(|g| g.share),
        gpu_share_reason: plan.gpu.as_ref().map(|g| g.reason.clone()),
        xla_preset: config.xla_preset,
    }
}

/// The settings as the run used them: an option left to its default that the run
/// decides (the jobs from the cores, the results folder and the compilation cache from
/// the tree, the classes retried, walking the tree) shows what was decided; its source
/// stays `default`.
fn effective_settings(
    config: &RunConfig,
    jobs: usize,
    cache: Option<&std::path::Path>,
) -> std::collections::BTreeMap<String, crate::model::Setting> {
    let mut settings = config.settings.clone();
    let retry_on: Vec<&str> = config.retry.retry_on.iter().map(|c| c.as_str()).collect();
    let decided = [
        ("jobs", jobs.to_string()),
        ("results-dir", config.results_dir.display().to_string()),
        (
            "compilation-cache",
            cache.map_or_else(|| "off".into(), |p| p.display().to_string()),
        ),
        ("retry-on", retry_on.join(" ")),
        ("recursive", config.recursive.to_string()),
    ];
    for (long, value) in decided {
        if let Some(s) = settings.get_mut(long).filter(|s| s.source == "default") {
            s.value = value;
        }
    }
    settings
}

/// Makes this process the subreaper of the scripts' leftovers, so they come to the
/// runner rather than to init and can be found and killed.
pub fn become_subreaper() -> std::io::Result<()> {
    runner::reaper::become_subreaper()
}

/// Takes the results folder's lock, so two runners never write the same folder.
pub fn lock_results(config: &RunConfig) -> Result<FileLock, ConfigError> {
    let path = config.results_dir.join(".jax-runner.lock");
    let locked = |source| ConfigError::Lock {
        path: path.clone(),
        source,
    };
    match FileLock::try_acquire(&path).map_err(locked)? {
        Some(mut lock) => {
            // Best effort: the PID tells the next runner who holds it.
            let _ = lock.write_holder(&format!("{}\n", std::process::id()));
            Ok(lock)
        }
        None => Err(ConfigError::ResultsLocked {
            path: config.results_dir.clone(),
            holder: crate::confined::read_in(&path, 64)
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .unwrap_or_default(),
        }),
    }
}

/// Discovers scripts for `config`, keeping those `-k/--filter` and `--exclude` select
/// (the rest go to [`Discovery::unselected`]). A selection that leaves nothing of a
/// tree with scripts is an error: a run would change nothing, so none starts.
pub fn discover(config: &RunConfig) -> Result<Discovery, DiscoveryError> {
    let mut found = discover_in(
        &config.output_dir,
        config.recursive,
        &[config.results_dir.clone(), config.step12_dir.clone()],
    )?;
    select(&mut found, &config.selection);
    let nothing = found.scripts.is_empty() && found.missing.is_empty() && found.refused.is_empty();
    if nothing && !found.unselected.is_empty() {
        return Err(DiscoveryError::NothingSelected {
            selected: 0,
            total: found.unselected.len(),
            selection: config.selection.describe(),
        });
    }
    Ok(found)
}

/// Keeps the scripts `selection` selects in [`Discovery::scripts`], moving the others
/// to [`Discovery::unselected`]. Manifest entries that are missing or refused are
/// matched by their path (and file stem, as an id), so `-k one_model` is not failed by
/// another model's missing script.
pub fn select(found: &mut Discovery, selection: &Selection) {
    if selection.is_all() {
        return;
    }
    let before = found.scripts.len();
    let (selected, unselected) = std::mem::take(&mut found.scripts)
        .into_iter()
        .partition(|s| selection.selects(&s.id, &s.relative_path));
    found.scripts = selected;
    found.unselected = unselected;
    let by_path = |entry: &str| {
        let path = std::path::Path::new(entry);
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        selection.selects(&stem, path)
    };
    let keep: Vec<bool> = found.missing.iter().map(|m| by_path(m)).collect();
    let mut flags = keep.iter();
    found.missing.retain(|_| *flags.next().unwrap_or(&true));
    let mut flags = keep.iter();
    found
        .missing_paths
        .retain(|_| *flags.next().unwrap_or(&true));
    found.refused.retain(|r| by_path(r));
    // A model that failed to render is matched by its GNN source (`models/a.md`: `a`).
    found.render_failures.retain(|(source, _)| by_path(source));
    tracing::info!(
        "{} of {before} script(s) selected by {}",
        found.scripts.len(),
        selection.describe()
    );
}

/// Discovers scripts under `output_dir`, never entering the runner's own outputs
/// (`exclude`: the results folder and GNN's `12_execute_output`).
pub fn discover_in(
    output_dir: &std::path::Path,
    recursive: bool,
    exclude: &[std::path::PathBuf],
) -> Result<Discovery, DiscoveryError> {
    crate::discovery::discover(
        output_dir,
        &DiscoverOptions {
            recursive,
            exclude: exclude.to_vec(),
        },
    )
}

/// The runner's own peak RSS, from the kernel: `VmHWM`, the high-water mark of this
/// process's own memory. `getrusage`'s `ru_maxrss` would not do: Linux carries it over
/// exec, so a runner started from a large process would report that process's peak.
pub fn runner_peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
