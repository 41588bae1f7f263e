//! Turns run events into log lines. The lines go wherever tracing is routed: the
//! terminal at the chosen verbosity and `execution_log.txt` in the results folder.

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::Status;

/// The execution log writer.
#[derive(Debug, Default)]
pub struct LogReporter;

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
            RunEvent::ScriptStarted {
                id,
                attempt,
                device,
                path,
            } => tracing::info!(
                "start  {id} (attempt {attempt}, {}) {path}",
                device.as_str()
            ),
            RunEvent::AttemptFinished { id, attempt } => tracing::debug!(
                "attempt {} of {id}: {} in {:.2}s, exit {:?}, signal {:?}, peak {:.1} MiB",
                attempt.number,
                attempt.status.as_str(),
                attempt.duration_s,
                attempt.return_code,
                attempt.signal,
                attempt.peak_memory_mb
            ),
            RunEvent::ScriptFinished { result } => {
                let line = format!(
                    "{} {} in {:.2}s (peak {:.1} MiB)",
                    result.status.as_str(),
                    result.id,
                    result.execution_time_s,
                    result.peak_memory_mb
                );
                match result.status {
                    Status::Succeeded => tracing::info!("{line}"),
                    Status::TimedOut => tracing::warn!(
                        "{line}: no exit within {}s, the process group was stopped",
                        result.timeout_s
                    ),
                    _ => {
                        let last = result.stderr_tail.last().map(String::as_str).unwrap_or("");
                        tracing::warn!("{line}: {last}");
                    }
                }
            }
            RunEvent::Warning { message } => tracing::warn!("{message}"),
            RunEvent::RunFinished { metrics } => tracing::info!(
                "finished: {} succeeded, {} failed of {} in {:.2}s",
                metrics.totals.succeeded,
                metrics.totals.failed,
                metrics.totals.total_scripts,
                metrics.run.wall_time_s
            ),
        }
        Ok(())
    }
}
