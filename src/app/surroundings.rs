//! The surroundings each script runs in, decided during *prepare*: the sandbox (or
//! why not), its seccomp filter, the compilation cache, and the warm-start zygote.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{CompilationCache, RunConfig, WarmStart};
use crate::environment::Environment;
use crate::error::ConfigError;
use crate::model::{SandboxInfo, SandboxMode};
use crate::python::Interpreter;
use crate::runner::telemetry;
use crate::runner::zygote::{Made, Preload, Zygote, ZygoteSandbox};
use crate::sandbox::bwrap;
use crate::sandbox::layers::Sandboxing;
use crate::sandbox::seccomp::Filters;

/// How scripts are sandboxed (or why not): `auto` and `on` take every layer this
/// machine has (bwrap where it works, Landlock where the kernel has it, for a root
/// runner its own namespaces where it may make them, and the seccomp filter); `bwrap`
/// insists on bubblewrap, `landlock` on the built-in layer alone. A mode that cannot be
/// had is a usage error that says what would make it so.
pub fn choose_sandbox(config: &RunConfig) -> Result<Result<Sandboxing, String>, ConfigError> {
    if config.ray.is_some() {
        return Ok(Err("scripts run on the Ray cluster".into()));
    }
    if config.slurm.is_some() {
        // Each job's node confines its script with the layers it has: every attempt's
        // `slurm.sandbox_layers` says which.
        return Ok(Err(
            "scripts run as Slurm jobs, sandboxed by each node".into()
        ));
    }
    let mode = config.sandbox;
    if mode == SandboxMode::Off {
        return Ok(Err("--sandbox off".into()));
    }
    let landlock = crate::sandbox::landlock::abi();
    let bwrap = match mode {
        SandboxMode::Landlock => Err(crate::error::SandboxError::NotAsked),
        _ => bwrap::detect(),
    };
    if let (SandboxMode::Bwrap, Err(reason)) = (mode, &bwrap) {
        return Err(ConfigError::SandboxUnavailable {
            reason: reason.to_string(),
            hint: bwrap::INSTALL_HINT,
        });
    }
    if let (SandboxMode::Landlock, None) = (mode, landlock) {
        return Err(ConfigError::SandboxUnavailable {
            reason: "this kernel has no Landlock".into(),
            hint: "a kernel with Landlock (Linux 5.13+, `landlock` in its lsm= list), or --sandbox bwrap",
        });
    }
    let bwrap_missing = bwrap.as_ref().err().map(ToString::to_string);
    let bwrap = bwrap.ok();
    // A root runner's own namespaces stand in for a missing bwrap; `landlock` asks for
    // the built-in layer alone (Landlock, the filter, the sandbox uid).
    let namespaces = bwrap.is_none()
        && mode != SandboxMode::Landlock
        && crate::sandbox::layers::namespaces_here();
    let sandboxing = Sandboxing {
        bwrap,
        namespaces,
        landlock,
    };
    if mode == SandboxMode::On && !sandboxing.holds_files(rustix::process::geteuid().is_root()) {
        return Err(ConfigError::SandboxUnavailable {
            reason: format!(
                "{}, and this kernel has no Landlock: only the seccomp filter would hold \
                 the scripts, which could read and write whatever your user can",
                bwrap_missing.unwrap_or_else(|| "bwrap does not work here".into())
            ),
            hint: bwrap::INSTALL_HINT,
        });
    }
    Ok(Ok(sandboxing))
}

/// The seccomp programs for sandboxed scripts (granting calls on other processes, host
/// IPC and the network's sockets only where namespaces separate the scripts, and the
/// CUDA driver's socket only to a run that may use a GPU), held in memory; on a
/// processor without them scripts still run with no capabilities, and the run says
/// the filter is missing.
pub(super) fn seccomp_filter(
    sandboxing: &Sandboxing,
    gpu: bool,
    warnings: &mut Vec<String>,
) -> Filters {
    Filters::for_run(sandboxing.separation(), gpu).unwrap_or_else(|| {
        warnings
            .push("no seccomp filter for this processor: sandboxed scripts run without one".into());
        Filters::default()
    })
}

/// The compilation cache folder, created; `None` (and a warning) when it cannot be.
///
/// A sandboxed script can write the cache, so an entry it plants is loaded by any
/// script that later compiles the same computation. By default sandboxed runs keep a
/// cache per tree (`--output-dir`), beside the one unsandboxed runs use: a script can
/// change only what the scripts of its own tree compute, never another tree's, nor a
/// script running outside the sandbox. A folder named with `--compilation-cache` is
/// used as given, by both.
pub(super) fn compilation_cache(
    config: &RunConfig,
    sandboxed: bool,
    warnings: &mut Vec<String>,
) -> Option<PathBuf> {
    let dir = cache_folder(config, sandboxed)?;
    let default = CompilationCache::default_dir();
    match std::fs::create_dir_all(&dir) {
        Ok(()) => {
            if sandboxed
                && matches!(&config.compilation_cache, CompilationCache::Dir(d) if *d == default)
            {
                super::cache::forget_unused(&dir);
            }
            Some(dir)
        }
        Err(e) => {
            // The default lies in jax-runner's cache folder; a named one is the user's.
            let fix = match &config.compilation_cache {
                CompilationCache::Dir(d) if *d == default => crate::paths::CACHE_DIR_FIX,
                _ => "name a folder you can write with --compilation-cache, or turn it off",
            };
            warnings.push(format!(
                "compilation cache disabled: failed to create {}: {e} ({fix})",
                dir.display()
            ));
            None
        }
    }
}

/// The folder of [`compilation_cache`], not yet created.
fn cache_folder(config: &RunConfig, sandboxed: bool) -> Option<PathBuf> {
    match &config.compilation_cache {
        CompilationCache::Off => None,
        CompilationCache::Dir(dir) if sandboxed && *dir == CompilationCache::default_dir() => {
            Some(super::cache::tree_cache(
                &dir.with_file_name("jax-compilation-cache-sandboxed"),
                &config.output_dir,
            ))
        }
        CompilationCache::Dir(dir) => Some(dir.clone()),
    }
}

/// A zygote importing jax, not yet awaited: the run's other preparations (the
/// pre-flight, the history, each script's fingerprint) go on meanwhile.
pub(super) struct Starting {
    /// Its wait for the zygote's ready.
    task: tokio::task::JoinHandle<Result<Arc<Zygote>, String>>,
    /// The zygote, to stop at once if a lean one takes its place (none: it failed to
    /// start, and the task says why).
    zygote: Option<Arc<Zygote>>,
    /// How it was started, to start the lean one alike.
    launch: Launch,
}

/// What a zygote is started with.
struct Launch {
    python: PathBuf,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    sandbox: Option<ZygoteSandbox>,
}

impl Launch {
    /// Starts a zygote and waits for its ready in the blocking pool. Called from a
    /// runtime worker, which lives as long as the run (see `Zygote::launch`).
    fn start(&self, preload: Preload) -> (Option<Arc<Zygote>>, Waiting) {
        match Zygote::launch(&self.python, &self.env, self.sandbox.as_ref(), preload) {
            Ok(z) => {
                let z = Arc::new(z);
                let waiting = z.clone();
                let task = tokio::task::spawn_blocking(move || {
                    waiting.wait_ready().map_err(|e| e.to_string())?;
                    Ok(waiting)
                });
                (Some(z), task)
            }
            Err(e) => (
                None,
                tokio::task::spawn(std::future::ready(Err(e.to_string()))),
            ),
        }
    }
}

type Waiting = tokio::task::JoinHandle<Result<Arc<Zygote>, String>>;

/// Starts the warm-start zygote, when warm start is on and possible; otherwise why
/// every script of the run starts cold (each result says so in `cold_start_reason`).
/// `sandbox` is `None` for an unsandboxed run, else how to start the zygote inside the
/// sandbox (or why that cannot be done here). [`ready`] waits for it.
pub(super) fn start_zygote(
    config: &RunConfig,
    interp: &Interpreter,
    sandbox: Option<Result<ZygoteSandbox, String>>,
    shim_dir: Option<&std::path::Path>,
    warnings: &mut Vec<String>,
) -> Result<Starting, String> {
    if config.warm_start == WarmStart::Off {
        return Err("--warm-start off".into());
    }
    let sandbox = match sandbox {
        Some(Err(reason)) => {
            // A library that could not be written into the cache folder is the user's
            // to fix (the folder's permissions, a full disk): said under `auto` too.
            let fixable = reason.contains(crate::sandbox::bwrap::LIBRARY);
            if config.warm_start == WarmStart::On || fixable {
                warnings.push(format!("warm start is off, scripts start cold: {reason}"));
            }
            return Err(reason);
        }
        Some(Ok(sb)) => Some(sb),
        None => None,
    };
    let pass = sandbox.as_ref().map(|_| config.pass_env.as_slice());
    let env = zygote_env(&config.environment, shim_dir, pass);
    let launch = Launch {
        python: interp.path.clone(),
        env,
        sandbox,
    };
    let (zygote, task) = launch.start(Preload::Jax);
    Ok(Starting {
        task,
        zygote,
        launch,
    })
}

/// Tells the zygote [`start_zygote`] started, while it imports, what to make ahead
/// ([`Zygote::announce`]).
pub(super) fn announce(starting: &Result<Starting, String>, ahead: Made) {
    if let Ok(Starting {
        zygote: Some(z), ..
    }) = starting
    {
        z.announce(ahead);
    }
}

/// The zygote [`start_zygote`] started, once it has imported jax; otherwise why every
/// script starts cold (and a warning when it failed to start). For a run none of
/// whose scripts names jax (`uses_jax` false), a lean zygote takes its place, and the
/// one importing jax is stopped; should the lean one fail, the other serves.
pub(super) async fn ready(
    starting: Result<Starting, String>,
    uses_jax: bool,
    warnings: &mut Vec<String>,
) -> Result<Arc<Zygote>, String> {
    let Starting {
        task,
        zygote,
        launch,
    } = starting?;
    if !uses_jax && zygote.is_some() {
        let (_, lean) = launch.start(Preload::Lean);
        match lean.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(lean) => {
                zygote.iter().for_each(|z| z.stop());
                return Ok(lean);
            }
            Err(reason) => tracing::info!("no lean zygote, the one with jax serves: {reason}"),
        }
    }
    drop(zygote);
    let started = task.await.map_err(|e| e.to_string()).and_then(|r| r);
    started.map_err(|reason| {
        warnings.push(format!(
            "warm start unavailable, scripts start cold: {reason}"
        ));
        format!("the zygote did not start: {reason}")
    })
}

/// The zygote's own environment: the parent's, with the telemetry shim on
/// `PYTHONPATH` (each script's own variables are applied in its process). Inside the
/// sandbox only what a sandboxed script may see: a forked script's
/// `/proc/self/environ` still shows the zygote's start-up environment, and a `JAX_*`
/// variable jax read at import would otherwise stay in force for every script.
pub(super) fn zygote_env(
    parent: &Environment,
    shim_dir: Option<&std::path::Path>,
    sandboxed: Option<&[String]>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<_> = parent
        .iter()
        .map(|(k, v)| (k.to_os_string(), v.to_os_string()))
        .filter(|(k, _)| k != "PYTHONPATH" && k != "JAX_PLATFORM_NAME")
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            match sandboxed {
                None => true,
                Some(pass) => {
                    crate::runner::env::allowlisted(&name) || pass.iter().any(|p| *p == name)
                }
            }
        })
        .collect();
    if let Some(dir) = shim_dir {
        env.push(("PYTHONPATH".into(), telemetry::python_path(dir, parent)));
    }
    // Importing jax must not reach for a GPU; scripts set their own platform.
    env.push(("JAX_PLATFORMS".into(), "cpu".into()));
    // The shim then leaves any other sitecustomize to each forked script.
    env.push(("JAX_RUNNER_ZYGOTE".into(), "1".into()));
    env
}

/// What every result says about isolation.
pub(super) fn sandbox_info(
    config: &RunConfig,
    sandboxing: &Result<Sandboxing, String>,
    identity: &crate::sandbox::user::Identity,
    seccomp: bool,
) -> SandboxInfo {
    let on = sandboxing.is_ok();
    let (view, landlock) = match sandboxing {
        Ok(s) => (s.has_view(), s.landlock.unwrap_or(0)),
        Err(_) => (false, 0),
    };
    // Without a view of its own, the filter refuses the network's sockets and
    // Landlock (ABI 4) TCP; only with neither does a script reach the network.
    let network = !on || (!view && !seccomp && landlock < 4);
    SandboxInfo {
        kind: match sandboxing {
            Ok(s) => s.kind(),
            Err(_) => "none",
        }
        .into(),
        layers: sandboxing
            .as_ref()
            .map(|s| s.layers(identity.switched, seccomp))
            .unwrap_or_default(),
        uid: Some(identity.uid),
        reason: sandboxing.as_ref().err().cloned(),
        network,
        home_visible: !on || (!view && landlock == 0),
        environment: if on { "allowlist" } else { "inherited" }.into(),
        memory_limit_mb: config.memory_limit.map(|b| b as f64 / (1024.0 * 1024.0)),
        // A Ray job's wrapper holds it to the limit, as the watchdog holds a local one.
        max_procs: Some(config.process_limit()),
        max_procs_enforced_by: None,
        memory_limit_enforced_by: None,
        capabilities: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxed_runs_keep_a_default_cache_per_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = crate::config::test_options(tmp.path());
        opts.compilation_cache = None;
        let config = RunConfig::from_options(opts.clone()).unwrap();
        let shared = CompilationCache::default_dir();
        assert_eq!(cache_folder(&config, false), Some(shared.clone()));
        let own = cache_folder(&config, true).unwrap();
        assert_ne!(
            own, shared,
            "nothing planted inside reaches an unsandboxed run"
        );
        assert_eq!(
            own.parent().unwrap().parent(),
            shared.parent(),
            "beside the shared cache: {own:?}"
        );
        // Another tree, another cache: a plant reaches only its own tree's scripts.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let mut opts_b = crate::config::test_options(&other);
        opts_b.compilation_cache = None;
        let config_b = RunConfig::from_options(opts_b).unwrap();
        let theirs = cache_folder(&config_b, true).unwrap();
        assert_ne!(own, theirs);
        assert_eq!(own.parent(), theirs.parent());
        // A folder the user names is used as given.
        let named = tmp.path().join("cache");
        opts.compilation_cache = Some(named.to_string_lossy().into_owned());
        let config = RunConfig::from_options(opts).unwrap();
        assert_eq!(cache_folder(&config, true), Some(named));
    }
}
