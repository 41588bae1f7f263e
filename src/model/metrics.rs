//! `performance_metrics.json`: the run, its totals, one line per script.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    Device, FailureClass, Outcomes, Platform, ScriptSummary, Status, XlaPreset, SCHEMA_VERSION,
};

/// The run as a whole, in `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunInfo {
    /// This run's unique id (UTC start time and the runner's PID,
    /// `20261122T183605.123Z-4242`); every result of the run carries it.
    #[serde(default)]
    pub run_id: String,
    /// The version of jax-runner that wrote these files.
    #[serde(default)]
    pub runner_version: String,
    /// The runner's command line, program first.
    #[serde(default)]
    pub argv: Vec<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: super::Timestamp,
    /// End, RFC 3339 UTC.
    pub finished_at: super::Timestamp,
    /// Wall-clock seconds of the whole run.
    pub wall_time_s: f64,
    /// The device asked for.
    pub device_requested: Device,
    /// The platform scripts were started with.
    pub device: Platform,
    /// Scripts run at once.
    pub jobs: usize,
    /// Slots the run opened beyond `jobs` once its scripts proved very short (a local
    /// CPU run with the default `--jobs`: see docs/execution.md): up to `jobs +
    /// spare_slots` ran at once from then on.
    #[serde(default)]
    pub spare_slots: usize,
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
    /// What confined the run's scripts (each result's `sandbox.layers`); empty when
    /// they ran unsandboxed.
    #[serde(default)]
    pub sandbox_layers: Vec<String>,
    /// True when the run was stopped by a signal.
    pub interrupted: bool,
    /// Retries allowed after a script's first attempt.
    pub retries: u32,
    /// Failure classes that were retried.
    pub retry_on: Vec<FailureClass>,
    /// Where GPU scripts go when the GPU environment fails (`cpu` or `none`).
    pub fallback: String,
    /// Why the whole run left the requested device before starting, if it did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device_fallback_reason: Option<String>,
    /// The runner's own peak resident memory, MiB, up to the end of the scripts (it
    /// stays flat however much scripts print). It is taken before the end-of-run
    /// reports are made; the execution log's last line gives the peak with them.
    pub runner_peak_rss_mb: f64,
    /// Why the runner stopped starting scripts before the end, when it did: a file of
    /// its own could not be written because the file system is full.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub halted: Option<String>,
    /// How the platform was chosen (`requested`, `auto: the GPU works`, …).
    pub device_choice: String,
    /// Every run option's effective value and where it came from (command line,
    /// `JAX_RUNNER_*` variable, `jax-runner.toml` profile, or default), by long name.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, super::Setting>,
    /// The `jax-runner.toml` profile in use, when a config file was read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub profile: Option<String>,
    /// Scripts per GPU (`--gpu-share`), for GPU runs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_share: Option<usize>,
    /// How that number was chosen.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_share_reason: Option<String>,
    /// `--xla-preset`, when given.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub xla_preset: Option<XlaPreset>,
}

impl RunInfo {
    /// How many ran at once, in words: `2 job(s)`, or with the spare slots a run of
    /// very short scripts opened, `2 job(s) and 1 spare slot(s)`.
    pub fn jobs_words(&self) -> String {
        match self.spare_slots {
            0 => format!("{} job(s)", self.jobs),
            n => format!("{} job(s) and {n} spare slot(s)", self.jobs),
        }
    }
}

/// Seconds of a script's last successful run on each device (what `--device auto`
/// learns from): each figure is one attempt's wall time on the device jax really used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceTimes {
    /// On the CPU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu_s: Option<f64>,
    /// On a GPU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_s: Option<f64>,
}

/// Counts over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Totals {
    /// Scripts discovered and scheduled.
    pub total_scripts: usize,
    /// Scripts whose final status is `succeeded`.
    pub succeeded: usize,
    /// Scripts whose final status is `failed` (an error, a crash, a kill). The six
    /// status counts (`succeeded`, `failed`, `timed_out`, `interrupted`, `skipped`,
    /// `carried`) are disjoint and add up to `total_scripts`.
    pub failed: usize,
    /// Scripts whose final status is `timed_out`.
    pub timed_out: usize,
    /// Scripts whose final status is `interrupted` (stopped by a signal, or not
    /// started before the stop).
    pub interrupted: usize,
    /// Scripts never started because `--fail-fast`/`--max-fail` stopped the run.
    #[serde(default)]
    pub skipped: usize,
    /// Scripts the render manifest lists that do not exist.
    pub missing: usize,
    /// Render manifest entries refused because they resolve outside `--output-dir`.
    #[serde(default)]
    pub refused: usize,
    /// Models the render manifest says step 11 failed to render to JAX: no script
    /// exists for them, and the run does not succeed.
    #[serde(default)]
    pub render_failures: usize,
    /// Mean of `execution_time_s` over the scripts this run started, seconds (a
    /// carried, kept or unstarted script is not this run's: every figure of attempts
    /// below counts this run's alone).
    pub avg_execution_time: f64,
    /// Sum of `execution_time_s` over the scripts this run started, seconds.
    pub total_execution_time: f64,
    /// Highest `peak_memory_mb` of the scripts this run started.
    pub peak_memory_mb: f64,
    /// Scripts that ran on another device than requested.
    pub fallbacks: usize,
    /// Scripts whose jax backend differed from the device their environment asked for.
    pub device_mismatches: usize,
    /// Scripts that needed more than one attempt.
    pub retried: usize,
    /// Processes scripts left running, killed by the runner.
    pub leaks: usize,
    /// Scripts per final failure class, carried and kept ones left out.
    pub by_class: BTreeMap<FailureClass, usize>,
    /// Scripts not run because a previous success stands.
    #[serde(default)]
    pub resumed: usize,
    /// Scripts this run started whose final attempt started warm (forked from the
    /// zygote).
    #[serde(default)]
    pub warm_starts: usize,
    /// Scripts not run by this run whose earlier record stands (`status: carried`).
    #[serde(default)]
    pub carried: usize,
    /// Of the carried, those whose standing record did not succeed: still failing in
    /// the tree since the run that wrote it (`carried_from`). Counted apart from this
    /// run's failures; `jax-runner show` fails while any stands.
    #[serde(default)]
    pub still_failing: usize,
    /// XLA compilations this run's scripts ran, persistent-cache hits included.
    #[serde(default)]
    pub compilations: u64,
    /// Of those, loaded from the persistent compilation cache.
    #[serde(default)]
    pub cache_hits: u64,
    /// Persistent compilation cache misses: compiled and written to the cache.
    #[serde(default)]
    pub cache_misses: u64,
}

impl Totals {
    /// The six status counts, for wording them ([`Outcomes::words`]).
    pub fn outcomes(&self) -> Outcomes {
        Outcomes {
            succeeded: self.succeeded,
            failed: self.failed,
            timed_out: self.timed_out,
            interrupted: self.interrupted,
            skipped: self.skipped,
            carried: self.carried,
            still_failing: self.still_failing,
        }
    }
}

/// A model step 11 failed to render to JAX, as its manifest says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RenderFailed {
    /// The GNN source the manifest names.
    pub source: String,
    /// Step 11's message.
    pub message: String,
}

/// `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PerformanceMetrics {
    /// Version of this format.
    pub schema_version: u32,
    /// The run.
    pub run: RunInfo,
    /// Counts and aggregates.
    pub totals: Totals,
    /// `totals.avg_execution_time`, also at the top level: where the module jax-runner
    /// replaces (GNN's `execute/jax`) put it, and its README reads it.
    #[serde(default)]
    pub avg_execution_time: f64,
    /// `totals.peak_memory_mb`, also at the top level, as the seed's README reads it.
    #[serde(default)]
    pub peak_memory_mb: f64,
    /// One entry per script, in discovery order.
    pub scripts: Vec<ScriptSummary>,
    /// Paths the render manifest lists that do not exist.
    pub missing_scripts: Vec<String>,
    /// Render manifest entries, as written, that resolve outside `--output-dir`
    /// (absolute paths, `../..`, symlinks out): refused, never run.
    #[serde(default)]
    pub refused_scripts: Vec<String>,
    /// Models the render manifest marks as failed to render to JAX (`success: false`),
    /// with step 11's message.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub render_failures: Vec<RenderFailed>,
    /// Problems met along the way that did not stop the run (unreadable folders, …).
    pub warnings: Vec<String>,
    /// The pre-flight's doctor report (absent with `--no-preflight` or no scripts).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub environment: Option<super::doctor::DoctorReport>,
}

impl PerformanceMetrics {
    /// Aggregates the per-script lines; the single place totals are computed. Runs
    /// keep only these small lines, not whole results, so memory stays flat.
    pub fn build(
        run: RunInfo,
        scripts: Vec<ScriptSummary>,
        missing_scripts: Vec<String>,
        warnings: Vec<String>,
    ) -> Self {
        let outcomes = Outcomes::count(scripts.iter().map(|r| r.status));
        // This run's attempts alone: a carried or kept record is an earlier run's.
        let ran: Vec<&ScriptSummary> = scripts.iter().filter(|r| r.started_here()).collect();
        let total_execution_time: f64 = ran.iter().map(|r| r.execution_time_s).sum();
        let count = |f: fn(&ScriptSummary) -> bool| ran.iter().filter(|r| f(r)).count();
        let totals = Totals {
            total_scripts: scripts.len(),
            succeeded: outcomes.succeeded,
            failed: outcomes.failed,
            timed_out: outcomes.timed_out,
            interrupted: outcomes.interrupted,
            skipped: outcomes.skipped,
            missing: missing_scripts.len(),
            refused: 0,
            render_failures: 0,
            avg_execution_time: if ran.is_empty() {
                0.0
            } else {
                total_execution_time / ran.len() as f64
            },
            total_execution_time,
            peak_memory_mb: ran.iter().map(|r| r.peak_memory_mb).fold(0.0, f64::max),
            fallbacks: count(|r| r.fallback),
            device_mismatches: count(|r| r.device_mismatch),
            retried: count(|r| r.attempts > 1),
            leaks: ran.iter().map(|r| r.leaks).sum(),
            resumed: scripts.iter().filter(|r| r.resumed).count(),
            warm_starts: count(|r| r.warm),
            carried: outcomes.carried,
            still_failing: scripts.iter().filter(|r| r.still_failing()).count(),
            compilations: ran.iter().map(|r| r.compilations).sum(),
            cache_hits: ran.iter().map(|r| r.cache_hits).sum(),
            cache_misses: ran.iter().map(|r| r.cache_misses).sum(),
            by_class: (scripts.iter())
                .filter(|r| r.status != Status::Carried && !r.resumed)
                .fold(BTreeMap::new(), |mut m, r| {
                    *m.entry(r.class).or_default() += 1;
                    m
                }),
        };
        PerformanceMetrics {
            schema_version: SCHEMA_VERSION,
            run,
            avg_execution_time: totals.avg_execution_time,
            peak_memory_mb: totals.peak_memory_mb,
            totals,
            scripts,
            missing_scripts,
            refused_scripts: Vec::new(),
            render_failures: Vec::new(),
            warnings,
            environment: None,
        }
    }

    /// Records the render manifest entries refused for resolving outside the tree.
    pub fn with_refused(mut self, refused: Vec<String>) -> Self {
        self.totals.refused = refused.len();
        self.refused_scripts = refused;
        self
    }

    /// Records the models the render manifest says failed to render.
    pub fn with_render_failures(mut self, failed: Vec<(String, String)>) -> Self {
        self.totals.render_failures = failed.len();
        self.render_failures = (failed.into_iter())
            .map(|(source, message)| RenderFailed { source, message })
            .collect();
        self
    }

    /// True when no script this run ran (or meant to run) ended other than succeeded
    /// and the manifest listed nothing missing, refused or failed to render. Carried
    /// scripts do not count: this run did not run them.
    pub fn all_succeeded(&self) -> bool {
        self.totals.outcomes().unsuccessful() == 0
            && self.totals.missing == 0
            && self.totals.refused == 0
            && self.totals.render_failures == 0
    }

    /// True when every script of the tree stands succeeded: [`Self::all_succeeded`]
    /// and no carried record still failing. `jax-runner show` answers by this.
    pub fn tree_succeeded(&self) -> bool {
        self.all_succeeded() && self.totals.still_failing == 0
    }
}

/// A run record for tests: a CPU run of 2 jobs with `patch`'s keys on top.
#[cfg(test)]
pub(crate) fn test_run_info(patch: serde_json::Value) -> RunInfo {
    let mut run = serde_json::json!({
        "started_at": "2026-11-22T07:40:35.000Z",
        "finished_at": "2026-11-22T07:40:45.000Z", "wall_time_s": 0.0,
        "device_requested": "cpu", "device": "cpu", "jobs": 2, "interpreter": "/py",
        "interpreter_source": "flag", "python_version": "3", "jax_version": null,
        "jaxlib_version": null, "output_dir": "/out", "results_dir": "/r",
        "compilation_cache": null, "interrupted": false, "retries": 0, "retry_on": [],
        "fallback": "cpu", "runner_peak_rss_mb": 1.0, "device_choice": "requested"
    });
    let base = run.as_object_mut().expect("an object");
    for (k, v) in patch.as_object().expect("patch is an object") {
        base.insert(k.clone(), v.clone());
    }
    serde_json::from_value(run).expect("a valid RunInfo")
}

/// A failed script's result for tests (`m/jax/model.py` in `/out`, exit code 1, no
/// attempt), with `patch`'s keys on top.
#[cfg(test)]
pub(crate) fn test_failed_result(patch: serde_json::Value) -> super::ScriptResult {
    let mut v = serde_json::json!({
        "schema_version": 1, "id": "model", "script_path": "/out/m/jax/model.py",
        "relative_path": "m/jax/model.py", "discovered_by": "jax_folder",
        "success": false, "status": "failed", "class": "script_error", "return_code": 1,
        "signal": null, "device_requested": "cpu", "device_used": "cpu",
        "device_mismatch": false, "attempts": [],
        "execution_time_s": 1.0, "peak_memory_mb": 1.0, "cpu_user_s": 0.0,
        "cpu_system_s": 0.0, "timeout_s": 2.0, "started_at": null,
        "finished_at": null, "stdout_log": "/o", "stderr_log": "/e",
        "stdout_bytes": 0, "stderr_bytes": 0, "stderr_tail": [],
        "log_truncated": false, "leaks": [], "data_dir": "/d",
        "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
    });
    let base = v.as_object_mut().expect("an object");
    for (k, val) in patch.as_object().expect("patch is an object") {
        base.insert(k.clone(), val.clone());
    }
    serde_json::from_value(v).expect("a valid ScriptResult")
}
