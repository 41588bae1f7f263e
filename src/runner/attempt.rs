//! The seam between the retry loop and whatever runs an attempt: what an attempt is
//! asked to do ([`AttemptRequest`]), what a process attempt looks like
//! ([`AttemptSpec`]: the command, its environment, limits and sandbox, with the live
//! handles the attempt needs: its cgroup, the event sink for samples, NVML), what
//! comes back ([`Attempted`] or [`AttemptError`]), and the [`Backend`] trait that
//! local processes and Ray jobs implement. The loop in `script.rs` knows nothing else
//! of how an attempt runs, so a fake backend tests it.

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::output::Drained;
use super::sys::Exit;
use super::Stop;
use crate::discovery::Script;
use crate::events::EventSender;
use crate::model::{Leak, Platform, RayJob};

/// One attempt of one script, as the retry loop asks for it.
#[derive(Debug, Clone)]
pub struct AttemptRequest<'a> {
    pub script: &'a Script,
    /// 1 for the first attempt.
    pub number: u32,
    /// The platform the attempt's environment is set up for.
    pub platform: Platform,
    /// The script's data folder (`GNN_OUTPUT_DIR`), created.
    pub data_dir: &'a Path,
    pub stdout_log: &'a Path,
    pub stderr_log: &'a Path,
    /// Where resource samples go.
    pub events: &'a EventSender,
    /// The script's timeout, memory limit and variables, after the profile's overrides.
    pub settings: &'a crate::config::ScriptSettings,
    /// The GPU a GPU attempt was given, when the run spreads scripts over GPUs.
    pub gpu: Option<&'a crate::gpu::share::GpuSlot>,
    /// The worker slot it runs on, when it holds one.
    pub slot: Option<usize>,
}

/// What a finished attempt brings back, whatever ran it.
#[derive(Debug)]
pub struct Attempted {
    pub outcome: AttemptOutcome,
    /// jax's own report on the attempt, when the telemetry shim wrote one, or why
    /// its file was not read.
    pub jax: super::telemetry::Telemetry,
    /// The Ray job that ran it.
    pub ray: Option<RayJob>,
    /// The Slurm job that ran it.
    pub slurm: Option<crate::model::SlurmJob>,
    /// How the limits were enforced.
    pub enforced: Enforced,
}

/// Who enforced each limit asked for: `cgroup` (the kernel) or `watchdog` (sampling).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Enforced {
    /// `--max-procs`.
    pub max_procs: Option<&'static str>,
    /// `--memory-limit`.
    pub memory_limit: Option<&'static str>,
}

/// A boxed attempt future (the trait must stay object-safe).
pub type AttemptFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Attempted, AttemptError>> + Send + 'a>>;

/// Runs attempts: local processes (sandboxed or not, warm or cold) or Ray jobs.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Runs one attempt to its end, honouring the time limit and `stop`.
    fn run<'a>(
        &'a self,
        request: AttemptRequest<'a>,
        stop: watch::Receiver<Stop>,
    ) -> AttemptFuture<'a>;
}

/// Everything one attempt needs.
#[derive(Debug, Clone)]
pub struct AttemptSpec {
    pub python: PathBuf,
    pub script: PathBuf,
    pub cwd: PathBuf,
    /// Variables to set; with `env_clear` the child gets only these.
    pub env: Vec<(OsString, OsString)>,
    pub env_clear: bool,
    pub env_remove: &'static [&'static str],
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    pub timeout: Duration,
    pub grace: Duration,
    pub max_log_bytes: Option<u64>,
    /// Marks every process of this attempt (see [`reaper::TOKEN_VAR`]).
    pub token: String,
    /// How the script is sandboxed, when it is.
    pub sandbox: Option<SandboxSpec>,
    /// The seccomp programs installed before the script's first line (sandboxed runs
    /// only), in order.
    pub seccomp: crate::sandbox::seccomp::Filters,
    /// `--memory-limit`: the tree's RSS and scratch above which the group is killed,
    /// bytes.
    pub memory_limit: Option<u64>,
    /// Where the script's scratch is, counted with its memory (sandboxed runs).
    pub scratch: Option<super::scratch::Place>,
    /// `--max-procs`, enforced by `cgroup` when there is one, else by sampling.
    pub max_procs: Option<u32>,
    pub cgroup: Option<std::sync::Arc<super::limits::AttemptCgroup>>,
    /// Where to report resource samples (about once a second).
    pub samples: Option<SampleSink>,
    /// `--no-capture`: each output line also goes into the event stream.
    pub echo: bool,
    /// The GPUs to sample, for a GPU attempt.
    pub gpu: Option<crate::gpu::sample::GpuWatch>,
    /// Where the telemetry shim writes its report, taken once the script has exited.
    pub telemetry: PathBuf,
}

pub use crate::sandbox::policy::SandboxSpec;

/// Where a sandboxed attempt's scratch is: the view's scratch mounts, or else
/// `private`, the attempt's private temporary folder.
pub fn scratch_of(spec: &SandboxSpec, private: Option<&Path>) -> Option<super::scratch::Place> {
    let mounts: Vec<PathBuf> = spec
        .steps
        .iter()
        .filter_map(|s| match s {
            crate::sandbox::view::MountStep::Scratch { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    match mounts.is_empty() {
        false => Some(super::scratch::Place::Mounts(mounts)),
        true => private.map(|p| super::scratch::Place::Folder(p.to_path_buf())),
    }
}

/// Sends an attempt's resource samples into the event stream.
#[derive(Debug, Clone)]
pub struct SampleSink {
    pub events: crate::events::EventSender,
    pub id: String,
    pub attempt: u32,
}

/// Why the runner stopped the attempt, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoppedBy {
    Timeout,
    Interrupt,
    /// The memory watchdog (`--memory-limit`).
    MemoryLimit,
    /// The kernel, at `--memory-limit` set on the attempt's cgroup.
    MemoryCgroup,
    /// The process-count watchdog (`--max-procs` without a pids cgroup).
    ProcessLimit,
}

/// What happened.
#[derive(Debug)]
pub struct AttemptOutcome {
    pub started_at: SystemTime,
    pub duration: Duration,
    pub exit: Exit,
    pub stopped_by: Option<StoppedBy>,
    /// Peak memory of the tree: sampled memory (`memory_source`) and scratch together,
    /// or the attempt's cgroup's peak when the kernel killed it at the limit and that
    /// is higher, or the process's own resident size when no sample was taken.
    pub peak_rss_bytes: u64,
    /// What `peak_rss_bytes` counts.
    pub memory_source: crate::model::MemorySource,
    /// What the scratch held at the highest sample (part of `peak_rss_bytes`).
    pub peak_scratch_bytes: u64,
    pub stdout: Drained,
    pub stderr: Drained,
    /// Processes left running after the script exited, now killed.
    pub leaks: Vec<Leak>,
    /// The kernel's OOM killer fired in the runner's cgroup during the attempt.
    pub kernel_oom_kill: bool,
    /// Forks the pids cgroup refused.
    pub refused_forks: u64,
    /// CPU seconds (user, system) from sampling `/proc`, a floor for the kernel's.
    pub sampled_cpu: (f64, f64),
    /// How the process was started.
    pub start: Start,
    /// Whether the runner saw a process of the script hold a GPU device open (`None`
    /// when it never looked: the attempt ended before the first look).
    pub gpu_device_opened: Option<bool>,
    /// The effective capability set the script's processes held, as the kernel shows
    /// it (`None` when none was seen: the script ended within one sample).
    pub capabilities: Option<u64>,
    /// Its GPU memory and utilisation, when it ran on a GPU NVML could read.
    pub gpu: Option<crate::gpu::sample::GpuUsage>,
}

/// How an attempt's process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A fresh interpreter.
    Cold,
    /// Forked from the warm-start zygote.
    Warm,
    /// Warm start was asked for but could not be honoured; the reason.
    ColdFallback(String),
}

/// The attempt could not run: nothing about the script can be said.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error("failed to create {path}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to start {python} for {script}")]
    Spawn {
        python: PathBuf,
        script: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to wait for the script process")]
    Wait(#[source] std::io::Error),
    #[error("failed to run the script as a Ray job")]
    Ray(#[source] crate::error::RayError),
    #[error("failed to run the script as a Slurm job")]
    Slurm(#[source] crate::error::SlurmError),
}
