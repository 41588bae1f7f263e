//! The event stream the core emits. Reporters (logs, JSON writers, progress displays)
//! subscribe to it; the core itself never prints.

use serde::Serialize;
use tokio::sync::mpsc;

use crate::model::{Attempt, FailureClass, Fallback, PerformanceMetrics, Platform, ScriptResult};

/// Something that happened during a run.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run begins.
    RunStarted {
        /// The run's id, as in `performance_metrics.json` and every result.
        run_id: String,
        /// Scripts this run starts (kept ones not included).
        total: usize,
        /// Earlier successes `--resume`/`--rerun-failed` keep instead of running: each
        /// still comes as a `script_finished` (its `resumed_from` set).
        #[serde(default)]
        kept: usize,
        /// Scripts run at once.
        jobs: usize,
        /// Platform scripts start on.
        device: Platform,
        /// Interpreter path.
        interpreter: String,
        /// Wall seconds the run should take, from the previous run's durations spread
        /// over the jobs; absent when the history knows none of the scripts.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        expected_s: Option<f64>,
    },
    /// An attempt of a script starts.
    ScriptStarted {
        /// Script id.
        id: String,
        /// Attempt number, from 1.
        attempt: u32,
        /// Platform of this attempt.
        device: Platform,
        /// Path relative to the output folder.
        path: String,
        /// Worker slot running it, from 0 to jobs - 1 (the timeline's row).
        slot: usize,
    },
    /// A Slurm job was submitted for an attempt (`--backend slurm`): it waits in the
    /// queue until [`RunEvent::JobRunning`].
    JobQueued {
        /// The script's id.
        id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// Slurm's job id.
        job_id: String,
    },
    /// The attempt's Slurm job left the queue and runs on a node.
    JobRunning {
        /// The script's id.
        id: String,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// A running attempt's resources, about once a second.
    Sample {
        /// Script id.
        id: String,
        /// Attempt number.
        attempt: u32,
        /// Seconds since the attempt started.
        elapsed_s: f64,
        /// Memory of the process tree as the attempt's `memory_source` counts it
        /// (the cgroup's charge, or proportional set sizes summed), MiB.
        rss_mb: f64,
        /// Processes in the tree.
        processes: usize,
        /// GPU memory of the script now, MiB (GPU attempts whose GPU NVML reads).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        gpu_memory_mb: Option<f64>,
        /// Utilisation of its GPU now, percent.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        gpu_utilization_pct: Option<f64>,
    },
    /// An attempt ended.
    AttemptFinished {
        /// Script id.
        id: String,
        /// Its number, 1 for the first (the same field, of the same type, as in every
        /// other event).
        attempt: u32,
        /// The attempt as recorded in the result.
        details: Box<Attempt>,
    },
    /// A failed attempt will be retried after a delay.
    RetryScheduled {
        /// Script id.
        id: String,
        /// The attempt that failed.
        attempt: u32,
        /// Its failure class.
        class: FailureClass,
        /// Seconds until the next attempt.
        delay_s: f64,
    },
    /// A script moves to another device.
    Fallback {
        /// Script id.
        id: String,
        /// From, to and why.
        fallback: Fallback,
    },
    /// A script's final result is known.
    ScriptFinished {
        /// The result, as written to `<id>_results.json`.
        result: Box<ScriptResult>,
    },
    /// A script this run did not run (not selected, skipped by `--fail-fast`, not
    /// started before a stop) whose earlier record stands: its files are left as they
    /// are, and the reports show it as carried from the run that made it.
    ScriptCarried {
        /// The earlier record, unchanged (its `run_id` is the run that made it).
        result: Box<ScriptResult>,
        /// Why this run did not run it.
        why: String,
    },
    /// A line a script wrote, sent only with `--no-capture` (the logs get every line
    /// either way).
    Output {
        /// Script id.
        id: String,
        /// Attempt number.
        attempt: u32,
        /// `stdout` or `stderr`.
        stream: Stream,
        /// The line, without its end (decoded lossily).
        line: String,
    },
    /// The plan of a `--dry-run`, one event per script in run order; nothing runs.
    Planned {
        /// What would happen to the script.
        script: Box<crate::model::PlannedScript>,
    },
    /// A problem that does not stop the run.
    Warning {
        /// What happened.
        message: String,
    },
    /// The run ended; the metrics are final.
    RunFinished {
        /// As written to `performance_metrics.json`.
        metrics: Box<PerformanceMetrics>,
    },
}

/// Which of a script's output streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The sending side of the stream; cheap to clone into tasks.
#[derive(Debug, Clone)]
pub struct EventSender(mpsc::UnboundedSender<RunEvent>);

/// Receiving side, owned by the dispatcher.
pub type EventReceiver = mpsc::UnboundedReceiver<RunEvent>;

impl EventSender {
    pub fn channel() -> (EventSender, EventReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSender(tx), rx)
    }

    /// Sends an event; a closed stream (no subscribers left) is not the core's problem.
    pub fn emit(&self, event: RunEvent) {
        let _ = self.0.send(event);
    }
}
