//! GNN's step-12 documents (`12_execute_output/`), with the keys and value conventions
//! of GNN's own step 12, because GNN's analysis step (16) reads them by name. Where
//! GNN's meaning differs from jax-runner's own results (return codes, local
//! timestamps, the success rate of an empty run), these documents follow GNN; the
//! jax-runner fields beside them keep jax-runner's meaning.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Device, FailureClass, Platform, Status};

/// `execution_summary_format` of the summary (GNN's slim format).
pub const SUMMARY_FORMAT: &str = "slim_v1";
/// The framework every jax-runner script belongs to.
pub const FRAMEWORK: &str = "jax";
/// GNN's `return_code` for a script stopped by the time limit.
pub const TIMEOUT_RETURN_CODE: i32 = -1;
/// The file GNN's scripts leave in their data folder, which the step-12 document
/// copies `beliefs`, `actions`, … from.
pub const SIMULATION_RESULTS: &str = "simulation_results.json";
/// The largest `simulation_results.json` read. GNN's scripts write kilobytes; this
/// leaves room for long simulations while bounding what one file costs to read.
pub const MAX_SIMULATION_RESULTS_BYTES: u64 = 16 << 20;
/// What the values parsed from a `simulation_results.json` may cost in memory, as
/// estimated while parsing. Text is no measure: 16 MiB of small nested lists makes
/// over 600 MiB of `serde_json::Value`s. One such parse runs at a time (see
/// [`crate::confined::read_json_in`]), so the runner stays well under 400 MB however
/// many scripts finish together.
pub const SIMULATION_RESULTS_BUDGET: u64 = 128 << 20;

/// `12_execute_output/summaries/execution_summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GnnSummary {
    /// When the summary was written: local time, ISO 8601 without a zone, as GNN writes.
    pub timestamp: String,
    /// The folder searched for scripts (`--output-dir`).
    pub target_directory: String,
    /// The step-12 folder these files are in.
    pub output_directory: String,
    /// Scripts discovered (render-manifest entries that do not exist are not counted;
    /// they are in `missing_render_scripts`).
    pub total_scripts_found: usize,
    /// The same number (GNN writes both keys).
    pub total_scripts: usize,
    /// Entries with `success: true`.
    pub successful_executions: usize,
    /// Entries that ran and did not succeed.
    pub failed_executions: usize,
    /// Entries with `skipped: true` (never started, for example after Ctrl-C).
    pub skipped_executions: usize,
    /// `successful / (found - skipped) * 100`, rounded to 2 places; `100.0` when nothing
    /// was attempted (GNN's convention).
    pub success_rate: f64,
    /// True when no script failed and no listed script is missing: the same verdict as
    /// jax-runner's exit code (GNN's own step 12 writes `true` and reports failure only
    /// through its exit code).
    pub success: bool,
    /// Per framework (`jax`): `success`, `failed` or `skipped`, with the number of runs.
    pub framework_status: BTreeMap<String, FrameworkStatus>,
    /// Always `["jax"]`.
    pub requested_frameworks: Vec<String>,
    /// JAX renderings the render manifest marks as failed.
    pub render_failures: Vec<RenderFailure>,
    /// Absolute paths of scripts the render manifest lists that do not exist.
    pub missing_render_scripts: Vec<String>,
    /// Scripts run at once (`--jobs`).
    pub execution_workers: usize,
    /// `local`, or `distributed` on a Ray cluster.
    pub execution_mode: String,
    /// `ray` when distributed, else `null`.
    pub backend: Option<String>,
    /// Runs per script (always 1).
    pub execution_benchmark_repeats: u32,
    /// Whether a detail file was written (never).
    pub execution_summary_detail: bool,
    /// `slim_v1`.
    pub execution_summary_format: String,
    /// One entry per script, in discovery order.
    pub execution_details: Vec<GnnDetail>,
    /// jax-runner: `jax`.
    pub framework: String,
    /// jax-runner: wall-clock seconds summed over scripts.
    pub total_execution_time: f64,
    /// jax-runner: missing manifest entries as written in the manifest.
    pub missing_scripts: Vec<String>,
    /// jax-runner: the folder holding jax-runner's own results and metrics.
    pub results_directory: String,
    /// jax-runner: `jax-runner <version>`.
    pub runner: String,
}

/// One framework's line in `framework_status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FrameworkStatus {
    /// `success` (every script that ran succeeded), `failed`, or `skipped` (none ran).
    pub status: String,
    /// Scripts that ran.
    pub executions: usize,
    /// The first failure's error, when one failed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// A JAX rendering that step 11 reports as failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RenderFailure {
    /// File name of the GNN source.
    pub file: String,
    /// `jax`.
    pub framework: String,
    /// Step 11's message.
    pub message: String,
}

/// One `execution_details[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GnnDetail {
    /// Absolute path of the script.
    pub script_path: String,
    /// The script's file name (`Model_jax.py`).
    pub script_name: String,
    /// `jax`.
    pub framework: String,
    /// The model folder: the script's grandparent folder (`<model>/jax/<script>`).
    pub model_name: String,
    /// The interpreter that ran it.
    pub executor: String,
    /// True when the script exited with code 0.
    pub success: bool,
    /// True when the script never started.
    pub skipped: bool,
    /// Exit code; `-1` when the time limit stopped it, `-N` when signal N killed it,
    /// `null` when it never started.
    pub return_code: Option<i32>,
    /// Why it failed (`Script failed with return code 3`, …); `null` on success.
    pub error: Option<String>,
    /// `DependencyError`, `SyntaxError`, `TimeoutError`, `OutOfMemoryError`,
    /// `GpuEnvironmentError`, `InterruptedError` or `RuntimeError`; `null` on success.
    pub error_type: Option<String>,
    /// Wall-clock seconds (all attempts).
    pub execution_time: f64,
    /// When it started: local time, ISO 8601 without a zone.
    pub timestamp: String,
    /// Runs per script (always 1).
    pub execution_benchmark_repeats: u32,
    /// On success: the execution time (one repeat).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_mean: Option<f64>,
    /// On success: `0.0` (one repeat).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_std: Option<f64>,
    /// On success: the one sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_samples: Option<Vec<f64>>,
    /// `<model>/jax/execution_logs/<script>_results.json`; `null` when never started.
    pub structured_result_file: Option<String>,
    /// `<model>/jax/execution_logs/<script>_execution.log`; `null` when never started.
    pub output_file: Option<String>,
    /// `12_execute_output/<model>/jax`, where the analysis step looks for data.
    pub implementation_directory: String,
    /// Characters of standard output (GNN's `len(stdout)`).
    pub stdout_length: u64,
    /// Characters of standard error (GNN's `len(stderr)`).
    pub stderr_length: u64,
    /// How many files the script left in its data folder, by kind.
    pub collected_outputs_summary: BTreeMap<String, OutputCount>,
    /// jax-runner: the script's id, which names its files in the results folder.
    pub id: String,
    /// jax-runner: how it ended.
    pub status: Status,
    /// jax-runner: the failure class.
    pub class: FailureClass,
    /// jax-runner: start of the first attempt, RFC 3339 UTC.
    pub started_at: Option<super::Timestamp>,
    /// jax-runner: the device asked for.
    pub device_requested: Device,
    /// jax-runner: the platform jax really used.
    pub device_used: Option<Platform>,
    /// jax-runner: the script's data folder (its `GNN_OUTPUT_DIR`).
    pub simulation_data: String,
}

/// `{"count": n}` in `collected_outputs_summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputCount {
    /// Number of files.
    pub count: usize,
}

/// Files a script left in its data folder, sorted into GNN's four kinds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CollectedOutputs {
    /// Images (`.png`, `.svg`, `.jpg`, `.pdf`, `.gif`).
    pub visualizations: Vec<String>,
    /// Data files (`.json`, `.pkl`, `.csv`, `.npy`, `.npz`) not named like traces.
    pub simulation_data: Vec<String>,
    /// Files whose name contains `trace` or `posterior`.
    pub traces: Vec<String>,
    /// Anything else.
    pub other: Vec<String>,
}

impl CollectedOutputs {
    /// Sorts absolute file paths into the four kinds.
    pub fn sort(files: impl IntoIterator<Item = String>) -> Self {
        let mut c = CollectedOutputs::default();
        for f in files {
            let name = f.rsplit('/').next().unwrap_or(&f).to_ascii_lowercase();
            let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
            if name.contains("trace") || name.contains("posterior") {
                c.traces.push(f);
            } else if matches!(ext, "png" | "svg" | "jpg" | "jpeg" | "pdf" | "gif") {
                c.visualizations.push(f);
            } else if matches!(ext, "json" | "pkl" | "csv" | "npy" | "npz") {
                c.simulation_data.push(f);
            } else {
                c.other.push(f);
            }
        }
        c
    }

    /// The counts, keyed as GNN keys them.
    pub fn summary(&self) -> BTreeMap<String, OutputCount> {
        [
            ("visualizations", &self.visualizations),
            ("simulation_data", &self.simulation_data),
            ("traces", &self.traces),
            ("other", &self.other),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), OutputCount { count: v.len() }))
        .collect()
    }
}

/// `12_execute_output/<model>/jax/execution_logs/<script>_results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GnnScriptDocument {
    /// `jax`.
    pub framework: String,
    /// The model folder.
    pub model_name: String,
    /// The script's file name.
    pub script_name: String,
    /// Absolute path of the script.
    pub script_path: String,
    /// True when the script exited with code 0.
    pub success: bool,
    /// As in the summary: `-1` timed out, `-N` killed by signal N.
    pub return_code: Option<i32>,
    /// Wall-clock seconds (all attempts).
    pub execution_time: f64,
    /// When it started: local time, ISO 8601 without a zone.
    pub timestamp: String,
    /// Why it failed; `null` on success.
    pub error: Option<String>,
    /// The error's kind, as in the summary; `null` on success.
    pub error_type: Option<String>,
    /// What the script printed, and what its `simulation_results.json` holds.
    pub simulation_data: GnnSimulationData,
    /// Runs per script (always 1).
    pub execution_benchmark_repeats: u32,
    /// On success: the execution time (one repeat).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_mean: Option<f64>,
    /// On success: `0.0`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_std: Option<f64>,
    /// On success: the one sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub execution_time_samples: Option<Vec<f64>>,
    /// How and where it ran.
    pub execution_metadata: GnnExecutionMetadata,
    /// Files the script left in its data folder (absolute paths), by kind.
    pub collected_outputs: CollectedOutputs,
}

/// `simulation_data` of a per-script document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GnnSimulationData {
    /// The first 10,000 characters of standard output, as GNN's `stdout[:10000]`.
    pub raw_output: String,
    /// The first 10,000 characters of standard error, as GNN's `stderr[:10000]`.
    pub raw_error: String,
    /// The script's data folder (its `GNN_OUTPUT_DIR`).
    pub output_dir: String,
    /// `beliefs`, `actions`, `observations` and `num_timesteps` copied from the
    /// `simulation_results.json` the script wrote, when it wrote one.
    #[serde(flatten)]
    pub extracted: BTreeMap<String, serde_json::Value>,
}

/// `execution_metadata` of a per-script document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GnnExecutionMetadata {
    /// The interpreter that ran the script.
    pub executor: String,
    /// `cuda` when jax ran on the GPU, `cpu` otherwise (from jax itself).
    pub accelerator_type: String,
    /// Characters of standard output (GNN's `len(stdout)`).
    pub stdout_length: u64,
    /// Characters of standard error (GNN's `len(stderr)`).
    pub stderr_length: u64,
    /// `12_execute_output/<model>/jax`.
    pub output_directory: String,
    /// `jax-runner`.
    pub runner: String,
    /// jax-runner's version.
    pub runner_version: String,
    /// jax-runner: how it ended.
    pub status: Status,
    /// jax-runner: the failure class.
    pub class: FailureClass,
    /// jax-runner: the device asked for.
    pub device_requested: Device,
    /// jax-runner: the platform jax really used.
    pub device_used: Option<Platform>,
    /// jax-runner: attempts made.
    pub attempts: usize,
    /// jax-runner: peak memory of the process tree, MiB.
    pub peak_memory_mb: f64,
    /// jax-runner: its own results file for this script.
    pub results_file: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_sort_into_gnn_kinds() {
        let c = CollectedOutputs::sort(
            [
                "/d/simulation_results.json",
                "/d/belief_trace.json",
                "/d/plot.PNG",
                "/d/notes.txt",
                "/d/posterior.npz",
            ]
            .map(String::from),
        );
        assert_eq!(c.simulation_data, vec!["/d/simulation_results.json"]);
        assert_eq!(c.traces, vec!["/d/belief_trace.json", "/d/posterior.npz"]);
        assert_eq!(c.visualizations, vec!["/d/plot.PNG"]);
        assert_eq!(c.other, vec!["/d/notes.txt"]);
        let s = c.summary();
        assert_eq!(s.len(), 4);
        assert_eq!(s["traces"].count, 2);
    }
}
