//! The serialized output contract: per-script results and run metrics. One versioned
//! module, because the next pipeline step reads these files.

pub mod doctor;
mod export;
pub mod gnn;
mod gpu;
pub mod list;
mod metrics;
mod outcomes;
pub mod reason;
mod result;
mod settings;
mod summary;
mod timestamp;

mod vocab;

use serde::{Deserialize, Serialize};

pub use export::{Export, ExportFormat, ExportTarget};
pub use gpu::GpuUse;
pub use list::PlannedScript;
#[cfg(test)]
pub(crate) use metrics::{test_failed_result, test_run_info};
pub use metrics::{DeviceTimes, PerformanceMetrics, RenderFailed, RunInfo, Totals};
pub use outcomes::{Outcomes, STATUSES};
pub use result::{lossless_hex, results_file_name, Attempt, Fallback, ScriptResult};
pub use settings::Setting;
pub use summary::ScriptSummary;
pub use timestamp::Timestamp;
pub use vocab::{
    Device, ExceptionInfo, FailureClass, GpuMemorySource, Leak, MemorySource, Platform, RayJob,
    Reuse, SandboxMode, SlurmJob, SourceFrame, XlaPreset,
};

/// Bumped whenever a field changes meaning or disappears (additions keep it).
/// 2: `totals.failed` counts status `failed` alone (it counted every script that
/// did not succeed); the six statuses' counts are disjoint (issue 25).
pub const SCHEMA_VERSION: u32 = 2;

/// How a script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    TimedOut,
    Interrupted,
    /// Never started: `--fail-fast`/`--max-fail` stopped the run first.
    Skipped,
    /// Not run by this run: its record is the one an earlier run made (`carried_from`),
    /// left as it was (not selected by `-k`/`--exclude`, kept by `--resume` or
    /// `--rerun-failed`, or not reached before `--fail-fast` or Ctrl-C stopped the run).
    Carried,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Interrupted => "interrupted",
            Status::Skipped => "skipped",
            Status::Carried => "carried",
        }
    }
}

/// Why discovery picked a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveredBy {
    /// A `*.py` inside a folder named `jax`.
    JaxFolder,
    /// The source imports jax.
    ImportsJax,
    /// Listed in GNN's `render_processing_summary.json`.
    Manifest,
}

/// How a script was isolated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxInfo {
    /// `bwrap`; `builtin` (a root runner without a working bwrap: its own mount,
    /// network, IPC and UTS namespaces where the kernel allows, and the sandbox uid);
    /// or `none` when unsandboxed.
    pub kind: String,
    /// What confined the script: `bwrap` or `namespaces`, `uid` (it ran as an
    /// unprivileged user the runner switched to) and `seccomp`. Empty when unsandboxed.
    #[serde(default)]
    pub layers: Vec<String>,
    /// The host uid the script ran as: the run's sandbox user when the runner is root,
    /// else the runner's own uid.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uid: Option<u32>,
    /// Why there is no sandbox (`--sandbox off`, bwrap missing, …).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// Whether the script could reach the network.
    pub network: bool,
    /// Whether the user's `$HOME` was visible.
    pub home_visible: bool,
    /// `allowlist` (sandboxed) or `inherited` (the parent's environment).
    pub environment: String,
    /// `--memory-limit`, MiB.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_limit_mb: Option<f64>,
    /// The most processes and threads the script's tree may hold: `--max-procs`, or
    /// the default (64 a core, at least 4,096).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub max_procs: Option<u32>,
    /// `cgroup` (the kernel refuses the fork) or `watchdog` (sampling kills the group).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub max_procs_enforced_by: Option<String>,
    /// `cgroup` (the kernel holds the attempt to the limit, so a spike between two
    /// samples cannot pass it) or `watchdog` (sampling kills the group).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_limit_enforced_by: Option<String>,
    /// The effective capability set (`CapEff`, hex) the script's processes held, read
    /// by the runner from `/proc`; `0000000000000000` in the sandbox, whoever starts
    /// the runner. Absent when the script ended before the first sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub capabilities: Option<String>,
}

/// What the telemetry shim saw jax do in the script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JaxTelemetry {
    /// Whether the script imported jax at all.
    pub jax_imported: bool,
    /// Platform of the default backend jax initialised (`cpu`, `cuda`, `tpu`).
    pub backend: Option<String>,
    /// Devices of that backend.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Their kinds (`cpu`, `NVIDIA H100 80GB HBM3`, …).
    #[serde(default)]
    pub device_kinds: Vec<String>,
    /// XLA compilations, persistent-cache hits included.
    #[serde(default)]
    pub compilations: u64,
    /// Seconds of XLA's backend compilation alone: the compile time every report
    /// shows is `time_breakdown.compile_s`, tracing and lowering and this.
    #[serde(default)]
    pub compile_time_s: f64,
    /// Persistent compilation cache hits.
    #[serde(default)]
    pub cache_hits: u64,
    /// Persistent compilation cache misses.
    #[serde(default)]
    pub cache_misses: u64,
    /// Type of the uncaught exception, if the script died of one.
    pub uncaught_exception: Option<String>,
    /// The jax.profiler trace (`--profile`), viewable in Perfetto or TensorBoard.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub profile_trace: Option<String>,
    /// Why profiling failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub profile_error: Option<String>,
    /// Seconds from the kernel starting the interpreter to Python's site start-up
    /// (absent for warm starts, which skip it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub startup_s: Option<f64>,
    /// Seconds `import jax` took (absent for warm starts: the zygote imported it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub jax_import_s: Option<f64>,
    /// Seconds the first backend initialisation took (plugins, client, devices).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend_init_s: Option<f64>,
    /// Seconds tracing functions to jaxprs.
    #[serde(default)]
    pub trace_time_s: f64,
    /// Seconds lowering jaxprs to MLIR.
    #[serde(default)]
    pub lowering_time_s: f64,
    /// User CPU seconds Python saw for itself and its waited-for children.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu_user_s: Option<f64>,
    /// System CPU seconds, likewise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu_system_s: Option<f64>,
}

impl JaxTelemetry {
    /// The compile time, as every report, column and `time_breakdown.compile_s` give
    /// it: tracing, lowering and XLA compilation (persistent-cache hits included).
    pub fn compile_s(&self) -> f64 {
        self.trace_time_s + self.lowering_time_s + self.compile_time_s
    }

    /// The platform jax actually ran on, if it initialised a backend.
    pub fn platform(&self) -> Option<Platform> {
        match self.backend.as_deref()? {
            "cpu" => Some(Platform::Cpu),
            "cuda" | "gpu" | "rocm" => Some(Platform::Gpu),
            "tpu" => Some(Platform::Tpu),
            _ => None,
        }
    }
}

/// Where an attempt's wall time went, from jax's own figures: the part left over is
/// the script's own work. Recorded in every run (no trace needed), so the next
/// bottleneck shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeBreakdown {
    /// Interpreter start-up (0 for a warm start).
    pub startup_s: f64,
    /// `import jax` (0 for a warm start).
    pub jax_import_s: f64,
    /// Backend initialisation.
    pub backend_init_s: f64,
    /// Tracing, lowering and XLA compilation (cache hits included).
    pub compile_s: f64,
    /// Everything else: the script's own work, and the runner's overhead around it.
    pub script_s: f64,
}

impl TimeBreakdown {
    /// The breakdown of an attempt of `duration_s` seconds from its telemetry.
    pub fn of(duration_s: f64, jax: &JaxTelemetry) -> TimeBreakdown {
        let mut b = TimeBreakdown {
            startup_s: jax.startup_s.unwrap_or(0.0),
            jax_import_s: jax.jax_import_s.unwrap_or(0.0),
            backend_init_s: jax.backend_init_s.unwrap_or(0.0),
            compile_s: jax.compile_s(),
            script_s: 0.0,
        };
        let known = b.startup_s + b.jax_import_s + b.backend_init_s + b.compile_s;
        b.script_s = (duration_s - known).max(0.0);
        b
    }
}
