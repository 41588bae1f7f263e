//! The words the output contract and the configuration share: devices and platforms,
//! failure classes, exceptions, leaks, Ray job records, sandbox and resume modes. This
//! module imports nothing of the runner, the doctor or the reporters: they all speak
//! it, so it sits below them.

use serde::{Deserialize, Serialize};

/// The device a user asks for (`--device`: clap parses it, from every source).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The GPU when one is usable, else the CPU.
    Auto,
    Cpu,
    #[value(
        alias = "cuda",
        alias = "rocm",
        help = "An NVIDIA or AMD GPU (`cuda` and `rocm` are accepted for it, as jax names them)"
    )]
    Gpu,
    Tpu,
}

/// A concrete platform a script runs on: what `JAX_PLATFORMS` is set from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Cpu,
    Gpu,
    Tpu,
}

impl Platform {
    /// The value of `JAX_PLATFORMS` for this platform (jax calls NVIDIA GPUs `cuda`).
    pub fn jax_platforms(self) -> &'static str {
        match self {
            Platform::Cpu => "cpu",
            Platform::Gpu => "cuda",
            Platform::Tpu => "tpu",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Cpu => "cpu",
            Platform::Gpu => "gpu",
            Platform::Tpu => "tpu",
        }
    }
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
            Device::Tpu => "tpu",
        }
    }

    /// The platform to run on, given how many NVIDIA GPUs the host reports.
    pub fn resolve(self, gpus: usize) -> Platform {
        match self {
            Device::Auto if gpus > 0 => Platform::Gpu,
            Device::Auto | Device::Cpu => Platform::Cpu,
            Device::Gpu => Platform::Gpu,
            Device::Tpu => Platform::Tpu,
        }
    }
}

/// Why an attempt ended the way it did.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    Succeeded,
    /// A Python exception or a non-zero exit without a better explanation.
    ScriptError,
    TimedOut,
    OutOfMemory,
    /// The GPU stack failed (no device, plugin conflict, cuDNN mismatch, …); the same
    /// script may well work on the CPU.
    GpuEnvironment,
    /// jax and jaxlib do not fit together: nothing works until the install is fixed.
    BrokenInstall,
    KilledBySignal,
    Interrupted,
    /// Never started: `--fail-fast`/`--max-fail` stopped the run first.
    Skipped,
}

impl FailureClass {
    pub const ALL: [FailureClass; 9] = [
        FailureClass::Succeeded,
        FailureClass::ScriptError,
        FailureClass::TimedOut,
        FailureClass::OutOfMemory,
        FailureClass::GpuEnvironment,
        FailureClass::BrokenInstall,
        FailureClass::KilledBySignal,
        FailureClass::Interrupted,
        FailureClass::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Succeeded => "succeeded",
            FailureClass::ScriptError => "script_error",
            FailureClass::TimedOut => "timed_out",
            FailureClass::OutOfMemory => "out_of_memory",
            FailureClass::GpuEnvironment => "gpu_environment",
            FailureClass::BrokenInstall => "broken_install",
            FailureClass::KilledBySignal => "killed_by_signal",
            FailureClass::Interrupted => "interrupted",
            FailureClass::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<FailureClass> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The uncaught exception a traceback ended with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExceptionInfo {
    /// Its type, as printed (`ValueError`, `jax.errors.JaxRuntimeError`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its message (may be empty).
    pub message: String,
}

/// A place in the user's own code (a file outside the interpreter's installation):
/// where an uncaught exception was raised, or where a stopped script was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceFrame {
    /// The file, as Python printed it.
    pub file: String,
    /// The line number in it.
    pub line: u32,
    /// The function (`<module>` at the top level).
    pub function: String,
    /// The source line, as the traceback printed it (a stack dump prints none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source: Option<String>,
}

/// A process a script left behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Leak {
    /// Its PID.
    pub pid: u32,
    /// Its command line.
    pub command: String,
}

/// The Slurm job that ran an attempt (`--backend slurm`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlurmJob {
    /// The job's id, as `sbatch --parsable` gave it.
    pub job_id: String,
    /// Its last state as Slurm showed it (`COMPLETED`, `FAILED`, `TIMEOUT`,
    /// `CANCELLED`, `NODE_FAIL`, `PREEMPTED`, `OUT_OF_MEMORY`, …).
    pub state: String,
    /// Slurm's reason for that state, when it gave one (`NonZeroExitCode`,
    /// `TimeLimit`, …).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// The node it ran on.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub node: Option<String>,
    /// Slurm's `ExitCode` (`code:signal`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exit_code: Option<String>,
    /// Seconds the job waited in the queue before it ran (not part of the attempt's
    /// duration, which is the script's own run on the node).
    pub queued_s: f64,
    /// Whether jax-runner on the node recorded the attempt (its streams, CPU time,
    /// memory, telemetry, sandbox). False when the job ended before it could: the
    /// attempt is then told from Slurm's state alone.
    #[serde(default)]
    pub reported: bool,
    /// The layers the node confined the script with (each node sandboxes as it can).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub sandbox_layers: Vec<String>,
    /// This run cancelled the job (`scancel`: Ctrl-C, `--fail-fast=now`).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub cancelled: bool,
}

/// Where a job ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RayJob {
    /// The cluster's dashboard address.
    pub address: String,
    /// The job's submission id.
    pub job_id: String,
    /// The node its driver ran on, when the cluster says.
    pub node_id: Option<String>,
    /// The job's final status (`SUCCEEDED`, `FAILED`, `STOPPED`).
    pub status: String,
    /// The cluster's message about the job.
    pub message: Option<String>,
    /// Ray's error type when the job failed (`JOB_ENTRYPOINT_COMMAND_ERROR`, …).
    #[serde(default)]
    pub error_type: Option<String>,
    /// Whether the job's wrapper reported back: separate stdout and stderr, CPU time,
    /// peak memory and telemetry come from it. False when the job ended before it
    /// could (stopped, or its runtime environment failed): the log is then read whole.
    #[serde(default)]
    pub reported: bool,
    /// The data folder was the same folder seen from the cluster (a shared file
    /// system): the script wrote into it directly and nothing was copied.
    #[serde(default)]
    pub shared_filesystem: bool,
    /// Whether the data folder's files were copied back into the local data folder.
    #[serde(default)]
    pub data_returned: bool,
    /// Size of the script's data folder on the cluster, bytes (regular files only).
    #[serde(default)]
    pub data_bytes: u64,
    /// Regular files in the script's data folder on the cluster.
    #[serde(default)]
    pub data_files: u64,
    /// Where the files stay, `node:path`, when they were not copied back.
    #[serde(default)]
    pub data_left_at: Option<String>,
    /// Why the data was not copied back, or what was left out (links never travel).
    #[serde(default)]
    pub data_note: Option<String>,
}

/// `--sandbox`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Every layer this machine has: bwrap where it works, and the built-in layer.
    #[value(help = "Every layer this machine has: bwrap where it works, and the built-in one")]
    Auto,
    /// As `Auto`, but a usage error where only the seccomp filter would stand (an
    /// ordinary user with neither bwrap nor Landlock).
    #[value(
        help = "As auto, but fail where nothing but the seccomp filter would hold the scripts"
    )]
    On,
    /// bubblewrap required (a usage error without it), the built-in layer on top.
    #[value(help = "Insist on bubblewrap (and the built-in layer on top)")]
    Bwrap,
    /// The built-in layer alone: Landlock (required), seccomp, and as root its own
    /// namespaces and the sandbox uid.
    #[value(
        help = "The built-in layer alone (Landlock, seccomp; as root its own namespaces and uid)"
    )]
    Landlock,
    #[value(help = "No sandbox: scripts run as the runner's user with its environment")]
    Off,
}

/// `--resume` or `--rerun-failed`: which earlier results stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Run everything.
    None,
    /// Keep a previous success whose fingerprint matches.
    Resume,
    /// Keep every previous success; run the rest.
    RerunFailed,
}

/// What a script's `peak_memory_mb` counts (docs/execution.md says which each mode
/// records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The attempt's memory cgroup (`memory.current`): the kernel's own count, pages
    /// shared between the script's processes once, its page cache and tmpfs included.
    Cgroup,
    /// The proportional set sizes of the script's processes, summed (`Pss` of
    /// `/proc/<pid>/smaps_rollup`): a page shared by n processes counts 1/n in each.
    Pss,
    /// Resident set sizes, summed, where some process's proportional size could not be
    /// read: a shared page counts once per process, so the figure is an upper bound.
    Rss,
}

/// Where a script's GPU memory figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuMemorySource {
    /// NVML's compute processes, matched by PID to the script's processes: its own.
    Process,
    /// The growth of the GPU's used memory while the script ran (its processes could
    /// not be matched): other work on the same GPU counts too.
    Device,
}

/// `--xla-preset`: XLA settings added to GPU attempts' environment.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum XlaPreset {
    /// Faster kernels and scheduling: Triton GEMMs, the latency-hiding scheduler, PGLE.
    Perf,
    /// Deterministic GPU ops: the same inputs give the same bits.
    Deterministic,
}

impl XlaPreset {
    pub fn as_str(self) -> &'static str {
        match self {
            XlaPreset::Perf => "perf",
            XlaPreset::Deterministic => "deterministic",
        }
    }
}
