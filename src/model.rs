//! The serialized output contract: per-script results and run metrics. One versioned
//! module, because the next pipeline step reads these files.

use serde::{Deserialize, Serialize};

use crate::config::{Device, Platform};

/// Bumped whenever a field changes meaning or disappears (additions keep it).
pub const SCHEMA_VERSION: u32 = 1;

/// How a script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    TimedOut,
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Interrupted => "interrupted",
        }
    }
}

/// Why discovery picked a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveredBy {
    /// A `*.py` inside a folder named `jax`.
    JaxFolder,
    /// The source imports jax.
    ImportsJax,
    /// Listed in GNN's `render_processing_summary.json`.
    Manifest,
}

/// One execution of a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The platform whose environment the attempt ran with.
    pub device: Platform,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    /// Wall-clock seconds from spawn to exit.
    pub duration_s: f64,
    /// How the attempt ended.
    pub status: Status,
    /// Exit code when the process exited normally.
    pub return_code: Option<i32>,
    /// Terminating signal number when the process was killed by a signal.
    pub signal: Option<i32>,
    /// Peak resident memory of the whole process tree, MiB.
    pub peak_memory_mb: f64,
    /// User CPU seconds of the child and its waited-for descendants (kernel accounting).
    pub cpu_user_s: f64,
    /// System CPU seconds, likewise.
    pub cpu_system_s: f64,
}

/// The result of one script: `<id>_results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptResult {
    /// Version of this format.
    pub schema_version: u32,
    /// Unique id of the script in this run; also the results file's prefix.
    pub id: String,
    /// Absolute path of the script (lossy where the name is not UTF-8).
    pub script_path: String,
    /// Path relative to the output folder.
    pub relative_path: String,
    /// Why discovery picked it.
    pub discovered_by: DiscoveredBy,
    /// True when the final attempt exited with code 0.
    pub success: bool,
    /// How the script ended.
    pub status: Status,
    /// Exit code of the final attempt, when it exited normally.
    pub return_code: Option<i32>,
    /// Terminating signal of the final attempt, when killed by one.
    pub signal: Option<i32>,
    /// Name of that signal (`SIGKILL`, …).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signal_name: Option<String>,
    /// What the user asked for (`auto`, `cpu`, `gpu`, `tpu`).
    pub device_requested: Device,
    /// The platform of the final attempt.
    pub device_used: Platform,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// Wall-clock seconds summed over attempts.
    pub execution_time_s: f64,
    /// Highest tree RSS of any attempt, MiB.
    pub peak_memory_mb: f64,
    /// User CPU seconds summed over attempts.
    pub cpu_user_s: f64,
    /// System CPU seconds summed over attempts.
    pub cpu_system_s: f64,
    /// The attempt time limit, seconds.
    pub timeout_s: f64,
    /// Start of the first attempt, RFC 3339 UTC (absent when never started).
    pub started_at: Option<String>,
    /// End of the last attempt, RFC 3339 UTC.
    pub finished_at: Option<String>,
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
    /// The per-script data folder (`GNN_OUTPUT_DIR`, `JAX_OUTPUT_DIR`).
    pub data_dir: String,
}

/// The run as a whole, in `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// Wall-clock seconds of the whole run.
    pub wall_time_s: f64,
    /// The device asked for.
    pub device_requested: Device,
    /// The platform scripts were started with.
    pub device: Platform,
    /// Scripts run at once.
    pub jobs: usize,
    /// Path of the Python interpreter (absent when no script needed one).
    pub interpreter: Option<String>,
    /// How the interpreter was chosen (`flag`, `env`, `virtualenv`, `path`, `managed`).
    pub interpreter_source: Option<String>,
    /// Its version.
    pub python_version: Option<String>,
    /// jax version in that interpreter.
    pub jax_version: Option<String>,
    /// jaxlib version in that interpreter.
    pub jaxlib_version: Option<String>,
    /// The folder searched.
    pub output_dir: String,
    /// The folder results were written to.
    pub results_dir: String,
    /// The persistent compilation cache folder, absent when off.
    pub compilation_cache: Option<String>,
    /// True when the run was stopped by a signal.
    pub interrupted: bool,
}

/// Counts over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Scripts discovered and scheduled.
    pub total_scripts: usize,
    /// Scripts whose final status is `succeeded`.
    pub succeeded: usize,
    /// Scripts that did not succeed (failed, timed out, interrupted).
    pub failed: usize,
    /// Of those, timed out.
    pub timed_out: usize,
    /// Of those, interrupted.
    pub interrupted: usize,
    /// Scripts the render manifest lists that do not exist.
    pub missing: usize,
    /// Mean of `execution_time_s` over scripts that ran, seconds.
    pub avg_execution_time: f64,
    /// Sum of `execution_time_s`, seconds.
    pub total_execution_time: f64,
    /// Highest `peak_memory_mb` of any script.
    pub peak_memory_mb: f64,
}

/// One line per script in `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptSummary {
    /// The script's id.
    pub id: String,
    /// Its final status.
    pub status: Status,
    /// Wall-clock seconds over attempts.
    pub execution_time_s: f64,
    /// User CPU seconds.
    pub cpu_user_s: f64,
    /// System CPU seconds.
    pub cpu_system_s: f64,
    /// Peak tree RSS, MiB.
    pub peak_memory_mb: f64,
    /// Number of attempts.
    pub attempts: usize,
    /// Name of its results file inside the results folder.
    pub results_file: String,
}

/// `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerformanceMetrics {
    /// Version of this format.
    pub schema_version: u32,
    /// The run.
    pub run: RunInfo,
    /// Counts and aggregates.
    pub totals: Totals,
    /// One entry per script, in discovery order.
    pub scripts: Vec<ScriptSummary>,
    /// Paths the render manifest lists that do not exist.
    pub missing_scripts: Vec<String>,
    /// Problems met along the way that did not stop the run (unreadable folders, …).
    pub warnings: Vec<String>,
}

/// The results file name of a script id.
pub fn results_file_name(id: &str) -> String {
    format!("{id}_results.json")
}

impl PerformanceMetrics {
    /// Aggregates the per-script results; the single place totals are computed.
    pub fn build(
        run: RunInfo,
        results: &[ScriptResult],
        missing_scripts: Vec<String>,
        warnings: Vec<String>,
    ) -> Self {
        let count = |s: Status| results.iter().filter(|r| r.status == s).count();
        let ran: Vec<&ScriptResult> = results.iter().filter(|r| !r.attempts.is_empty()).collect();
        let total_execution_time: f64 = ran.iter().map(|r| r.execution_time_s).sum();
        let succeeded = count(Status::Succeeded);
        let totals = Totals {
            total_scripts: results.len(),
            succeeded,
            failed: results.len() - succeeded,
            timed_out: count(Status::TimedOut),
            interrupted: count(Status::Interrupted),
            missing: missing_scripts.len(),
            avg_execution_time: if ran.is_empty() {
                0.0
            } else {
                total_execution_time / ran.len() as f64
            },
            total_execution_time,
            peak_memory_mb: results.iter().map(|r| r.peak_memory_mb).fold(0.0, f64::max),
        };
        let scripts = results
            .iter()
            .map(|r| ScriptSummary {
                id: r.id.clone(),
                status: r.status,
                execution_time_s: r.execution_time_s,
                cpu_user_s: r.cpu_user_s,
                cpu_system_s: r.cpu_system_s,
                peak_memory_mb: r.peak_memory_mb,
                attempts: r.attempts.len(),
                results_file: results_file_name(&r.id),
            })
            .collect();
        PerformanceMetrics {
            schema_version: SCHEMA_VERSION,
            run,
            totals,
            scripts,
            missing_scripts,
            warnings,
        }
    }

    /// True when every script succeeded and nothing the manifest listed was missing.
    pub fn all_succeeded(&self) -> bool {
        self.totals.failed == 0 && self.totals.missing == 0
    }
}
