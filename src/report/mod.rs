//! Stage 3, report: subscribers to the run's event stream that write the results
//! folder and the execution log. Each reporter sees every event, in order.

mod atomic;
mod html;
mod json;
mod log;
pub mod summary;

pub use atomic::{write_atomic, write_json};
pub use html::HtmlReporter;
pub use json::JsonReporter;
pub use log::LogReporter;

use crate::error::ReportError;
use crate::events::{EventReceiver, RunEvent};

/// A subscriber to the run's events.
pub trait Reporter: Send {
    /// Handles one event; an error is remembered and the run goes on.
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError>;
}

/// Feeds every event to every reporter until the stream closes; returns the errors
/// reporters met, so the caller can tell the user the results are incomplete.
pub async fn dispatch(
    mut rx: EventReceiver,
    mut reporters: Vec<Box<dyn Reporter>>,
) -> Vec<ReportError> {
    let mut errors = Vec::new();
    while let Some(event) = rx.recv().await {
        for r in reporters.iter_mut() {
            if let Err(e) = r.handle(&event) {
                tracing::error!("{e}");
                errors.push(e);
            }
        }
    }
    errors
}
