//! Stage 3, report: subscribers to the run's event stream that write the results
//! folder and the execution log. Each reporter sees every event, in order.
//! The end-of-run documents (Markdown, JUnit, HTML, the GNN summary) render from one
//! record per script, collected by `record::Records`.

mod atomic;
mod echo;
pub mod gnn;
mod html;
mod json;
mod junit;
mod log;
mod markdown;
mod ndjson;
mod progress;
mod record;
pub mod summary;
pub mod sweep;

pub use atomic::{
    write_atomic, write_atomic_stream, write_atomic_with, write_json, write_json_with,
};
pub use echo::EchoReporter;
pub use gnn::GnnReporter;
pub use html::HtmlReporter;
pub use json::JsonReporter;
pub use junit::JunitReporter;
pub use log::{LogReporter, RunLogFile};
pub use markdown::MarkdownReporter;
pub use ndjson::{event_line, NdjsonReporter};
pub use progress::{print_above_bars, ProgressReporter};

use crate::error::ReportError;
use crate::events::{EventReceiver, RunEvent};
use crate::halt::Halt;

/// A subscriber to the run's events.
pub trait Reporter: Send {
    /// Handles one event; an error is remembered and the run goes on.
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError>;
}

/// Feeds every event to every reporter until the stream closes; returns the errors
/// reporters met, so the caller can tell the user the results are incomplete. A write
/// that fails for lack of space raises `halt`: no more scripts start.
pub async fn dispatch(
    mut rx: EventReceiver,
    mut reporters: Vec<Box<dyn Reporter>>,
    halt: Halt,
) -> Vec<ReportError> {
    let mut errors = Vec::new();
    while let Some(mut event) = rx.recv().await {
        complete(&mut event);
        for r in reporters.iter_mut() {
            // A reporter that panics must not take the others (and the results) down.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.handle(&event)));
            let error = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(panic) => ReportError::Panicked {
                    message: panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default(),
                },
            };
            let full = match &error {
                ReportError::Write { path, source } => halt.check(path, source),
                _ => false,
            };
            // The halt says it once; every later write to a full disk fails as well.
            if full {
                tracing::debug!("{}", crate::error::chain(&error).join(": "));
            } else {
                tracing::error!("{}", crate::error::chain(&error).join(": "));
            }
            errors.push(error);
        }
    }
    errors
}

/// Fills in, once for every reporter, what a finished script's event does not carry
/// yet: why it failed, and the end of its standard output when that is what explains
/// it (standard error was empty).
fn complete(event: &mut RunEvent) {
    if let RunEvent::ScriptFinished { result } = event {
        if let Some(reason) = crate::model::reason::FailureReason::of(result) {
            if reason.stream == "stdout" {
                result.stdout_tail = reason.tail.clone();
            }
            result.reason = Some(reason.line());
        }
    }
}
