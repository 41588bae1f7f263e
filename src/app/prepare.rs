//! Step 1 of a run, *prepare*: every decision made once, in one place, with its
//! reason: the sandbox, the scripts, the interpreter, the cluster, the pre-flight, the
//! platform and width, the compilation cache, the telemetry shim, warm start, and which
//! scripts run in what order (resume, history). Nothing runs a script here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::discover;
use super::schedule::{schedule, Inputs, Schedule};
pub use super::surroundings::choose_sandbox;
use super::surroundings::{compilation_cache, sandbox_info, seccomp_filter, warm_start};
use crate::config::RunConfig;
use crate::discovery::Discovery;
use crate::doctor::{self, DoctorReport, Live};
use crate::environment::Environment;
use crate::error::Error;
use crate::listing::{bounded_messages, first_named, LISTED, NAMED};
use crate::model::{Device, Platform, SandboxInfo};
use crate::plan::{plan, ray_plan, Cluster, Plan};
use crate::python::{Interpreter, Resolver};
use crate::report::gnn::GnnEntry;
use crate::results::past::History;
use crate::runner::backends::{self, Shared};
use crate::runner::ray::RayClient;
use crate::runner::{telemetry, Backend};
use crate::sandbox::bwrap;
use crate::sandbox::layers::Sandboxing;
use crate::sandbox::policy::SandboxSetup;
use crate::sandbox::user::Identity;

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
}

/// What the runner needs.
#[derive(Debug)]
pub struct Execution {
    pub backend: Arc<dyn Backend>,
    pub sandbox_info: SandboxInfo,
    pub schedule: Schedule,
}

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
    let plan = plan_run(
        config,
        cluster.as_ref(),
        environment.as_ref(),
        &history,
        &mut warnings,
    );
    if let (Ok(s), None) = (&sandboxing, &config.ray) {
        warnings.extend(s.missing());
    }
    warnings.extend(xla_preset_conflicts(config));
    if let (Some(reason), false) = (&plan.gpu_unusable, config.fallback_to_cpu) {
        warnings.push(format!(
            "GPU requested but unusable ({reason}) and --fallback none: scripts will fail"
        ));
    }
    let compilation_cache = compilation_cache(config, sandboxing.is_ok(), &mut warnings);
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
    });
    let (execution, dry) = match inputs {
        Some(inputs) if config.dry_run => {
            let dry = super::dry::DryPlan::new(
                config,
                &plan,
                &sandboxing,
                &discovery.scripts,
                schedule(&inputs),
            );
            (None, Some(dry))
        }
        Some(inputs) => {
            let setup = setup(
                config,
                inputs.interp,
                sandboxing,
                &compilation_cache,
                &mut warnings,
            )?;
            let exec = execution(inputs, setup, &mut warnings).await;
            (Some(exec), None)
        }
        None => (None, None),
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
    let (jobs, lowered) = crate::runner::capacity::clamp_jobs_here(plan.jobs);
    plan.jobs = jobs;
    warnings.extend(lowered);
    plan
}

/// Who the scripts are on the host, and the cache they write: a root runner's take
/// an unused uid for the run (never for a dry run, which holds nothing).
fn setup(
    config: &RunConfig,
    interp: &Interpreter,
    sandboxing: Result<Sandboxing, String>,
    compilation_cache: &Option<PathBuf>,
    warnings: &mut Vec<String>,
) -> Result<Setup, Error> {
    let identity = match sandboxing.is_ok() {
        true => Identity::for_tree(&config.output_dir).map_err(|e| {
            Error::Config(crate::error::ConfigError::SandboxUnavailable {
                reason: format!("failed to choose the sandbox user: {e}"),
                hint: "run jax-runner as an ordinary user, or with --sandbox off",
            })
        })?,
        false => Identity::current(),
    };
    let no_view = sandboxing.as_ref().is_ok_and(|s| !s.has_view());
    if no_view {
        reachable(config, interp, &identity)?;
    }
    let compilation_cache = match (compilation_cache, sandboxing.is_ok()) {
        (Some(dir), true) => match identity.closed_on_the_way(dir).filter(|_| no_view) {
            Some((closed, mode)) => {
                warnings.push(format!(
                    "compilation cache disabled: the sandbox user cannot pass through {} (mode {mode:04o}) to {}; pass --compilation-cache with a folder outside it",
                    closed.display(),
                    dir.display()
                ));
                None
            }
            None => give_cache(dir, &identity, warnings),
        },
        (cache, _) => cache.clone(),
    };
    Ok(Setup {
        sandboxing,
        identity: Arc::new(identity),
        compilation_cache,
    })
}

/// For a root runner whose scripts get no view of their own (nothing bridges a
/// folder closed to the sandbox user, such as `/root`): that the user reaches the
/// interpreter's installation, the tree and the results, else why not and what to do.
fn reachable(config: &RunConfig, interp: &Interpreter, identity: &Identity) -> Result<(), Error> {
    let needed = bwrap::python_paths(&interp.path, &interp.info)
        .into_iter()
        .map(|p| ("the interpreter's installation", p))
        .chain([
            ("the tree", config.output_dir.clone()),
            ("the results folder", config.results_dir.clone()),
        ]);
    for (what, path) in needed {
        if let Some((closed, mode)) = identity.closed_on_the_way(&path) {
            return Err(Error::Config(
                crate::error::ConfigError::SandboxCannotReach {
                    uid: identity.uid,
                    what,
                    needed: path,
                    closed,
                    mode,
                },
            ));
        }
    }
    Ok(())
}

/// The compilation cache given to the sandbox user, who writes it; `None` (and a
/// warning) when that fails.
fn give_cache(
    dir: &std::path::Path,
    identity: &Identity,
    warnings: &mut Vec<String>,
) -> Option<PathBuf> {
    match identity.own_all(dir) {
        Ok(()) => Some(dir.to_path_buf()),
        Err(e) => {
            warnings.push(format!(
                "compilation cache disabled: failed to give {} to the sandbox user: {e}",
                dir.display()
            ));
            None
        }
    }
}

/// How the run's scripts are sandboxed, as decided before the backend is made.
struct Setup {
    sandboxing: Result<Sandboxing, String>,
    identity: Arc<Identity>,
    compilation_cache: Option<PathBuf>,
}

/// The backend, and which scripts run in what order.
async fn execution(inputs: Inputs<'_>, setup: Setup, warnings: &mut Vec<String>) -> Execution {
    let Setup {
        sandboxing,
        identity,
        compilation_cache,
    } = setup;
    let Inputs {
        config,
        interp,
        gnn,
        ..
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
    let seccomp = match (&sandboxing, &config.ray) {
        (Ok(s), None) => seccomp_filter(s, config.may_use_gpu(), warnings),
        _ => Vec::new(),
    };
    let sandbox_info = sandbox_info(config, &sandboxing, &identity, !seccomp.is_empty());
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
            let sandboxing_has_view = sandboxing.as_ref().is_ok_and(|s| s.has_view());
            let sandbox = sandboxing.ok().map(|sandboxing| SandboxSetup {
                sandboxing,
                home: config.environment.var_os("HOME").map(PathBuf::from),
                python_paths: bwrap::python_paths(&interp.path, &interp.info),
                seccomp,
                identity,
                helper: bwrap::helper(),
                // Only a run without a view of its own needs one; a failure to make it
                // fails each attempt with the reason.
                private_root: match sandboxing_has_view {
                    true => std::env::temp_dir(),
                    false => crate::sandbox::policy::private_root()
                        .unwrap_or_else(|_| std::env::temp_dir().join("jax-runner-unavailable")),
                },
            });
            if gnn.is_some() {
                // The zygote binds the data folders' roots as they are when it starts.
                // Made without following a link planted on its path since the check.
                let _ = crate::confined::make_dir(&config.step12_dir);
            }
            let inside = sandbox.as_ref().map(|sb| sb.zygote(shared.place()));
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
                homes: Default::default(),
            })
        }
    };
    Execution {
        backend,
        sandbox_info,
        schedule: schedule(&inputs),
    }
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
