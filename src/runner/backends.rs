//! The two [`Backend`]s: local processes (sandboxed or not, warm or cold, with the
//! kernel's and the watchdog's limits) and Ray jobs. Each turns an
//! [`AttemptRequest`] into its own way of running the script; both build the
//! script's environment the same way.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::attempt::{
    AttemptError, AttemptFuture, AttemptRequest, AttemptSpec, Attempted, Backend, Enforced,
    SampleSink, Start,
};
use super::homes::SlotHome;
use super::zygote::Zygote;
use super::{child, env, limits, ray, telemetry, Stop};
use crate::config::RunConfig;
use crate::model::Platform;
use crate::sandbox::policy::{SandboxSetup, SandboxSpec};
use crate::sandbox::view::MountStep;

/// What both backends share: the run's options and what the run set up for them.
#[derive(Debug, Clone)]
pub struct Shared {
    pub config: Arc<RunConfig>,
    /// The persistent compilation cache, when it could be created.
    pub compilation_cache: Option<PathBuf>,
    /// The telemetry shim's folder, when installed.
    pub shim_dir: Option<PathBuf>,
    /// Unique per run; part of every attempt's leak-tracing token and job id.
    pub run_token: String,
}

impl Shared {
    /// What every attempt's sandbox is cut from.
    pub fn place(&self) -> crate::sandbox::policy::RunPlace<'_> {
        crate::sandbox::policy::RunPlace {
            config: &self.config,
            shim_dir: self.shim_dir.as_deref(),
            compilation_cache: self.compilation_cache.as_deref(),
        }
    }

    /// The attempt's environment: sandboxed runs start from the allowlist and
    /// `--env-pass`; both get the runner's settings, then `--env`, which win.
    fn env(
        &self,
        req: &AttemptRequest<'_>,
        sandboxed: bool,
        private: Option<&Path>,
    ) -> Vec<(OsString, OsString)> {
        // In the data folder: the one place a sandboxed script may write.
        let report = telemetry_report(req);
        let _ = std::fs::remove_file(&report);
        let profile_dir = self
            .config
            .jax_trace
            .then(|| req.data_dir.join(format!("profile-attempt{}", req.number)));
        let runner = env::child_env(&env::EnvSpec {
            platform: req.platform,
            data_dir: req.data_dir,
            attempt: req.number,
            compilation_cache: self.compilation_cache.as_deref(),
            telemetry: self.shim_dir.as_ref().map(|dir| {
                (
                    report.as_path(),
                    telemetry::python_path(dir, &self.config.environment),
                )
            }),
            profile_dir: profile_dir.as_deref(),
            gpu: req.gpu,
        });
        let preset = self
            .config
            .xla_preset
            .filter(|_| req.platform == Platform::Gpu)
            .map(|p| {
                // What the script would otherwise see: `--env`, else the parent's value
                // where it passes in.
                let user = |name: &str| {
                    let passes = !sandboxed || self.config.pass_env.iter().any(|p| p == name);
                    req.settings
                        .env
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                        .or_else(|| self.config.environment.var(name).filter(|_| passes))
                };
                crate::gpu::xla::merge(p, user("XLA_FLAGS").as_deref(), user)
            })
            .unwrap_or_default();
        let mut vars: Vec<(OsString, OsString)> = Vec::new();
        if sandboxed {
            for (k, v) in self.config.environment.iter() {
                let name = k.to_string_lossy();
                if env::allowlisted(&name) || self.config.pass_env.iter().any(|p| *p == name) {
                    vars.push((k.to_os_string(), v.to_os_string()));
                }
            }
        }
        vars.extend(runner.into_iter().map(|(k, v)| (OsString::from(k), v)));
        // No private /tmp or $HOME in a view of its own: the attempt's private folder
        // stands for both (Landlock lets the script write nowhere else).
        if let Some(dir) = private {
            for key in ["TMPDIR", "HOME"] {
                vars.retain(|(k, _)| k != key);
                vars.push((key.into(), dir.into()));
            }
        }
        // The run's `--env` with a profile override's on top; they win, except over
        // the preset's merge, which already holds their value.
        let merged = |k: &str| preset.vars.iter().any(|(m, _)| *m == k);
        vars.extend(
            req.settings
                .env
                .iter()
                .filter(|(k, _)| !merged(k))
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        vars.extend(
            preset
                .vars
                .into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        vars
    }

    fn token(&self, req: &AttemptRequest<'_>) -> String {
        format!("{}:{}:{}", self.run_token, req.script.id, req.number)
    }
}

/// Where the telemetry shim writes its report for an attempt.
fn telemetry_report(req: &AttemptRequest<'_>) -> PathBuf {
    req.data_dir
        .join(format!(".jax-runner-telemetry.{}.json", req.number))
}

/// Scripts as processes on this machine.
#[derive(Debug)]
pub struct Local {
    pub shared: Shared,
    pub python: PathBuf,
    pub sandbox: Option<SandboxSetup>,
    pub zygote: Option<Arc<Zygote>>,
    /// Each worker slot's own zygote and cgroup, made from `zygote` as slots start.
    pub homes: super::homes::SlotHomes,
    /// Why there is no zygote: every cold start of the run says so.
    pub cold_reason: Option<String>,
    /// Kills what the run's scripts left if the runner dies (held for the run).
    pub sentinel: Option<super::sentinel::Sentinel>,
}

impl Drop for Local {
    /// Every zygote of the run is killed first, then each one's own drop waits for it
    /// (the run's first, then the slots'): their address spaces are torn down side
    /// by side, not one after another before the run's last reports. The run's folder
    /// of private temporary folders goes with it (each attempt's is removed as it
    /// ends).
    fn drop(&mut self) {
        let slots = self.homes.zygotes();
        (self.zygote.iter().chain(&slots)).for_each(|z| z.kill_now());
        if let Some(sb) = self.sandbox.as_ref().filter(|sb| !sb.sandboxing.has_view()) {
            let _ = std::fs::remove_dir(&sb.private_root);
        }
    }
}

impl Local {
    /// The process an attempt runs as, and how `--max-procs` is enforced. `private` is
    /// the attempt's private temporary folder (a sandbox without a view of its own).
    fn spec(
        &self,
        req: &AttemptRequest<'_>,
        private: Option<&Path>,
        home: Option<&SlotHome>,
        sandbox: Option<SandboxSpec>,
    ) -> (AttemptSpec, Enforced) {
        let config = &self.shared.config;
        let cwd = cwd_of(req);
        // Always one where the host allows: it holds everything the script starts (see
        // `AttemptCgroup::create`), limits or not. The sentinel finds it by this name.
        let name = format!("{}-{}-{}", std::process::id(), req.script.id, req.number);
        let memory_limit = req.settings.memory_limit;
        let cgroup = match home {
            Some(home) => {
                home.cgroup.begin_attempt();
                Some(home.cgroup.clone())
            }
            None => limits::AttemptCgroup::create(
                &sanitize(&name),
                Some(config.process_limit()),
                memory_limit,
            )
            .map(Arc::new),
        };
        let by = |kernel: bool| if kernel { "cgroup" } else { "watchdog" };
        let enforced = Enforced {
            max_procs: Some(by(cgroup.as_ref().is_some_and(|c| c.enforces_pids()))),
            memory_limit: memory_limit
                .map(|_| by(cgroup.as_ref().is_some_and(|c| c.enforces_memory()))),
        };
        let spec = AttemptSpec {
            python: self.python.clone(),
            script: req.script.path.clone(),
            scratch: sandbox
                .as_ref()
                .and_then(|sb| super::attempt::scratch_of(sb, private)),
            sandbox,
            seccomp: self
                .sandbox
                .as_ref()
                .map(|sb| sb.seccomp.clone())
                .unwrap_or_default(),
            env: self.shared.env(req, self.sandbox.is_some(), private),
            cwd,
            env_clear: self.sandbox.is_some(),
            env_remove: env::REMOVED,
            memory_limit,
            max_procs: Some(config.process_limit()),
            cgroup,
            gpu: (req.platform == Platform::Gpu).then(|| crate::gpu::sample::GpuWatch {
                nvml: crate::gpu::system(),
                indices: req.gpu.map(|g| vec![g.index]).unwrap_or_default(),
            }),
            samples: Some(SampleSink {
                events: req.events.clone(),
                id: req.script.id.clone(),
                attempt: req.number,
            }),
            echo: config.no_capture,
            stdout_log: req.stdout_log.to_path_buf(),
            stderr_log: req.stderr_log.to_path_buf(),
            timeout: req.settings.timeout,
            grace: config.grace,
            max_log_bytes: config.max_log_bytes,
            token: self.shared.token(req),
            telemetry: telemetry_report(req),
        };
        (spec, enforced)
    }
}

impl Local {
    /// The attempt's sandbox, `private` its private temporary folder (a sandbox
    /// without a view of its own).
    fn sandbox(&self, req: &AttemptRequest<'_>, private: Option<&Path>) -> Option<SandboxSpec> {
        let sb = self.sandbox.as_ref()?;
        Some(sb.attempt(self.shared.place(), place(req), &cwd_of(req), private))
    }

    /// The attempt's slot's home, when it starts warm from one: a slot held, a zygote,
    /// and no memory limit (which needs a memory cgroup of the attempt's own). `view`
    /// is the run's part of the attempt's view, which a new home's zygote is made in
    /// (an attempt whose part differs starts cold: see `zygote::warm_request`).
    async fn home(
        &self,
        req: &AttemptRequest<'_>,
        view: Option<&[MountStep]>,
    ) -> Option<Arc<SlotHome>> {
        let (zygote, slot) = (self.zygote.as_ref()?, req.slot?);
        if req.settings.memory_limit.is_some() {
            return None;
        }
        let name = sanitize(&format!("{}-slot{slot}", std::process::id()));
        let max_procs = Some(self.shared.config.process_limit());
        self.homes.get(slot, zygote, name, max_procs, view).await
    }
}

impl Backend for Local {
    fn run<'a>(
        &'a self,
        req: AttemptRequest<'a>,
        stop: watch::Receiver<Stop>,
    ) -> AttemptFuture<'a> {
        Box::pin(async move {
            let private = match &self.sandbox {
                Some(sb) => sb
                    .prepare(place(&req))
                    .map_err(|(path, source)| AttemptError::Prepare { path, source })?,
                None => None,
            };
            let sandbox = self.sandbox(&req, private.as_deref());
            let view = sandbox.as_ref().and_then(|s| s.split.as_ref());
            let home = self.home(&req, view.map(|v| v.slot.as_slice())).await;
            let (spec, enforced) = self.spec(&req, private.as_deref(), home.as_deref(), sandbox);
            let zygote = home.as_ref().map(|h| &h.zygote).or(self.zygote.as_ref());
            let attempted = child::run_attempt(&spec, zygote, stop).await;
            if let Some(dir) = &private {
                let _ = std::fs::remove_dir_all(dir);
            }
            let (mut outcome, jax) = attempted?;
            if let (Start::Cold, Some(reason)) = (&outcome.start, &self.cold_reason) {
                outcome.start = Start::ColdFallback(reason.clone());
            }
            Ok(Attempted {
                outcome,
                jax,
                ray: None,
                slurm: None,
                enforced,
            })
        })
    }
}

/// The attempt's working directory: its script's folder.
fn cwd_of(req: &AttemptRequest<'_>) -> PathBuf {
    let folder = req.script.path.parent();
    folder.unwrap_or(Path::new("/")).to_path_buf()
}

/// Scripts as jobs on a Ray cluster.
#[derive(Debug)]
pub struct Ray {
    pub shared: Shared,
    pub client: ray::RayClient,
    /// `--ray-max-return`: the largest data folder copied back, bytes.
    pub max_return: u64,
}

impl Backend for Ray {
    fn run<'a>(
        &'a self,
        req: AttemptRequest<'a>,
        stop: watch::Receiver<Stop>,
    ) -> AttemptFuture<'a> {
        Box::pin(async move {
            // The shim's paths are this machine's: the job's wrapper sets its own.
            let env = self
                .shared
                .env(&req, false, None)
                .into_iter()
                .filter(|(k, _)| k != "PYTHONPATH" && k != "JAX_RUNNER_TELEMETRY")
                .map(|(k, v)| {
                    let k = k.to_string_lossy().into_owned();
                    (k, v.to_string_lossy().into_owned())
                })
                .collect();
            let spec = ray::JobSpec {
                script: &req.script.path,
                env,
                gpu: req.platform == Platform::Gpu,
                submission_id: format!(
                    "jax-runner-{}-{}-{}",
                    sanitize(&self.shared.run_token),
                    req.script.id,
                    req.number
                ),
                stdout_log: req.stdout_log,
                stderr_log: req.stderr_log,
                timeout: req.settings.timeout,
                data_dir: req.data_dir,
                max_return: self.max_return,
                max_procs: self.shared.config.process_limit() as u64,
                memory_limit: req.settings.memory_limit,
            };
            let done = ray::run_attempt(&self.client, &spec, stop)
                .await
                .map_err(AttemptError::Ray)?;
            let mut outcome = done.outcome;
            outcome.start =
                Start::ColdFallback("a Ray job starts its own interpreter on the cluster".into());
            Ok(Attempted {
                outcome,
                jax: done.jax.into(),
                ray: Some(done.job),
                slurm: None,
                // The job's wrapper samples the script's tree as the local watchdog does.
                enforced: Enforced {
                    max_procs: Some("watchdog"),
                    memory_limit: req.settings.memory_limit.map(|_| "watchdog"),
                },
            })
        })
    }
}

/// cgroup and job names: letters, digits, `-`, `_`, `.` only, and not too long; a name
/// that had to change gets a hash of the original, so two ids never share one.
pub(crate) fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(180)
        .collect();
    if out != name {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        out.push_str(&format!("-{:012x}", h.finish() & 0xffff_ffff_ffff));
    }
    out
}

/// `req` as its sandbox needs to know it.
fn place<'a>(req: &AttemptRequest<'a>) -> crate::sandbox::policy::AttemptPlace<'a> {
    crate::sandbox::policy::AttemptPlace {
        id: &req.script.id,
        number: req.number,
        data_dir: req.data_dir,
        gpu: req.platform == Platform::Gpu,
        memory_limit: req.settings.memory_limit,
    }
}
