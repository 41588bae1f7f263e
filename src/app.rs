//! The run pipeline: discovered scripts and a chosen interpreter in, results and
//! metrics out, with every reporter subscribed to the event stream.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

use crate::config::{CompilationCache, Device, Platform, RunConfig, WarmStart};
use crate::discovery::Script;
use crate::discovery::{DiscoverOptions, Discovery};
use crate::error::{ConfigError, DiscoveryError, ReportError};
use crate::events::{EventSender, RunEvent};
use crate::history::{self, History, Reuse};
use crate::lock::FileLock;
use crate::model::ScriptSummary;
use crate::model::{PerformanceMetrics, RunInfo};
use crate::paths::rfc3339;
use crate::plan::{plan, preflight, sandbox_info, zygote_env};
use crate::python::Interpreter;
use crate::report::{self, Reporter};
use crate::runner::ray::{Cluster, RayClient};
use crate::runner::sandbox::{self, Bwrap, SandboxMode};
use crate::runner::zygote::Zygote;
use crate::runner::{self, telemetry, RunContext, SandboxSetup, Stop};
use std::collections::HashMap;

/// Takes the results folder's lock, so two runners never write the same folder.
pub fn lock_results(config: &RunConfig) -> Result<FileLock, ConfigError> {
    let path = config.results_dir.join(".jax-runner.lock");
    let locked = |source| ConfigError::Lock {
        path: path.clone(),
        source,
    };
    match FileLock::try_acquire(&path).map_err(locked)? {
        Some(lock) => {
            // Best effort: the PID tells the next runner who holds it.
            let _ = std::fs::write(&path, format!("{}\n", std::process::id()));
            Ok(lock)
        }
        None => Err(ConfigError::ResultsLocked {
            path: config.results_dir.clone(),
            holder: std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }),
    }
}

/// Discovers scripts for `config`.
pub fn discover(config: &RunConfig) -> Result<Discovery, DiscoveryError> {
    discover_in(
        &config.output_dir,
        config.recursive,
        &[config.results_dir.clone(), config.step12_dir.clone()],
    )
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

/// What a finished run hands back to the edge.
#[derive(Debug)]
pub struct RunReport {
    pub metrics: PerformanceMetrics,
    /// Reports that could not be written.
    pub report_errors: Vec<ReportError>,
}

/// Runs the scripts, feeding every event to `reporters`, and returns the metrics.
/// `stop` lets the caller interrupt (signals are wired at the edge).
pub async fn run(
    config: &RunConfig,
    interpreter: Option<&Interpreter>,
    bwrap: Result<Bwrap, String>,
    cluster: Option<Cluster>,
    discovery: Discovery,
    mut reporters: Vec<Box<dyn Reporter>>,
    stop: watch::Receiver<Stop>,
) -> RunReport {
    reporters.insert(
        0,
        Box::new(report::JsonReporter::new(config.results_dir.clone())),
    );
    reporters.push(Box::new(report::HtmlReporter::new(
        config.results_dir.clone(),
    )));
    reporters.push(Box::new(report::MarkdownReporter::new(
        config.results_dir.clone(),
    )));
    reporters.push(Box::new(report::JunitReporter::new(
        config.results_dir.clone(),
    )));
    let gnn = config
        .gnn_layout
        .then(|| report::gnn::plan(&config.step12_dir, &discovery.scripts));
    if let Some(entries) = &gnn {
        reporters.push(Box::new(report::GnnReporter::new(
            config.step12_dir.clone(),
            config.results_dir.clone(),
            entries.clone(),
            report::gnn::RunFacts {
                target_directory: config.output_dir.clone(),
                render_failures: discovery.render_failures.clone(),
                missing_render_scripts: discovery.missing_paths.clone(),
                distributed: config.ray.is_some(),
            },
        )));
    }
    let (events, rx) = EventSender::channel();
    let dispatcher = tokio::spawn(report::dispatch(rx, reporters));
    let environment = match interpreter {
        // On a Ray cluster this machine's GPUs do not matter: the cluster check did it.
        Some(interp)
            if config.preflight && config.ray.is_none() && !discovery.scripts.is_empty() =>
        {
            let (config, interp) = (config.clone(), interp.clone());
            tokio::task::spawn_blocking(move || preflight(&config, &interp))
                .await
                .ok()
        }
        _ => None,
    };
    let history = History::load(&config.results_dir);
    let plan = match &cluster {
        Some(c) => crate::plan::ray_plan(config, c),
        None => plan(config, environment.as_ref(), history.max_peak_mb()),
    };
    let started_at = SystemTime::now();
    let started = Instant::now();
    let warn = |message: String| events.emit(RunEvent::Warning { message });

    for message in &discovery.warnings {
        warn(message.clone());
    }
    for missing in &discovery.missing {
        warn(format!(
            "the render manifest lists {missing}, which does not exist"
        ));
    }
    let compilation_cache = match &config.compilation_cache {
        CompilationCache::Off => None,
        CompilationCache::Dir(dir) => match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.clone()),
            Err(e) => {
                warn(format!(
                    "compilation cache disabled: failed to create {}: {e}",
                    dir.display()
                ));
                None
            }
        },
    };
    let shim_dir = match telemetry::install(&crate::paths::cache_dir()) {
        Ok(dir) => Some(dir),
        Err(e) => {
            warn(format!(
                "device telemetry disabled: failed to install the shim: {e}"
            ));
            None
        }
    };
    if let (Err(reason), SandboxMode::Auto, None) = (&bwrap, config.sandbox, &config.ray) {
        warn(format!(
            "scripts run without a sandbox: {reason} (install it with `{}`)",
            sandbox::INSTALL_HINT
        ));
    }
    if let (Some(reason), false) = (&plan.gpu_unusable, config.fallback_to_cpu) {
        warn(format!(
            "GPU requested but unusable ({reason}) and --fallback none: scripts will fail"
        ));
    }

    let zygote = match (interpreter, config.warm_start, bwrap.is_ok()) {
        (Some(interp), WarmStart::On | WarmStart::Auto, false)
            if !discovery.scripts.is_empty() && config.ray.is_none() =>
        {
            let env = zygote_env(shim_dir.as_deref());
            let python = interp.path.clone();
            match tokio::task::spawn_blocking(move || Zygote::start(&python, &env)).await {
                Ok(Ok(z)) => Some(Arc::new(z)),
                Ok(Err(reason)) => {
                    warn(format!(
                        "warm start unavailable, scripts start cold: {reason}"
                    ));
                    None
                }
                Err(e) => {
                    warn(format!("warm start unavailable, scripts start cold: {e}"));
                    None
                }
            }
        }
        (_, WarmStart::On, true) => {
            warn("warm start is off for sandboxed runs: each script needs its own mounts".into());
            None
        }
        _ => None,
    };
    let results = match interpreter {
        Some(interp) if !discovery.scripts.is_empty() => {
            events.emit(RunEvent::RunStarted {
                total: discovery.scripts.len(),
                jobs: plan.jobs,
                device: plan.platform,
                interpreter: interp.path.display().to_string(),
            });
            let inputs = fingerprint_inputs(config, interp);
            let fingerprints: HashMap<String, String> = discovery
                .scripts
                .iter()
                .map(|s| (s.id.clone(), history::fingerprint(s, &inputs)))
                .collect();
            let total = discovery.scripts.len();
            let mut summaries: Vec<Option<ScriptSummary>> = vec![None; total];
            let mut to_run: Vec<(usize, Script)> = Vec::new();
            let data_dir = |id: &str| match gnn.as_ref().and_then(|g| g.get(id)) {
                Some(e) => e.data_dir.clone(),
                None => runner::default_data_dir(&config.results_dir, id),
            };
            for (i, s) in discovery.scripts.into_iter().enumerate() {
                let kept = (config.reuse != Reuse::None)
                    .then(|| history::previous_result(&config.results_dir, &s.id))
                    .flatten()
                    .filter(|p| history::keeps(config.reuse, p, &fingerprints[&s.id]))
                    // A kept success must still have its outputs where it says.
                    .filter(|p| match history::outputs_intact(p, &data_dir(&s.id)) {
                        Ok(()) => true,
                        Err(why) => {
                            tracing::info!("{} runs again: {why}", s.id);
                            false
                        }
                    });
                match kept {
                    Some(previous) => {
                        let mut line = ScriptSummary::of(&previous);
                        line.resumed = true;
                        summaries[i] = Some(line);
                        events.emit(RunEvent::ScriptFinished {
                            result: Box::new(previous),
                        });
                    }
                    None => to_run.push((i, s)),
                }
            }
            if to_run.len() < total {
                tracing::info!(
                    "kept {} earlier success(es), running {} script(s)",
                    total - to_run.len(),
                    to_run.len()
                );
            }
            // Longest expected first, so a long script does not start last and
            // leave the other slots idle at the end.
            let order =
                history.schedule(&to_run.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
            let ordered: Vec<(usize, Script)> =
                order.into_iter().map(|k| to_run[k].clone()).collect();
            let ctx = Arc::new(RunContext {
                python: interp.path.clone(),
                device_requested: config.device,
                platform: plan.platform,
                jobs: plan.jobs,
                timeout: config.timeout,
                grace: config.grace,
                results_dir: config.results_dir.clone(),
                compilation_cache: compilation_cache.clone(),
                retry: config.retry.clone(),
                fallback_to_cpu: config.fallback_to_cpu,
                max_log_bytes: config.max_log_bytes,
                shim_dir,
                run_token: format!("{}-{}", std::process::id(), rfc3339(started_at)),
                gpu_broken: Mutex::new(plan.gpu_unusable.clone()),
                sandbox_info: sandbox_info(config, &bwrap),
                sandbox: bwrap.ok().map(|bwrap| SandboxSetup {
                    bwrap,
                    home: std::env::var_os("HOME").map(std::path::PathBuf::from),
                    python_paths: sandbox::python_paths(
                        &interp.path,
                        &interp.info.prefix,
                        &interp.info.base_prefix,
                    ),
                }),
                memory_limit: config.memory_limit,
                max_procs: config.max_procs,
                extra_env: config.extra_env.clone(),
                pass_env: config.pass_env.clone(),
                zygote: zygote.clone(),
                // GNN's layout points GNN_OUTPUT_DIR at 12_execute_output/…/simulation_data.
                data_dirs: gnn
                    .iter()
                    .flatten()
                    .map(|(id, e)| (id.clone(), e.data_dir.clone()))
                    .collect(),
                fingerprints,
                profile: config.profile,
                ray: config
                    .ray
                    .as_ref()
                    .map(|r| RayClient::new(&r.address, r.token.clone())),
            });
            let scripts = ordered.iter().map(|(_, s)| s.clone()).collect();
            let ran = runner::run_all(ctx, scripts, events.clone(), stop.clone()).await;
            for ((i, _), line) in ordered.iter().zip(ran) {
                summaries[*i] = Some(line);
            }
            summaries.into_iter().flatten().collect()
        }
        _ => Vec::new(),
    };

    let info = |f: fn(&Interpreter) -> Option<String>| interpreter.and_then(f);
    let run = RunInfo {
        started_at: rfc3339(started_at),
        finished_at: rfc3339(SystemTime::now()),
        wall_time_s: started.elapsed().as_secs_f64(),
        device_requested: config.device,
        device: if plan.gpu_unusable.is_some() && config.fallback_to_cpu {
            Platform::Cpu
        } else {
            plan.platform
        },
        jobs: plan.jobs,
        interpreter: info(|i| Some(i.path.display().to_string())),
        interpreter_source: info(|i| Some(i.source.as_str().to_string())),
        python_version: info(|i| Some(i.info.python_version.clone())),
        jax_version: info(|i| i.info.jax_version.clone()),
        jaxlib_version: info(|i| i.info.jaxlib_version.clone()),
        output_dir: config.output_dir.display().to_string(),
        results_dir: config.results_dir.display().to_string(),
        compilation_cache: compilation_cache.map(|p| p.display().to_string()),
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
            .filter(|_| config.fallback_to_cpu && config.device != Device::Cpu),
        runner_peak_rss_mb: runner_peak_rss_mb(),
        device_choice: plan.reason.clone(),
    };
    let mut metrics = PerformanceMetrics::build(
        run,
        results,
        discovery.missing.clone(),
        discovery.warnings.clone(),
    );
    metrics.environment = environment;
    events.emit(RunEvent::RunFinished {
        metrics: Box::new(metrics.clone()),
    });
    drop(events);
    let report_errors = dispatcher.await.unwrap_or_default();
    RunReport {
        metrics,
        report_errors,
    }
}

/// What, besides its source, a script's result depends on (see
/// [`history::fingerprint`]).
fn fingerprint_inputs(config: &RunConfig, interp: &Interpreter) -> Vec<(&'static str, String)> {
    let mut inputs = vec![
        ("interpreter", interp.path.display().to_string()),
        ("python", interp.info.python_version.clone()),
        ("jax", interp.info.jax_version.clone().unwrap_or_default()),
        (
            "jaxlib",
            interp.info.jaxlib_version.clone().unwrap_or_default(),
        ),
        ("device", config.device.as_str().to_string()),
    ];
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            (k.starts_with("JAX_") || k.starts_with("XLA_") || k == "CUDA_VISIBLE_DEVICES")
                && !k.starts_with("JAX_RUNNER_")
        })
        .chain(config.extra_env.iter().cloned())
        .collect();
    env.sort();
    inputs.extend(env.into_iter().map(|(k, v)| ("env", format!("{k}={v}"))));
    inputs
}

/// The runner's own peak RSS, from the kernel.
fn runner_peak_rss_mb() -> f64 {
    // SAFETY: getrusage fills a plain struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    usage.ru_maxrss as f64 / 1024.0
}
