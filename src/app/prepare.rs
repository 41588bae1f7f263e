//! Step 1 of a run, *prepare*: every decision made once, in one place, with its
//! reason: the sandbox, the scripts, the interpreter, the cluster, the pre-flight, the
//! platform and width, the compilation cache, the telemetry shim, warm start, and which
//! scripts run in what order (resume, history). Nothing runs a script here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::discover;
use crate::config::{CompilationCache, RunConfig, WarmStart};
use crate::discovery::{Discovery, Script};
use crate::doctor::{self, DoctorReport, Live};
use crate::error::{ConfigError, Error};
use crate::history::{self, History};
use crate::model::{Device, Platform, Reuse, SandboxInfo, SandboxMode, ScriptResult};
use crate::plan::{plan, ray_plan, Plan};
use crate::python::{Interpreter, Resolver};
use crate::report::gnn::GnnEntry;
use crate::runner::backends::{self, SandboxSetup, Shared};
use crate::runner::ray::RayClient;
use crate::runner::sandbox::{self, Bwrap};
use crate::runner::zygote::Zygote;
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
    pub fingerprints: HashMap<String, String>,
    pub data_dirs: HashMap<String, PathBuf>,
}

/// Prepares a run of `config`.
pub async fn prepare(config: &Arc<RunConfig>) -> Result<Prepared, Error> {
    let mut warnings = Vec::new();
    let bwrap = choose_sandbox(config)?;
    let discovery = discover(config)?;
    warnings.extend(discovery.warnings.iter().cloned());
    warnings.extend(
        discovery
            .missing
            .iter()
            .map(|m| format!("the render manifest lists {m}, which does not exist")),
    );
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
    let plan = match &cluster {
        Some(c) => ray_plan(config, c),
        None => plan(config, environment.as_ref(), history.max_peak_mb()),
    };
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
    let compilation_cache = compilation_cache(config, &mut warnings);
    let gnn = config
        .gnn_layout
        .then(|| crate::report::gnn::plan(&config.step12_dir, &discovery.scripts));
    let execution = match &interpreter {
        Some(interp) => Some(
            execution(
                config,
                interp,
                &discovery,
                bwrap,
                &history,
                gnn.as_ref(),
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

/// The backend, and which scripts run in what order.
#[allow(clippy::too_many_arguments)]
async fn execution(
    config: &Arc<RunConfig>,
    interp: &Interpreter,
    discovery: &Discovery,
    bwrap: Result<Bwrap, String>,
    history: &History,
    gnn: Option<&HashMap<String, GnnEntry>>,
    compilation_cache: Option<PathBuf>,
    warnings: &mut Vec<String>,
) -> Execution {
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
        }),
        None => {
            let zygote = warm_start(config, interp, bwrap.is_ok(), shim_dir, warnings).await;
            Arc::new(backends::Local {
                shared,
                python: interp.path.clone(),
                sandbox: bwrap.ok().map(|bwrap| SandboxSetup {
                    bwrap,
                    home: std::env::var_os("HOME").map(PathBuf::from),
                    python_paths: sandbox::python_paths(
                        &interp.path,
                        &interp.info.prefix,
                        &interp.info.base_prefix,
                    ),
                    seccomp: seccomp_filter(warnings),
                }),
                zygote,
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

/// Whether scripts run sandboxed: bwrap when it works (`auto`, `on`), else why not.
/// `--sandbox on` without a working bwrap is an error that says how to install it.
pub fn choose_sandbox(config: &RunConfig) -> Result<Result<Bwrap, String>, ConfigError> {
    if config.ray.is_some() {
        return Ok(Err("scripts run on the Ray cluster".into()));
    }
    match config.sandbox {
        SandboxMode::Off => Ok(Err("--sandbox off".into())),
        mode => match sandbox::detect() {
            Ok(b) => Ok(Ok(b)),
            Err(reason) if mode == SandboxMode::On => Err(ConfigError::SandboxUnavailable {
                reason: reason.to_string(),
                hint: sandbox::INSTALL_HINT,
            }),
            Err(reason) => Ok(Err(reason.to_string())),
        },
    }
}

/// The seccomp program for sandboxed scripts; without one they still run with no
/// capabilities, and the run says the filter is missing.
fn seccomp_filter(warnings: &mut Vec<String>) -> Option<PathBuf> {
    match crate::runner::seccomp::install(&crate::paths::cache_dir()) {
        Ok(Some(path)) => Some(path),
        Ok(None) => {
            warnings.push(
                "no seccomp filter for this processor: sandboxed scripts run without one".into(),
            );
            None
        }
        Err(e) => {
            warnings.push(format!("seccomp filter disabled: failed to write it: {e}"));
            None
        }
    }
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

/// The compilation cache folder, created; `None` (and a warning) when it cannot be.
fn compilation_cache(config: &RunConfig, warnings: &mut Vec<String>) -> Option<PathBuf> {
    match &config.compilation_cache {
        CompilationCache::Off => None,
        CompilationCache::Dir(dir) => match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.clone()),
            Err(e) => {
                warnings.push(format!(
                    "compilation cache disabled: failed to create {}: {e}",
                    dir.display()
                ));
                None
            }
        },
    }
}

/// The warm-start zygote, when warm start is on and possible.
async fn warm_start(
    config: &RunConfig,
    interp: &Interpreter,
    sandboxed: bool,
    shim_dir: Option<PathBuf>,
    warnings: &mut Vec<String>,
) -> Option<Arc<Zygote>> {
    match (config.warm_start, sandboxed) {
        (WarmStart::On | WarmStart::Auto, false) => {
            let env = zygote_env(shim_dir.as_deref());
            let python = interp.path.clone();
            let started = tokio::task::spawn_blocking(move || Zygote::start(&python, &env))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            match started {
                Ok(z) => Some(Arc::new(z)),
                Err(reason) => {
                    warnings.push(format!(
                        "warm start unavailable, scripts start cold: {reason}"
                    ));
                    None
                }
            }
        }
        (WarmStart::On, true) => {
            warnings.push(
                "warm start is off for sandboxed runs: each script needs its own mounts".into(),
            );
            None
        }
        _ => None,
    }
}

/// The zygote's own environment: the parent's, with the telemetry shim on
/// `PYTHONPATH` (each script's own variables are applied in its process).
fn zygote_env(shim_dir: Option<&std::path::Path>) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<_> = std::env::vars_os()
        .filter(|(k, _)| k != "PYTHONPATH" && k != "JAX_PLATFORM_NAME")
        .collect();
    if let Some(dir) = shim_dir {
        env.push(("PYTHONPATH".into(), telemetry::python_path(dir)));
    }
    // Importing jax must not reach for a GPU; scripts set their own platform.
    env.push(("JAX_PLATFORMS".into(), "cpu".into()));
    env
}

/// What every result says about isolation.
fn sandbox_info(config: &RunConfig, bwrap: &Result<Bwrap, String>) -> SandboxInfo {
    let on = bwrap.is_ok();
    SandboxInfo {
        kind: if on { "bwrap" } else { "none" }.into(),
        reason: bwrap.as_ref().err().cloned(),
        network: !on,
        home_visible: !on,
        environment: if on { "allowlist" } else { "inherited" }.into(),
        memory_limit_mb: config.memory_limit.map(|b| b as f64 / (1024.0 * 1024.0)),
        max_procs: config.max_procs,
        max_procs_enforced_by: None,
        memory_limit_enforced_by: None,
        capabilities: None,
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
