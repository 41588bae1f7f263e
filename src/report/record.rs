//! One record per finished script: everything the end-of-run reports (Markdown,
//! JUnit, HTML and the GNN summary) show of it, built once from the events.
//!
//! Runs can have 10,000+ scripts and whole results already go to disk as scripts
//! finish, so a record keeps no full logs: only scripts that did not succeed keep
//! their stderr tail.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::events::RunEvent;
use crate::model::reason::{Ending, FailureReason};
use crate::model::{Device, Platform};
use crate::model::{ExceptionInfo, FailureClass, PerformanceMetrics, ScriptResult, Status};

/// One attempt, as the timeline draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub number: u32,
    /// Worker slot that ran it (the timeline's row).
    pub slot: usize,
    /// Start time (`None` when the result's text did not parse).
    pub started_at: Option<SystemTime>,
    /// Wall-clock seconds from spawn to exit.
    pub duration_s: f64,
    /// How the attempt ended.
    pub status: Status,
    /// Its failure class.
    pub class: FailureClass,
    /// How it ended, in the reports' words; `None` when it succeeded.
    pub words: Option<String>,
    /// Seconds its Slurm job waited in the queue before `started_at`.
    pub queued_s: Option<f64>,
}

/// One finished script, as every end-of-run report sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptRecord {
    /// The script's id.
    pub id: String,
    /// Absolute path of the script.
    pub script_path: String,
    /// Path relative to the output folder.
    pub relative_path: String,
    /// True when the final attempt exited with code 0.
    pub success: bool,
    /// How the script ended.
    pub status: Status,
    /// The final attempt's failure class.
    pub class: FailureClass,
    /// What the user asked for.
    pub device_requested: Device,
    /// The platform jax really used in the final attempt.
    pub device_used: Option<Platform>,
    /// Every attempt, in order (empty when the script never started).
    pub attempts: Vec<AttemptRecord>,
    /// Wall-clock seconds summed over attempts.
    pub execution_time_s: f64,
    /// Highest tree RSS of any attempt, MiB.
    pub peak_memory_mb: f64,
    /// Peak GPU memory, MiB, and the GPU (GPU attempts only).
    pub peak_gpu_memory_mb: Option<f64>,
    pub gpu_index: Option<u32>,
    /// jax's compile time in the final attempt ([`crate::model::JaxTelemetry::compile_s`]:
    /// tracing, lowering and XLA), when the script reported it.
    pub compile_time_s: Option<f64>,
    /// Where the final attempt's time went.
    pub time_breakdown: Option<crate::model::TimeBreakdown>,
    /// The line that decided the class.
    pub matched_line: Option<String>,
    /// The uncaught exception of the final attempt.
    pub exception: Option<ExceptionInfo>,
    /// Exit code of the final attempt, when it exited normally.
    pub return_code: Option<i32>,
    /// Terminating signal of the final attempt.
    pub signal: Option<i32>,
    /// Name of that signal.
    pub signal_name: Option<String>,
    /// The attempt time limit, seconds.
    pub timeout_s: f64,
    /// Start of the first attempt.
    pub started_at: Option<SystemTime>,
    /// File holding the last attempt's standard output.
    pub stdout_log: String,
    /// Bytes the last attempt wrote to stdout.
    pub stdout_bytes: u64,
    /// Bytes the last attempt wrote to stderr.
    pub stderr_bytes: u64,
    /// The last lines of standard error; empty for scripts that succeeded.
    pub stderr_tail: Vec<String>,
    /// File holding the last attempt's standard error.
    pub stderr_log: String,
    /// The script's data folder.
    pub data_dir: String,
    /// Why it did not succeed; `None` when it did (a carried record still failing
    /// keeps its earlier run's reason).
    pub reason: Option<FailureReason>,
    /// Set when this run did not run the script and an earlier record stands
    /// (`status` is then `carried`).
    pub carried: Option<Carried>,
}

/// What stands for a script this run did not run.
#[derive(Debug, Clone, PartialEq)]
pub struct Carried {
    /// The run whose record stands.
    pub from: String,
    /// How the script ended in that run.
    pub status: Status,
    /// Why this run did not run it.
    pub why: String,
}

impl Carried {
    /// One line for a report: `carried from run 20261122T…-42: succeeded`, or for a
    /// record that did not succeed `still failing since run 20261122T…-42: failed`.
    pub fn line(&self) -> String {
        let label = crate::model::Outcomes::label(self.status);
        match self.failing() {
            true => format!("still failing since run {}: {label}", self.from),
            false => format!("carried from run {}: {label}", self.from),
        }
    }

    /// Whether the record that stands did not succeed.
    pub fn failing(&self) -> bool {
        self.status != Status::Succeeded
    }
}

impl ScriptRecord {
    /// The record of a result.
    pub fn of(r: &ScriptResult) -> Self {
        let failed = !r.success || r.status != Status::Succeeded;
        ScriptRecord {
            id: r.id.clone(),
            script_path: r.script_path.clone(),
            relative_path: r.relative_path.clone(),
            success: r.success,
            status: r.status,
            class: r.class,
            device_requested: r.device_requested,
            device_used: r.device_used,
            attempts: r
                .attempts
                .iter()
                .map(|a| AttemptRecord {
                    number: a.number,
                    slot: a.slot,
                    started_at: Some(a.started_at.into()),
                    duration_s: a.duration_s,
                    status: a.status,
                    class: a.class,
                    words: Ending::of_attempt(a, r).words(),
                    queued_s: a.slurm.as_ref().map(|j| j.queued_s),
                })
                .collect(),
            execution_time_s: r.execution_time_s,
            peak_memory_mb: r.peak_memory_mb,
            peak_gpu_memory_mb: r.gpu.peak_gpu_memory_mb,
            gpu_index: r.gpu.gpu_index,
            compile_time_s: r.jax.as_ref().map(crate::model::JaxTelemetry::compile_s),
            time_breakdown: r.time_breakdown.clone(),
            matched_line: r.matched_line.clone(),
            exception: r.exception.clone(),
            return_code: r.return_code,
            signal: r.signal,
            signal_name: r.signal_name.clone(),
            timeout_s: r.timeout_s,
            started_at: r.started_at.map(SystemTime::from),
            stdout_log: r.stdout_log.clone(),
            stdout_bytes: r.stdout_bytes,
            stderr_bytes: r.stderr_bytes,
            stderr_tail: if failed {
                r.stderr_tail.clone()
            } else {
                Vec::new()
            },
            stderr_log: r.stderr_log.clone(),
            data_dir: r.data_dir.clone(),
            reason: FailureReason::of(r),
            carried: None,
        }
    }

    /// The record of a script this run did not run, whose earlier result `earlier`
    /// stands: what it was; when it did not succeed, its reason and output too, as the
    /// failure it still is.
    pub fn carried(earlier: &ScriptResult, why: &str) -> Self {
        let of = ScriptRecord::of(earlier);
        let failing = earlier.status != Status::Succeeded;
        ScriptRecord {
            status: Status::Carried,
            stderr_tail: if failing { of.stderr_tail } else { Vec::new() },
            reason: of.reason.filter(|_| failing),
            carried: Some(Carried {
                from: earlier.run_id.clone(),
                status: earlier.status,
                why: why.to_string(),
            }),
            ..of
        }
    }

    /// True when the script ended as `succeeded`.
    pub fn succeeded(&self) -> bool {
        self.status == Status::Succeeded
    }

    /// True when this run ran (or meant to run) the script and it did not succeed:
    /// what the reports detail. A carried script is not: this run did not run it.
    pub fn needs_attention(&self) -> bool {
        !matches!(self.status, Status::Succeeded | Status::Carried)
    }

    /// True for a carried record that did not succeed: still failing in the tree,
    /// since the run that wrote it. Listed with the failures, counted apart.
    pub fn still_failing(&self) -> bool {
        self.carried.as_ref().is_some_and(Carried::failing)
    }

    /// The reason as one line (`exit code 3: ValueError: bad`); `None` on success.
    pub fn reason_line(&self) -> Option<String> {
        self.reason.as_ref().map(FailureReason::line)
    }

    /// The uncaught exception as one line: `ValueError: bad value`, or the type alone.
    pub fn exception_text(&self) -> Option<String> {
        self.exception.as_ref().map(|e| {
            if e.message.is_empty() {
                e.kind.clone()
            } else {
                format!("{}: {}", e.kind, e.message)
            }
        })
    }
}

/// Collects the records of a run from its events, once for every end-of-run report
/// (`super::export::EndOfRun` owns it).
#[derive(Debug, Default)]
pub struct Records {
    /// In finishing order.
    records: Vec<ScriptRecord>,
    /// Worker slot of each started attempt, until its script finishes: the
    /// `ScriptStarted` event names the slot even where the attempt record does not.
    slots: HashMap<(String, u32), usize>,
}

impl Records {
    pub fn new() -> Self {
        Records::default()
    }

    /// Takes what the records need from an event; returns the new record when the
    /// event finished a script.
    pub fn handle(&mut self, event: &RunEvent) -> Option<&ScriptRecord> {
        match event {
            RunEvent::ScriptStarted {
                id, attempt, slot, ..
            } => {
                self.slots.insert((id.clone(), *attempt), *slot);
                None
            }
            RunEvent::ScriptFinished { result } => Some(self.push(result)),
            RunEvent::ScriptCarried { result, why } => {
                self.records.push(ScriptRecord::carried(result, why));
                self.records.last()
            }
            _ => None,
        }
    }

    /// Records a finished script.
    pub fn push(&mut self, r: &ScriptResult) -> &ScriptRecord {
        let mut record = ScriptRecord::of(r);
        for a in &mut record.attempts {
            if let Some(slot) = self.slots.remove(&(r.id.clone(), a.number)) {
                a.slot = slot;
            }
        }
        self.records.push(record);
        self.records.last().expect("just pushed")
    }

    /// The records as scripts finished: the order attempts happened in.
    pub fn finishing_order(&self) -> &[ScriptRecord] {
        &self.records
    }

    /// The records in the metrics' script order (discovery order): scripts finish in
    /// any order, reports list them as discovered. Records the metrics do not list
    /// come last, as they finished.
    pub fn ordered(&self, m: &PerformanceMetrics) -> Vec<&ScriptRecord> {
        let pos: HashMap<&str, usize> = m
            .scripts
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let mut out: Vec<&ScriptRecord> = self.records.iter().collect();
        out.sort_by_key(|r| pos.get(r.id.as_str()).copied().unwrap_or(usize::MAX));
        out
    }
}

#[cfg(test)]
mod tests;
