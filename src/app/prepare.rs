//! Step 1 of a run, *prepare*: every decision made once, in one place, with its
//! reason: the sandbox, the scripts, the interpreter, the cluster, the pre-flight, the
//! platform and width, the compilation cache, the telemetry shim, warm start, and which
//! scripts run in what order (resume, history). Nothing runs a script here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::discover;
use super::schedule::{schedule, Inputs};
pub use super::surroundings::choose_sandbox;
use super::surroundings::compilation_cache;
use crate::config::RunConfig;
use crate::discovery::Discovery;
use crate::doctor::{self, DoctorReport, Live};
use crate::environment::Environment;
use crate::error::Error;
use crate::listing::{bounded_messages, first_named, LISTED, NAMED};
use crate::model::{Device, Platform};
use crate::plan::{plan, ray_plan, Cluster, Plan};
use crate::python::{Interpreter, Resolver};
use crate::report::gnn::GnnEntry;
use crate::results::past::History;
use crate::results::sweep::HistorySizes;
use crate::runner::ray::RayClient;

/// Everything decided before the first script starts.
#[derive(Debug)]
pub struct Prepared {
    pub discovery: Discovery,
    pub interpreter: Option<Interpreter>,
    pub plan: Plan,
    /// The pre-flight's report on the environment.
    pub environment: Option<DoctorReport>,
    /// GNN's step-12 places, by script id, when the layout is written.
    pub gnn: Option<HashMap<String, GnnEntry>>,
    /// The compilation cache in use, when it could be created.
    pub compilation_cache: Option<PathBuf>,
    /// What to say before the run starts.
    pub warnings: Vec<String>,
    /// What confines the scripts (`sandbox.layers`), for the run's record.
    pub sandbox_layers: Vec<String>,
    /// What to run, when there is anything (never for a dry run).
    pub execution: Option<Execution>,
    /// A dry run's plan: what would run, in what order, and how.
    pub dry: Option<super::dry::DryPlan>,
    /// The earlier runs' history folders' sizes, read while the zygote imports jax,
    /// for the sweep before the first script (see `HistorySizes`).
    pub history_sizes: Option<std::thread::JoinHandle<HistorySizes>>,
}

pub use super::local::Execution;

/// Prepares a run of `config`.
pub async fn prepare(config: &Arc<RunConfig>) -> Result<Prepared, Error> {
    let sandboxing = choose_sandbox(config)?;
    let discovery = discover(config)?;
    let mut warnings = discovery_warnings(&discovery);
    let interpreter = match discovery.scripts.is_empty() {
        true => None,
        false => {
            Some(resolve_interpreter(config.python.clone(), config.environment.clone()).await?)
        }
    };
    let cluster = match (&config.ray, &interpreter) {
        (Some(r), Some(_)) => {
            let client = RayClient::new(&r.address, r.token.clone());
            Some(client.check(config.device == Device::Gpu).await?)
        }
        (None, Some(_)) if config.slurm.is_some() => {
            Some(super::slurm::check(config, &mut warnings).await?)
        }
        _ => None,
    };
    let missing_layers = match (&sandboxing, &config.ray) {
        (Ok(s), None) => s.missing(),
        _ => None,
    };
    // Said after the plan's warnings, in the order they were always said.
    let mut later = Vec::new();
    // A Slurm job's node sandboxes its script (unless --sandbox off), so its cache is
    // a sandboxed run's: one per tree, never the one unsandboxed runs load.
    let sandboxed = sandboxing.is_ok()
        || (config.slurm.is_some() && config.sandbox != crate::model::SandboxMode::Off);
    let compilation_cache = compilation_cache(config, sandboxed, &mut later);
    // The backend is begun here, so that the zygote imports jax while the pre-flight,
    // the history and the schedule's fingerprints are made (issue 34's item 3).
    let (begun, sandboxing) = match &interpreter {
        Some(interp) if !config.dry_run => {
            let begun =
                super::local::begin(config, interp, sandboxing, &compilation_cache, &mut later)?;
            (Some(begun), None)
        }
        _ => (None, Some(sandboxing)),
    };
    // Beside the import too: the walk of the history the sweep weighs, which would
    // otherwise stand between the zygote's ready and the first script.
    let history_sizes = begun.is_some().then(|| {
        let (dir, id) = (config.results_dir.clone(), config.run_id.clone());
        std::thread::spawn(move || HistorySizes::read(&dir, &id))
    });
    let environment = match &interpreter {
        // On a Ray cluster this machine's GPUs do not matter: the cluster check did it.
        Some(interp) if config.preflight && config.ray.is_none() && config.slurm.is_none() => {
            let (config, interp) = (config.clone(), interp.clone());
            tokio::task::spawn_blocking(move || preflight(&config, &interp))
                .await
                .ok()
        }
        _ => None,
    };
    let history = History::load(&config.results_dir);
    let plan = plan_run(
        config,
        cluster.as_ref(),
        environment.as_ref(),
        &history,
        &mut warnings,
    );
    warnings.extend(missing_layers);
    warnings.extend(xla_preset_conflicts(config));
    if let (Some(reason), false) = (&plan.gpu_unusable, config.fallback_to_cpu) {
        warnings.push(format!(
            "GPU requested but unusable ({reason}) and --fallback none: scripts will fail"
        ));
    }
    warnings.extend(later);
    // Placed with the scripts the selection left out: a model's layout is the same
    // whatever `-k` picks, and their step-12 files are still theirs.
    let gnn = config.gnn_layout.then(|| {
        let mut all: Vec<_> = (discovery.scripts.iter())
            .chain(&discovery.unselected)
            .cloned()
            .collect();
        all.sort_by(|a, b| a.path.cmp(&b.path));
        crate::report::gnn::plan(&config.step12_dir, &all)
    });
    let inputs = interpreter.as_ref().map(|interp| Inputs {
        config,
        interp,
        discovery: &discovery,
        history: &history,
        gnn: gnn.as_ref(),
        jobs: plan.jobs,
    });
    let (execution, dry) = match (inputs, begun, sandboxing) {
        (Some(inputs), None, Some(sandboxing)) => {
            let dry = super::dry::DryPlan::new(
                config,
                &plan,
                &sandboxing,
                &discovery.scripts,
                schedule(&inputs),
            );
            (None, Some(dry))
        }
        (Some(inputs), Some(begun), _) => {
            let order = schedule(&inputs);
            let exec = super::local::finish(begun, order, &mut warnings).await;
            (Some(exec), None)
        }
        _ => (None, None),
    };
    let sandbox_layers = execution
        .as_ref()
        .map(|e| e.sandbox_info.layers.clone())
        .unwrap_or_default();
    Ok(Prepared {
        discovery,
        interpreter,
        plan,
        environment,
        gnn,
        compilation_cache,
        warnings,
        sandbox_layers,
        execution,
        dry,
        history_sizes,
    })
}

/// What discovery has to say before the run: one line per kind past a few, so
/// 200,000 missing entries make one warning.
fn discovery_warnings(discovery: &Discovery) -> Vec<String> {
    let mut warnings = bounded_messages(
        &discovery.warnings,
        LISTED,
        "discovery warnings (every one is in performance_metrics.json)",
    );
    match discovery.missing.as_slice() {
        [] => {}
        [m] => warnings.push(format!(
            "the render manifest lists {m}, which does not exist"
        )),
        many => warnings.push(format!(
            "the render manifest lists {} scripts that do not exist: {}",
            many.len(),
            first_named(many, NAMED)
        )),
    }
    warnings
}

/// The platform and width: the cluster's, or this machine's, where `--jobs` is lowered
/// to what the machine holds.
fn plan_run(
    config: &RunConfig,
    cluster: Option<&Cluster>,
    environment: Option<&DoctorReport>,
    history: &History,
    warnings: &mut Vec<String>,
) -> Plan {
    if let Some(c) = cluster {
        return ray_plan(config, c);
    }
    let learned = crate::plan::Learned {
        peak_mb: history.max_peak_mb(),
        gpu_peak_mb: history.max_gpu_peak_mb(),
    };
    let mut plan = plan(config, environment, learned);
    let (jobs, spare, lowered) = crate::runner::capacity::clamp_jobs_here(plan.jobs, plan.spare);
    (plan.jobs, plan.spare) = (jobs, spare);
    warnings.extend(lowered);
    plan
}

/// The interpreter, resolved off the async threads (a first run builds a venv).
async fn resolve_interpreter(
    flag: Option<PathBuf>,
    env: Arc<Environment>,
) -> Result<Interpreter, Error> {
    let interp = tokio::task::spawn_blocking(move || Resolver::from_env(flag, &env).resolve())
        .await
        .map_err(|e| Error::Runtime(std::io::Error::other(e)))??;
    tracing::info!(
        "python {} from {} ({}), jax {}",
        interp.info.python_version,
        interp.path.display(),
        interp.source.as_str(),
        interp.info.jax_version.as_deref().unwrap_or("?")
    );
    Ok(interp)
}

/// The pre-flight: doctor's inspection with a live check of only the accelerator the
/// run may use (the CPU needs none: the scripts themselves show whether it works).
fn preflight(config: &RunConfig, interp: &Interpreter) -> DoctorReport {
    let live: &'static [Platform] = match config.device {
        Device::Auto | Device::Gpu => &[Platform::Gpu],
        Device::Tpu => &[Platform::Tpu],
        Device::Cpu => &[],
    };
    doctor::inspect(interp, config.device, Live::Only(live), &config.environment)
}

/// Where the user's own settings win over `--xla-preset`'s, said once before the run.
fn xla_preset_conflicts(config: &RunConfig) -> Vec<String> {
    let Some(preset) = config.xla_preset else {
        return Vec::new();
    };
    let user = |name: &str| {
        let given = config.extra_env.iter().find(|(k, _)| k == name);
        given
            .map(|(_, v)| v.clone())
            .or_else(|| config.environment.var(name))
    };
    crate::gpu::xla::merge(preset, user("XLA_FLAGS").as_deref(), user).conflicts
}
