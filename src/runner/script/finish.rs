//! A result made whole once its last attempt is in: the summary fields from the
//! attempts, then why the script did not succeed. Every result the runner reports
//! passes here, whether its script ran or never started.

use super::sys;
use crate::model::{JaxTelemetry, ScriptResult, Status};

/// The last step of every result, run or not: why the script did not succeed, in
/// the words every report uses, and the end of its standard output when that is what
/// explains it (standard error was empty). After this the result is whole: the
/// reports show it as it is and fill in nothing.
pub fn explain(r: &mut ScriptResult) {
    if let Some(reason) = crate::model::reason::FailureReason::of(r) {
        if reason.stream == "stdout" {
            r.stdout_tail = reason.tail.clone();
        }
        r.reason = Some(reason.line());
    }
}

/// Fills the summary fields from the attempts.
pub(super) fn finish(r: &mut ScriptResult) {
    let Some(last) = r.attempts.last() else {
        return;
    };
    r.status = last.status;
    r.class = last.class;
    r.matched_line = last.matched_line.clone();
    r.exception = last.exception.clone();
    r.user_frame = last.user_frame.clone();
    r.success = last.status == Status::Succeeded;
    r.return_code = last.return_code;
    r.signal = last.signal;
    r.signal_name = last.signal.map(sys::signal_name);
    r.jax = last.jax.clone();
    r.time_breakdown = last
        .jax
        .as_ref()
        .map(|j| crate::model::TimeBreakdown::of(last.duration_s, j));
    // Truth comes from jax itself, never from what the environment asked for.
    r.device_check = last.device_check.clone();
    r.device_used = match r.device_check {
        Some(_) => None,
        None => last.jax.as_ref().and_then(JaxTelemetry::platform),
    };
    r.device_mismatch = r.device_used.is_some_and(|used| used != last.device);
    r.stdout_log = last.stdout_log.clone();
    r.stderr_log = last.stderr_log.clone();
    r.log_truncated = last.log_cut_bytes > 0;
    r.execution_time_s = r.attempts.iter().map(|a| a.duration_s).sum();
    r.cpu_user_s = r.attempts.iter().map(|a| a.cpu_user_s).sum();
    r.cpu_system_s = r.attempts.iter().map(|a| a.cpu_system_s).sum();
    let highest = (r.attempts.iter()).max_by(|a, b| a.peak_memory_mb.total_cmp(&b.peak_memory_mb));
    r.peak_memory_mb = highest.map_or(0.0, |a| a.peak_memory_mb);
    r.memory_source = highest.and_then(|a| a.memory_source);
    r.started_at = r.attempts.first().map(|a| a.started_at);
    r.finished_at = Some(last.started_at.after(last.duration_s));
}
