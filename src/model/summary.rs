//! One line per script in `performance_metrics.json`: what a run or a reader needs
//! of each script without its whole result, and whether the run started it.

use serde::{Deserialize, Serialize};

use super::{results_file_name, Device, DeviceTimes, FailureClass, Platform, ScriptResult, Status};

/// One line per script in `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Peak GPU memory, MiB (GPU attempts only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_gpu_memory_mb: Option<f64>,
    /// The GPU it ran on (NVML index).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_index: Option<u32>,
    /// Seconds of its last successful run per device (see the result's).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_times: Option<DeviceTimes>,
    /// Number of attempts.
    pub attempts: usize,
    /// Final failure class.
    pub class: FailureClass,
    /// Why it did not succeed (see the result's `reason`); absent on success.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// Requested device.
    pub device_requested: Device,
    /// Device jax really used (null when no backend was initialised).
    pub device_used: Option<Platform>,
    /// Ran on another device than requested.
    pub fallback: bool,
    /// jax's backend differed from the device its environment asked for.
    pub device_mismatch: bool,
    /// Processes it left running, killed.
    pub leaks: usize,
    /// Not run: a previous success stands (`--resume`, `--rerun-failed`).
    #[serde(default)]
    pub resumed: bool,
    /// Name of its results file inside the results folder.
    pub results_file: String,
    /// Its final attempt started warm (forked from the zygote).
    #[serde(default)]
    pub warm: bool,
    /// Carried (`status: carried`): the run whose record stands for it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub carried_from: Option<String>,
    /// Carried: the status of that record.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub carried_status: Option<Status>,
    /// XLA compilations its attempts ran (persistent-cache hits included), as the
    /// telemetry shim counted them.
    #[serde(skip_serializing_if = "super::result::is_zero", default)]
    pub compilations: u64,
    /// Of those, loaded from the persistent compilation cache.
    #[serde(skip_serializing_if = "super::result::is_zero", default)]
    pub cache_hits: u64,
    /// Persistent compilation cache misses: compiled, and written to the cache.
    #[serde(skip_serializing_if = "super::result::is_zero", default)]
    pub cache_misses: u64,
}

impl ScriptSummary {
    /// The line of `performance_metrics.json` for one result.
    pub fn of(r: &ScriptResult) -> Self {
        ScriptSummary {
            id: r.id.clone(),
            status: r.status,
            execution_time_s: r.execution_time_s,
            cpu_user_s: r.cpu_user_s,
            cpu_system_s: r.cpu_system_s,
            peak_memory_mb: r.peak_memory_mb,
            peak_gpu_memory_mb: r.gpu.peak_gpu_memory_mb,
            gpu_index: r.gpu.gpu_index,
            device_times: r.device_times,
            attempts: r.attempts.len(),
            class: r.class,
            reason: r.reason.clone(),
            device_requested: r.device_requested,
            device_used: r.device_used,
            fallback: r.fallback.is_some(),
            device_mismatch: r.device_mismatch,
            leaks: r.leaks.len(),
            resumed: false,
            results_file: results_file_name(&r.id),
            warm: r.attempts.last().is_some_and(|a| a.start == "warm"),
            carried_from: None,
            carried_status: None,
            compilations: jax_sum(r, |j| j.compilations),
            cache_hits: jax_sum(r, |j| j.cache_hits),
            cache_misses: jax_sum(r, |j| j.cache_misses),
        }
    }
}

/// A count of the telemetry shim's, summed over the result's attempts.
fn jax_sum(r: &ScriptResult, count: fn(&super::JaxTelemetry) -> u64) -> u64 {
    r.attempts
        .iter()
        .filter_map(|a| a.jax.as_ref())
        .map(count)
        .sum()
}

impl ScriptSummary {
    /// Whether this run started the script: not carried from an earlier run, not kept
    /// by `--resume`, not left unstarted. Every figure of attempts (time, memory,
    /// warm starts, classes, retries) counts these alone.
    pub fn started_here(&self) -> bool {
        self.status != Status::Carried && !self.resumed && self.attempts > 0
    }

    /// A carried record that did not succeed: the script stands failed in the tree
    /// since the run that wrote it.
    pub fn still_failing(&self) -> bool {
        self.status == Status::Carried && self.carried_status != Some(Status::Succeeded)
    }

    /// The line of a script this run did not run, whose earlier record `earlier`
    /// stands: `status: carried`, with the run and status of that record.
    pub fn carried(earlier: &ScriptResult) -> Self {
        ScriptSummary {
            status: Status::Carried,
            carried_from: Some(earlier.run_id.clone()),
            carried_status: Some(earlier.status),
            ..ScriptSummary::of(earlier)
        }
    }
}
