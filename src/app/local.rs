//! The backend, begun before the pre-flight so that the warm-start zygote imports jax
//! while the runner checks the environment, reads the history and fingerprints every
//! script; finished (the zygote awaited) just before the first script starts.

use std::path::PathBuf;
use std::sync::Arc;

use super::schedule::Schedule;
use super::surroundings::{announce, ready, sandbox_info, seccomp_filter, start_zygote, Starting};
use crate::config::RunConfig;
use crate::error::Error;
use crate::model::SandboxInfo;
use crate::python::Interpreter;
use crate::runner::backends::{self, Shared};
use crate::runner::ray::RayClient;
use crate::runner::zygote::Made;
use crate::runner::{telemetry, Backend};
use crate::sandbox::bwrap;
use crate::sandbox::layers::Sandboxing;
use crate::sandbox::policy::SandboxSetup;
use crate::sandbox::user::Identity;

/// What the runner needs.
#[derive(Debug)]
pub struct Execution {
    pub backend: Arc<dyn Backend>,
    pub sandbox_info: SandboxInfo,
    pub schedule: Schedule,
}

/// The backend's parts, made; on a local run the zygote may still be importing jax.
pub(super) struct Begun {
    shared: Shared,
    sandbox_info: SandboxInfo,
    kind: Kind,
}

/// Where the scripts go.
enum Kind {
    Ray,
    Slurm(Box<crate::runner::slurm::Slurm>),
    Local(Box<LocalParts>),
}

/// A local run's backend, but for its zygote's readiness.
struct LocalParts {
    python: PathBuf,
    sandbox: Option<SandboxSetup>,
    zygote: Result<Starting, String>,
}

/// Everything of the backend that does not wait for the zygote: who the scripts are,
/// the compilation cache given to them, the telemetry shim, the seccomp filter, the
/// sandbox, and the zygote started. What it has to say goes to `warnings`, in the
/// order a reader meets it.
pub(super) fn begin(
    config: &Arc<RunConfig>,
    interp: &Interpreter,
    sandboxing: Result<Sandboxing, String>,
    compilation_cache: &Option<PathBuf>,
    warnings: &mut Vec<String>,
) -> Result<Begun, Error> {
    let Setup {
        sandboxing,
        identity,
        compilation_cache,
    } = setup(config, interp, sandboxing, compilation_cache, warnings)?;
    let shim_dir = match telemetry::install(&crate::paths::cache_dir()) {
        Ok(dir) => {
            telemetry::compile_for(&dir, &interp.path, &interp.info.python_version);
            Some(dir)
        }
        Err(e) => {
            warnings.push(format!(
                "device telemetry disabled: failed to install the shim into {}: {e} ({})",
                crate::paths::cache_dir().display(),
                crate::paths::CACHE_DIR_FIX
            ));
            None
        }
    };
    let seccomp = match (&sandboxing, &config.ray) {
        (Ok(s), None) => seccomp_filter(s, config.may_use_gpu(), warnings),
        _ => Default::default(),
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
    if config.ray.is_some() {
        return Ok(Begun {
            shared,
            sandbox_info,
            kind: Kind::Ray,
        });
    }
    if config.slurm.is_some() {
        let slurm = super::slurm::backend(&shared, interp)?;
        return Ok(Begun {
            shared,
            sandbox_info,
            kind: Kind::Slurm(Box::new(slurm)),
        });
    }
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
    if config.gnn_layout {
        // The zygote binds the data folders' roots as they are when it starts.
        // Made without following a link planted on its path since the check.
        let _ = crate::confined::make_dir(&config.step12_dir);
    }
    let inside = sandbox.as_ref().map(|sb| sb.zygote(shared.place()));
    let zygote = start_zygote(config, interp, inside, shim_dir.as_deref(), warnings);
    Ok(Begun {
        shared,
        sandbox_info,
        kind: Kind::Local(Box::new(LocalParts {
            python: interp.path.clone(),
            sandbox,
            zygote,
        })),
    })
}

/// The backend, once the zygote is ready (or known not to be), with the run's order.
pub(super) async fn finish(
    begun: Begun,
    schedule: Schedule,
    warnings: &mut Vec<String>,
) -> Execution {
    let sandbox_info = begun.sandbox_info.clone();
    Execution {
        backend: backend(begun, warnings, schedule.uses_jax, schedule.ahead).await,
        sandbox_info,
        schedule,
    }
}

impl Begun {
    /// What confines the scripts, as the run records it.
    pub(super) fn sandbox_info(&self) -> &SandboxInfo {
        &self.sandbox_info
    }
}

/// The backend, once the zygote is ready (or known not to be); `uses_jax`: some
/// script of the run names jax (else a lean zygote serves); `ahead`: what the zygote
/// makes before its first fork (`app/ahead.rs`).
pub(super) async fn backend(
    begun: Begun,
    warnings: &mut Vec<String>,
    uses_jax: bool,
    ahead: Made,
) -> Arc<dyn Backend> {
    let Begun { shared, kind, .. } = begun;
    match kind {
        Kind::Slurm(slurm) => Arc::new(*slurm),
        Kind::Ray => {
            let r = shared
                .config
                .ray
                .clone()
                .expect("a Ray run has its options");
            Arc::new(backends::Ray {
                shared,
                client: RayClient::new(&r.address, r.token.clone()),
                max_return: r.max_return,
            })
        }
        Kind::Local(parts) => {
            let LocalParts {
                python,
                sandbox,
                zygote,
            } = *parts;
            // Started while the zygote still imports jax: its stale-cgroup sweep and
            // its fork and exec are then off the path to the first script (4-5 ms of
            // the 12 between the zygote's ready and the first request, measured).
            let sentinel = crate::runner::sentinel::start(
                &format!("{}:", shared.run_token),
                &crate::runner::limits::parent_dirs(),
            );
            let slots = shared.config.memory_limit.is_none()
                && crate::runner::limits::slot_homes_possible();
            if uses_jax {
                // Said while it imports: the context is then made as soon as it is ready,
                // by the run's zygote; or, where the scripts will go through slots of
                // their own, by each slot's zygote as it begins, side by side (the run's
                // zygote then forks the slots at once, and makes one only if a script
                // comes to it).
                let told = Made {
                    context: ahead.context && !slots,
                    ..ahead
                };
                announce(&zygote, told);
            }
            let warm = ready(zygote, uses_jax, warnings).await;
            if let Ok(z) = &warm {
                // The log says what a run's first scripts wait for.
                tracing::debug!(
                    "warm start: the zygote makes {} MLIR context ahead{}{}",
                    match ahead.context {
                        true => "the",
                        false => "no",
                    },
                    match ahead.context && slots {
                        true => " (each slot's zygote its own, as it begins)",
                        false => "",
                    },
                    match ahead.huge_pages {
                        true => " and moves its heap into 2 MiB pages",
                        false => "",
                    }
                );
                z.prepare(ahead);
            }
            Arc::new(backends::Local {
                sentinel,
                shared,
                python,
                sandbox,
                cold_reason: warm.as_ref().err().cloned(),
                zygote: warm.ok(),
                homes: Default::default(),
            })
        }
    }
}

/// How the run's scripts are sandboxed, as decided before the backend is made.
struct Setup {
    sandboxing: Result<Sandboxing, String>,
    identity: Arc<Identity>,
    compilation_cache: Option<PathBuf>,
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
