//! Step 1 of a run, *prepare*: every decision made once, in one place, with its
//! reason: the sandbox, the scripts, the interpreter, the cluster, the pre-flight, the
//! platform and width, the compilation cache, the telemetry shim, warm start, and which
//! scripts run in what order (resume, history). Nothing runs a script here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::discover;
pub use super::surroundings::choose_sandbox;
use super::surroundings::{compilation_cache, sandbox_info, seccomp_filter, warm_start};
use crate::config::RunConfig;
use crate::discovery::{Discovery, Script};
use crate::doctor::{self, DoctorReport, Live};
use crate::error::Error;
use crate::history::{self, History};
use crate::listing::{bounded_messages, first_named, LISTED, NAMED};
use crate::model::{Device, Platform, Reuse, SandboxInfo, SandboxMode, ScriptResult};
use crate::plan::{plan, ray_plan, Plan};
use crate::python::{Interpreter, Resolver};
use crate::report::gnn::GnnEntry;
use crate::runner::backends::{self, SandboxSetup, Shared};
use crate::runner::ray::RayClient;
use crate::runner::sandbox::{self, Bwrap};
use crate::runner::{telemetry, Backend};

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
    /// What to run, when there is anything.
    pub execution: Option<Execution>,
}

/// What the runner needs.
#[derive(Debug)]
pub struct Execution {
    pub backend: Arc<dyn Backend>,
    pub sandbox_info: SandboxInfo,
    /// Earlier successes `--resume`/`--rerun-failed` keep, by discovery index.
    pub kept: Vec<(usize, ScriptResult)>,
    /// The scripts to run, longest expected first, with their discovery index.
    pub order: Vec<(usize, Script)>,
    /// Seconds the scripts to run should take in all, one after another, when the
    /// history knows enough to say.
    pub expected_s: Option<f64>,
    pub fingerprints: HashMap<String, String>,
    pub data_dirs: HashMap<String, PathBuf>,
}

/// Prepares a run of `config`.
pub async fn prepare(config: &Arc<RunConfig>) -> Result<Prepared, Error> {
    let mut warnings = Vec::new();
    let bwrap = choose_sandbox(config)?;
    let discovery = discover(config)?;
    // One line per kind past a few: 200,000 missing entries make one warning.
    warnings.extend(bounded_messages(
        &discovery.warnings,
        LISTED,
        "discovery warnings (every one is in performance_metrics.json)",
    ));
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
    let interpreter = match discovery.scripts.is_empty() {
        true => None,
        false => Some(resolve_interpreter(config.python.clone()).await?),
    };
    let cluster = match (&config.ray, &interpreter) {
        (Some(r), Some(_)) => {
            let client = RayClient::new(&r.address, r.token.clone());
            Some(client.check(config.device == Device::Gpu).await?)
        }
        _ => None,
    };
    let environment = match &interpreter {
        // On a Ray cluster this machine's GPUs do not matter: the cluster check did it.
        Some(interp) if config.preflight && config.ray.is_none() => {
            let (config, interp) = (config.clone(), interp.clone());
            tokio::task::spawn_blocking(move || preflight(&config, &interp))
                .await
                .ok()
        }
        _ => None,
    };
    let history = History::load(&config.results_dir);
    let mut plan = match &cluster {
        Some(c) => ray_plan(config, c),
        None => plan(config, environment.as_ref(), history.max_peak_mb()),
    };
    if cluster.is_none() {
        let (jobs, lowered) = crate::runner::capacity::clamp_jobs_here(plan.jobs);
        plan.jobs = jobs;
        warnings.extend(lowered);
    }
    if let (Err(reason), SandboxMode::Auto, None) = (&bwrap, config.sandbox, &config.ray) {
        warnings.push(format!(
            "scripts run without a sandbox: {reason} (install it with `{}`)",
            sandbox::INSTALL_HINT
        ));
    }
    if let (Some(reason), false) = (&plan.gpu_unusable, config.fallback_to_cpu) {
        warnings.push(format!(
            "GPU requested but unusable ({reason}) and --fallback none: scripts will fail"
        ));
    }
    let compilation_cache = compilation_cache(config, bwrap.is_ok(), &mut warnings);
    let gnn = config
        .gnn_layout
        .then(|| crate::report::gnn::plan(&config.step12_dir, &discovery.scripts));
    let execution = match &interpreter {
        Some(interp) => Some(
            execution(
                Inputs {
                    config,
                    interp,
                    discovery: &discovery,
                    history: &history,
                    gnn: gnn.as_ref(),
                },
                bwrap,
                compilation_cache.clone(),
                &mut warnings,
            )
            .await,
        ),
        None => None,
    };
    Ok(Prepared {
        discovery,
        interpreter,
        plan,
        environment,
        gnn,
        compilation_cache,
        warnings,
        execution,
    })
}

/// What the run's execution is decided from.
struct Inputs<'a> {
    config: &'a Arc<RunConfig>,
    interp: &'a Interpreter,
    discovery: &'a Discovery,
    history: &'a History,
    gnn: Option<&'a HashMap<String, GnnEntry>>,
}

/// The backend, and which scripts run in what order.
async fn execution(
    inputs: Inputs<'_>,
    bwrap: Result<Bwrap, String>,
    compilation_cache: Option<PathBuf>,
    warnings: &mut Vec<String>,
) -> Execution {
    let Inputs {
        config,
        interp,
        discovery,
        history,
        gnn,
    } = inputs;
    let shim_dir = match telemetry::install(&crate::paths::cache_dir()) {
        Ok(dir) => Some(dir),
        Err(e) => {
            warnings.push(format!(
                "device telemetry disabled: failed to install the shim: {e}"
            ));
            None
        }
    };
    let sandbox_info = sandbox_info(config, &bwrap);
    let shared = Shared {
        config: config.clone(),
        compilation_cache,
        shim_dir: shim_dir.clone(),
        run_token: format!(
            "{}-{}",
            std::process::id(),
            crate::paths::rfc3339(std::time::SystemTime::now())
        ),
    };
    let backend: Arc<dyn Backend> = match &config.ray {
        Some(r) => Arc::new(backends::Ray {
            shared,
            client: RayClient::new(&r.address, r.token.clone()),
            max_return: r.max_return,
        }),
        None => {
            let sandbox = bwrap.ok().map(|bwrap| SandboxSetup {
                bwrap,
                home: std::env::var_os("HOME").map(PathBuf::from),
                python_paths: sandbox::python_paths(
                    &interp.path,
                    &interp.info.prefix,
                    &interp.info.base_prefix,
                ),
                seccomp: seccomp_filter(warnings),
            });
            if gnn.is_some() {
                // The zygote binds the data folders' roots as they are when it starts.
                let _ = std::fs::create_dir_all(&config.step12_dir);
            }
            let inside = sandbox.as_ref().map(|sb| sb.zygote(&shared));
            let warm = warm_start(config, interp, inside, shim_dir, warnings).await;
            let sentinel = crate::runner::sentinel::start(
                &format!("{}:", shared.run_token),
                &crate::runner::limits::parent_dirs(),
            );
            Arc::new(backends::Local {
                sentinel,
                shared,
                python: interp.path.clone(),
                sandbox,
                cold_reason: warm.as_ref().err().cloned(),
                zygote: warm.ok(),
            })
        }
    };
    let data_dirs: HashMap<String, PathBuf> = discovery
        .scripts
        .iter()
        .map(|s| {
            let dir = match gnn.and_then(|g| g.get(&s.id)) {
                // GNN's layout points GNN_OUTPUT_DIR at 12_execute_output/…/simulation_data.
                Some(e) => e.data_dir.clone(),
                None => crate::runner::default_data_dir(&config.results_dir, &s.id),
            };
            (s.id.clone(), dir)
        })
        .collect();
    let inputs = fingerprint_inputs(config, interp);
    let fingerprints: HashMap<String, String> = discovery
        .scripts
        .iter()
        .map(|s| (s.id.clone(), history::fingerprint(s, &inputs)))
        .collect();
    let (kept, to_run) = reuse(config, discovery, &fingerprints, &data_dirs);
    // Longest expected first, so a long script does not start last and leave the
    // other slots idle at the end.
    let scripts: Vec<Script> = to_run.iter().map(|(_, s)| s.clone()).collect();
    let expected_s = history.expected_total(&scripts);
    let order = history
        .schedule(&scripts)
        .into_iter()
        .map(|k| to_run[k].clone())
        .collect();
    Execution {
        backend,
        sandbox_info,
        kept,
        order,
        expected_s,
        fingerprints,
        data_dirs,
    }
}

/// Splits the scripts into earlier successes that stand and scripts to run.
type Split = (Vec<(usize, ScriptResult)>, Vec<(usize, Script)>);

/// `--resume`/`--rerun-failed`: a kept success must match and still have its outputs
/// where it says.
fn reuse(
    config: &RunConfig,
    discovery: &Discovery,
    fingerprints: &HashMap<String, String>,
    data_dirs: &HashMap<String, PathBuf>,
) -> Split {
    let (mut kept, mut to_run) = (Vec::new(), Vec::new());
    for (i, s) in discovery.scripts.iter().enumerate() {
        let previous = (config.reuse != Reuse::None)
            .then(|| history::previous_result(&config.results_dir, &s.id))
            .flatten()
            .filter(|p| history::keeps(config.reuse, p, &fingerprints[&s.id]))
            .filter(|p| match history::outputs_intact(p, &data_dirs[&s.id]) {
                Ok(()) => true,
                Err(why) => {
                    tracing::info!("{} runs again: {why}", s.id);
                    false
                }
            });
        match previous {
            Some(p) => kept.push((i, p)),
            None => to_run.push((i, s.clone())),
        }
    }
    if !kept.is_empty() {
        tracing::info!(
            "kept {} earlier success(es), running {} script(s)",
            kept.len(),
            to_run.len()
        );
    }
    (kept, to_run)
}

/// The interpreter, resolved off the async threads (a first run builds a venv).
async fn resolve_interpreter(flag: Option<PathBuf>) -> Result<Interpreter, Error> {
    let interp = tokio::task::spawn_blocking(move || Resolver::from_env(flag).resolve())
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
    doctor::inspect(interp, config.device, Live::Only(live))
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
