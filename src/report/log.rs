//! Turns run events into log lines. The lines go wherever tracing is routed: the
//! terminal at the chosen verbosity and `execution_log.txt` in the results folder.

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::Status;

/// The execution log writer.
#[derive(Debug, Default)]
pub struct LogReporter {
    /// The first fallback is announced plainly; the rest only at debug level.
    fallback_announced: bool,
}

impl Reporter for LogReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::RunStarted {
                total,
                jobs,
                device,
                interpreter,
            } => tracing::info!(
                "running {total} script(s) on {}, {jobs} at a time, with {interpreter}",
                device.as_str()
            ),
            RunEvent::Sample { .. } => {}
            RunEvent::ScriptStarted {
                id,
                attempt,
                device,
                path,
                ..
            } => tracing::info!(
                "start  {id} (attempt {attempt}, {}) {path}",
                device.as_str()
            ),
            RunEvent::AttemptFinished { id, attempt } => tracing::debug!(
                "attempt {} of {id}: {} in {:.2}s, exit {:?}, signal {:?}, peak {:.1} MiB{}",
                attempt.number,
                attempt.class.as_str(),
                attempt.duration_s,
                attempt.return_code,
                attempt.signal,
                attempt.peak_memory_mb,
                attempt
                    .matched_line
                    .as_deref()
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default()
            ),
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
                        fallback.reason
                    );
                } else {
                    self.fallback_announced = true;
                    tracing::warn!(
                        "GPU unusable, scripts fall back to the CPU: {} (first: {id})",
                        fallback.reason
                    );
                }
            }
            RunEvent::ScriptFinished { result } => {
                let line = format!(
                    "{} {} in {:.2}s (peak {:.1} MiB)",
                    result.status.as_str(),
                    result.id,
                    result.execution_time_s,
                    result.peak_memory_mb
                );
                let why = result
                    .matched_line
                    .as_deref()
                    .or(result.stderr_tail.last().map(String::as_str))
                    .unwrap_or("");
                match result.status {
                    Status::Succeeded => tracing::info!("{line}"),
                    Status::TimedOut => tracing::warn!(
                        "{line}: no exit within {}s, the process group was stopped",
                        result.timeout_s
                    ),
                    _ => tracing::warn!("{line}: {}: {why}", result.class.as_str()),
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
                        leak.command
                    );
                }
            }
            RunEvent::Warning { message } => tracing::warn!("{message}"),
            RunEvent::RunFinished { metrics } => {
                let t = &metrics.totals;
                tracing::info!(
                    "finished: {} succeeded, {} failed of {} in {:.2}s",
                    t.succeeded,
                    t.failed,
                    t.total_scripts,
                    metrics.run.wall_time_s
                );
                if t.device_mismatches > 0 {
                    tracing::warn!(
                        "{} script(s) ran on another device than their environment asked for",
                        t.device_mismatches
                    );
                }
            }
        }
        Ok(())
    }
}
