//! Turns run events into log lines. The lines go wherever tracing is routed: the
//! terminal at the chosen verbosity and `execution_log.txt` in the results folder,
//! which [`RunLogFile`] creates only once the run really starts. What a script
//! controls in a line (its path, reason, matched line, a leaked command) is written
//! through [`escape::line`], so neither the terminal nor a reader of the log obeys it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::escape;
use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::halt::Halt;
use crate::model::Status;

/// The target of lines the execution log keeps and the terminal shows only at `-v`
/// (a script's start): the terminal has its own line per finished script.
pub const DETAIL: &str = "jax_runner::detail";
/// The target of lines for the execution log alone (a script's end, the counts): the
/// terminal says them its own way (`report::terminal`).
pub const LOG_ONLY: &str = "jax_runner::log_only";

/// Start-up lines kept in memory until the log file opens, at most.
const MAX_PENDING_BYTES: usize = 1 << 20;

/// `execution_log.txt`. It is created, replacing the previous run's, only when the
/// run really starts (its first event); the lines logged during start-up wait in
/// memory until then, so a run interrupted during start-up leaves the previous log
/// whole. A write that fails for lack of space raises the run's [`Halt`]; after any
/// failed write the file is left alone (the terminal still shows every line).
#[derive(Debug, Clone)]
pub struct RunLogFile {
    path: PathBuf,
    state: Arc<Mutex<LogState>>,
    halt: Halt,
}

#[derive(Debug)]
enum LogState {
    Pending(Vec<u8>),
    Open(std::fs::File),
    Failed,
}

impl RunLogFile {
    pub fn new(path: PathBuf, halt: Halt) -> Self {
        RunLogFile {
            path,
            state: Arc::new(Mutex::new(LogState::Pending(Vec::new()))),
            halt,
        }
    }

    /// Creates the file and writes the lines that waited; later calls do nothing.
    pub fn open(&self) -> Result<(), ReportError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let LogState::Pending(pending) = &*state else {
            return Ok(());
        };
        // Made anew, so a link or FIFO left at its name is replaced, not followed.
        let opened = crate::confined::create_file(&self.path).and_then(|mut f| {
            f.write_all(pending)?;
            Ok(f)
        });
        match opened {
            Ok(f) => {
                *state = LogState::Open(f);
                Ok(())
            }
            Err(source) => {
                *state = LogState::Failed;
                drop(state);
                Err(ReportError::Write {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }
}

impl Write for RunLogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let failed = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *state {
                LogState::Pending(lines) => {
                    if lines.len() + buf.len() <= MAX_PENDING_BYTES {
                        lines.extend_from_slice(buf);
                    }
                    None
                }
                LogState::Open(file) => match file.write_all(buf) {
                    Ok(()) => None,
                    Err(e) => {
                        *state = LogState::Failed;
                        Some(e)
                    }
                },
                LogState::Failed => None,
            }
        };
        // Outside the lock: raising the halt logs, and the line comes back here.
        if let Some(e) = failed {
            self.halt.check(&self.path, &e);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The execution log writer.
#[derive(Debug, Default)]
pub struct LogReporter {
    /// The first fallback is announced plainly; the rest only at debug level.
    fallback_announced: bool,
    /// Opened at the run's first event, the moment the run really starts.
    file: Option<RunLogFile>,
}

impl LogReporter {
    /// A log reporter that opens `file` when the run starts.
    pub fn with_file(file: RunLogFile) -> Self {
        LogReporter {
            fallback_announced: false,
            file: Some(file),
        }
    }
}

impl Reporter for LogReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        if let Some(file) = self.file.take() {
            file.open()?;
        }
        match event {
            RunEvent::RunStarted {
                run_id,
                total,
                kept,
                jobs,
                device,
                interpreter,
                ..
            } => {
                let kept = match kept {
                    0 => String::new(),
                    n => format!(" ({n} earlier success(es) kept unchanged)"),
                };
                tracing::info!(
                    "run {run_id}: running {total} script(s){kept} on {}, {jobs} at a time, with {interpreter}",
                    device.as_str()
                )
            }
            RunEvent::Sample { .. } => {}
            RunEvent::JobQueued {
                id,
                attempt,
                job_id,
            } => tracing::info!(
                target: DETAIL,
                "queued {id} (attempt {attempt}): Slurm job {job_id}"
            ),
            RunEvent::JobRunning { id, attempt } => tracing::info!(
                target: DETAIL,
                "runs   {id} (attempt {attempt}): its Slurm job left the queue"
            ),
            RunEvent::ScriptStarted {
                id,
                attempt,
                device,
                path,
                ..
            } => tracing::info!(
                target: DETAIL,
                "start  {id} (attempt {attempt}, {}) {}",
                device.as_str(),
                escape::line(path)
            ),
            RunEvent::AttemptFinished {
                id,
                details: attempt,
                ..
            } => attempt_finished(id, attempt),
            RunEvent::RetryScheduled {
                id,
                attempt,
                class,
                delay_s,
            } => tracing::info!(
                "retry  {id}: attempt {attempt} ended in {}, next in {delay_s:.1}s",
                class.as_str()
            ),
            RunEvent::Fallback { id, fallback } => {
                if self.fallback_announced {
                    tracing::debug!(
                        "{id} falls back to {}: {}",
                        fallback.to.as_str(),
                        escape::line(&fallback.reason)
                    );
                } else {
                    self.fallback_announced = true;
                    tracing::warn!(
                        "GPU unusable, scripts fall back to the CPU: {} (first: {id})",
                        escape::line(&fallback.reason)
                    );
                }
            }
            RunEvent::ScriptFinished { result } => finished(result),
            RunEvent::ScriptCarried { result, why } => tracing::info!(
                target: LOG_ONLY,
                "carried {}: {}; its record from run {} ({}) stands",
                result.id,
                escape::line(why),
                result.run_id,
                result.status.as_str()
            ),
            RunEvent::Warning { message } => tracing::warn!("{}", escape::excerpt(message)),
            // --no-capture lines are the echo reporter's; a plan is printed by the edge.
            RunEvent::Output { .. } | RunEvent::Planned { .. } => {}
            RunEvent::RunFinished { metrics } => run_finished(metrics),
        }
        Ok(())
    }
}

/// One attempt's end, at debug level: its class, time, exit and memory.
fn attempt_finished(id: &str, attempt: &crate::model::Attempt) {
    tracing::debug!(
        "attempt {} of {id}: {} in {:.2}s, {}, peak {:.1} MiB{}",
        attempt.number,
        attempt.class.as_str(),
        attempt.duration_s,
        match (attempt.return_code, attempt.signal) {
            (_, Some(sig)) => format!("killed by {}", crate::model::reason::signal_name(sig)),
            (Some(code), None) => format!("exit code {code}"),
            (None, None) => "no exit status".to_string(),
        },
        attempt.peak_memory_mb,
        attempt
            .matched_line
            .as_deref()
            .map(|l| format!(": {}", escape::line(l)))
            .unwrap_or_default()
    );
}

/// The run's end in the log, in the one vocabulary, and what the device check found.
fn run_finished(metrics: &crate::model::PerformanceMetrics) {
    let t = &metrics.totals;
    tracing::info!(
        target: LOG_ONLY,
        "finished: {} in {:.2}s",
        t.outcomes().words(),
        metrics.run.wall_time_s
    );
    if t.device_mismatches > 0 {
        tracing::warn!(
            "{} script(s) ran on another device than their environment asked for",
            t.device_mismatches
        );
    }
}

/// A script's end, with its reason, a device mismatch and the processes it left.
fn finished(result: &crate::model::ScriptResult) {
    let line = format!(
        "{} {} in {:.2}s (peak {:.1} MiB)",
        result.status.as_str(),
        result.id,
        result.execution_time_s,
        result.peak_memory_mb
    );
    match (result.status, &result.reason) {
        (Status::Succeeded, _) => tracing::info!(target: LOG_ONLY, "{line}"),
        (_, Some(why)) => tracing::warn!(target: LOG_ONLY, "{line}: {}", escape::line(why)),
        (_, None) => tracing::warn!(target: LOG_ONLY, "{line}: {}", result.class.as_str()),
    }
    if result.device_mismatch {
        tracing::warn!(
            "{} asked for {} but jax ran on {}",
            result.id,
            result.attempts.last().map_or("?", |a| a.device.as_str()),
            result.device_used.map_or("?", |d| d.as_str())
        );
    }
    for leak in &result.leaks {
        tracing::warn!(
            "{} left a process running, killed: {} {}",
            result.id,
            leak.pid,
            escape::line(&leak.command)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_replaces_the_previous_one_only_when_the_run_starts() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("execution_log.txt");
        std::fs::write(&path, "previous run\n").unwrap();
        let mut log = RunLogFile::new(path.clone(), Halt::new());
        log.write_all(b"start-up line\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "previous run\n");
        let mut reporter = LogReporter::with_file(log.clone());
        reporter
            .handle(&RunEvent::Warning {
                message: "first event".into(),
            })
            .unwrap();
        log.write_all(b"later line\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "start-up line\nlater line\n"
        );
    }
}
