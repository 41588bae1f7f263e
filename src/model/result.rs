//! One script's result, `<id>_results.json`: what the script is, how it ended, and
//! each of its attempts, with the moves from one device to another between them.

use serde::{Deserialize, Serialize};

use super::{
    Device, DeviceTimes, DiscoveredBy, ExceptionInfo, FailureClass, GpuUse, JaxTelemetry, Leak,
    MemorySource, Platform, RayJob, SandboxInfo, Setting, SourceFrame, Status, TimeBreakdown,
    Timestamp, XlaPreset,
};

/// One execution of a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The platform whose environment the attempt ran with.
    pub device: Platform,
    /// Worker slot that ran it (0 to jobs - 1, or to jobs + spare_slots - 1 once a
    /// run of very short scripts opened spare slots).
    #[serde(default)]
    pub slot: usize,
    /// Start time, RFC 3339 UTC.
    pub started_at: Timestamp,
    /// Wall-clock seconds from spawn to exit.
    pub duration_s: f64,
    /// How the attempt ended.
    pub status: Status,
    /// Exit code when the process exited normally.
    pub return_code: Option<i32>,
    /// Terminating signal number when the process was killed by a signal.
    pub signal: Option<i32>,
    /// Peak memory of the whole process tree, MiB (`memory_source` says what it
    /// counts).
    pub peak_memory_mb: f64,
    /// What `peak_memory_mb` counts: `cgroup` (the attempt's memory cgroup), `pss`
    /// (proportional set sizes summed: shared pages once) or `rss` (resident sizes
    /// summed, where a proportional one could not be read: an upper bound).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_source: Option<MemorySource>,
    /// What the attempt used of its GPU (`gpu_index`, `peak_gpu_memory_mb`,
    /// `gpu_memory_source`, `gpu_utilization_pct`), at the top level of the attempt.
    #[serde(flatten)]
    pub gpu: GpuUse,
    /// `XLA_PYTHON_CLIENT_MEM_FRACTION` it was given: its part of a shared GPU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_mem_fraction: Option<f64>,
    /// User CPU seconds of the child and its waited-for descendants (kernel accounting).
    pub cpu_user_s: f64,
    /// System CPU seconds, likewise.
    pub cpu_system_s: f64,
    /// The failure class (`succeeded` when it worked).
    pub class: FailureClass,
    /// The stderr line or description that decided the class.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub matched_line: Option<String>,
    /// The uncaught exception, when a traceback ended the script.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exception: Option<ExceptionInfo>,
    /// The innermost frame of the user's own code where it failed: in the uncaught
    /// exception's traceback, or, for a script the runner stopped (a timeout, Ctrl-C),
    /// in the stack dump it printed first.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub user_frame: Option<SourceFrame>,
    /// What jax reported about itself (absent when the process died before exit handlers).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub jax: Option<JaxTelemetry>,
    /// This attempt's standard output log.
    pub stdout_log: String,
    /// This attempt's standard error log.
    pub stderr_log: String,
    /// Bytes `--max-log-size` left out of the logs (stdout + stderr).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub log_cut_bytes: u64,
    /// Processes the attempt left running, killed after it exited.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub leaks: Vec<Leak>,
    /// Forks (new processes or threads) the process limit's cgroup refused.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub refused_forks: u64,
    /// The Ray job that ran this attempt (`--backend ray`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ray: Option<RayJob>,
    /// The Slurm job that ran this attempt (`--backend slurm`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub slurm: Option<super::SlurmJob>,
    /// `warm` (forked from the zygote that had jax imported) or `cold` (a fresh
    /// interpreter).
    #[serde(default = "cold")]
    pub start: String,
    /// Set when the runner's own view contradicts jax's report of the device: jax said
    /// GPU, but no process of the script held a GPU device open when the runner looked
    /// (a forged or confused telemetry file). `device_used` then stays empty.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_check: Option<String>,
    /// Why a warm start was asked for but not possible.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cold_start_reason: Option<String>,
}

fn cold() -> String {
    "cold".into()
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A move from the requested device to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fallback {
    /// The platform given up.
    pub from: Platform,
    /// The platform used instead.
    pub to: Platform,
    /// Why.
    pub reason: String,
}

/// The result of one script: `<id>_results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptResult {
    /// Version of this format.
    pub schema_version: u32,
    /// The run this result belongs to: `run.run_id` of the `performance_metrics.json`
    /// beside it. A file whose `run_id` differs is not this run's.
    #[serde(default)]
    pub run_id: String,
    /// Set when `--resume`/`--rerun-failed` kept an earlier success instead of running
    /// the script: the id of the run that ran it (empty when that run predates run ids).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resumed_from: Option<String>,
    /// Unique id of the script in this run; also the results file's prefix.
    pub id: String,
    /// Absolute path of the script (lossy where the name is not UTF-8).
    pub script_path: String,
    /// The script's path as raw bytes in hex, present only when the path is not valid
    /// UTF-8 (then `script_path` is lossy): `os.fsdecode(bytes.fromhex(...))` in
    /// Python gives the real path back.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub script_path_hex: Option<String>,
    /// Path relative to the output folder.
    pub relative_path: String,
    /// Why discovery picked it.
    pub discovered_by: DiscoveredBy,
    /// True when the final attempt exited with code 0.
    pub success: bool,
    /// How the script ended.
    pub status: Status,
    /// The final attempt's failure class (`succeeded` when it worked).
    pub class: FailureClass,
    /// The line that decided the class.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub matched_line: Option<String>,
    /// The uncaught exception of the final attempt.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exception: Option<ExceptionInfo>,
    /// Where in the user's own code the final attempt failed or was stopped (see
    /// the attempt's `user_frame`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub user_frame: Option<SourceFrame>,
    /// Exit code of the final attempt, when it exited normally.
    pub return_code: Option<i32>,
    /// Terminating signal of the final attempt, when killed by one.
    pub signal: Option<i32>,
    /// Name of that signal (`SIGKILL`, …).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signal_name: Option<String>,
    /// What the user asked for (`auto`, `cpu`, `gpu`, `tpu`).
    pub device_requested: Device,
    /// The platform jax really used in the final attempt, from the telemetry shim;
    /// `null` when the script never initialised a jax backend.
    pub device_used: Option<Platform>,
    /// Why `--device auto` put the script where it started, with the figures when the
    /// history decided (`history: cpu 1.2 s < gpu 3.4 s`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_reason: Option<String>,
    /// Set when the script ran on another device than requested.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fallback: Option<Fallback>,
    /// True when a GPU was asked for and the script's environment said so, yet jax ran
    /// on another platform (for example `JAX_PLATFORMS=cuda,cpu` falling back silently).
    pub device_mismatch: bool,
    /// Why `device_used` is empty although jax reported a device: the runner's own view
    /// contradicts it (see the attempt's `device_check`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_check: Option<String>,
    /// jax's own figures for the final attempt.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub jax: Option<JaxTelemetry>,
    /// Where the final attempt's time went (when the telemetry shim reported).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_breakdown: Option<TimeBreakdown>,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// Wall-clock seconds summed over attempts.
    pub execution_time_s: f64,
    /// Highest tree memory of any attempt, MiB (`memory_source` says what it counts).
    pub peak_memory_mb: f64,
    /// What `peak_memory_mb` counts, as that attempt's `memory_source` says.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_source: Option<MemorySource>,
    /// What the script used of its GPU, at the top level of the result: the final
    /// attempt's GPU and utilisation, the highest peak of any attempt and what that
    /// peak counts.
    #[serde(flatten)]
    pub gpu: GpuUse,
    /// User CPU seconds summed over attempts.
    pub cpu_user_s: f64,
    /// System CPU seconds summed over attempts.
    pub cpu_system_s: f64,
    /// The attempt time limit, seconds.
    pub timeout_s: f64,
    /// Start of the first attempt, RFC 3339 UTC (absent when never started).
    pub started_at: Option<Timestamp>,
    /// End of the last attempt, RFC 3339 UTC.
    pub finished_at: Option<Timestamp>,
    /// File holding the script's standard output (the last attempt's).
    pub stdout_log: String,
    /// File holding the script's standard error (the last attempt's).
    pub stderr_log: String,
    /// Bytes the last attempt wrote to stdout.
    pub stdout_bytes: u64,
    /// Bytes the last attempt wrote to stderr.
    pub stderr_bytes: u64,
    /// The last lines of standard error.
    pub stderr_tail: Vec<String>,
    /// The last lines of standard output, kept only for a script that failed without
    /// writing to standard error.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub stdout_tail: Vec<String>,
    /// Why the script did not succeed, in the words every report uses: how it ended
    /// (`exit code 3`, `killed by SIGABRT`, `no exit within 30s (timed out)`,
    /// `out of memory at 1.0 GiB`) and the last line of its output. Absent on success.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// True when `--max-log-size` cut a log of the final attempt.
    pub log_truncated: bool,
    /// Processes left running after the script exited (all attempts), killed.
    pub leaks: Vec<Leak>,
    /// The per-script data folder (`GNN_OUTPUT_DIR`, `JAX_OUTPUT_DIR`).
    pub data_dir: String,
    /// Files in the data folder when the script finished, relative to it (at most
    /// 10,000; `problems` says when there were more, and how many): `--resume` keeps
    /// a result only while these still exist.
    #[serde(default)]
    pub data_files: Vec<String>,
    /// What the runner found wrong with what the script left behind, and did not read
    /// or follow: `telemetry: not a regular file (fifo)`, `simulation_results.json:
    /// larger than the 16 MiB the runner reads (1.5 GiB)`, `data folder: a symlink was
    /// planted at …; replaced by a folder`. Absent when there was nothing.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub problems: Vec<String>,
    /// How the script was isolated and limited.
    pub sandbox: SandboxInfo,
    /// `--xla-preset` given to its GPU attempts.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub xla_preset: Option<XlaPreset>,
    /// Seconds of its last successful run on each device, this run's and earlier
    /// runs' in this results folder: what `--device auto` learns from.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_times: Option<DeviceTimes>,
    /// Hash of what the result depends on (source, interpreter, jax, device, jax's
    /// environment): `--resume` keeps a success whose fingerprint still matches.
    #[serde(default)]
    pub fingerprint: String,
    /// The fingerprint's parts, each a short hash by name: `source`, each file beside
    /// the script (`file:params.json`), `interpreter`, `jax`, `device`, jax's variables
    /// (`env:JAX_ENABLE_X64`): `--dry-run --resume` names the one that changed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub inputs: std::collections::BTreeMap<String, String>,
    /// Settings a `[[profile.NAME.overrides]]` table changed for this script (`timeout`,
    /// `retries`, `device`, `memory-limit`, `env`), with their values and the table's
    /// place; absent when none did.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub overrides: std::collections::BTreeMap<String, Setting>,
}

impl ScriptResult {
    /// Notes a problem with what the script left behind, once (every attempt can
    /// leave the same one).
    pub fn note_problem(&mut self, problem: String) {
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }
}

/// The hex form of a path's bytes, when the path is not valid UTF-8 (see
/// [`ScriptResult::script_path_hex`]).
pub fn lossless_hex(path: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    std::str::from_utf8(bytes)
        .is_err()
        .then(|| bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The results file name of a script id.
pub fn results_file_name(id: &str) -> String {
    format!("{id}_results.json")
}
