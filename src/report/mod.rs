//! Stage 3, report: subscribers to the run's event stream that write the results
//! folder and the execution log. Each reporter sees every event, in order.
//! The end-of-run documents (Markdown, JUnit, HTML, the GNN summary) are exporters
//! of one aggregate, `export::EndOfRun`, which keeps one record per script.

mod atomic;
mod csv;
mod echo;
pub mod escape;
pub mod export;
pub mod gnn;
mod html;
mod json;
mod junit;
mod log;
mod markdown;
mod ndjson;
pub mod progress;
mod record;
pub mod summary;
pub mod terminal;

pub use atomic::{
    json_bytes, write_atomic, write_atomic_stream, write_atomic_with, write_json, write_json_with,
};
pub use echo::EchoReporter;
pub use export::{Document, EndOfRun, Exporter, RunRecord};
pub use gnn::GnnExporter;
pub use html::HtmlExporter;
pub use json::JsonReporter;
pub use log::{LogReporter, RunLogFile, DETAIL, LOG_ONLY};
pub use ndjson::{event_line, NdjsonReporter};
pub use progress::{print_above_bars, ProgressReporter};
pub use terminal::TerminalReporter;

use crate::error::ReportError;
use crate::events::{EventReceiver, RunEvent};
use crate::halt::Halt;
use crate::model::{Export, ExportFormat};

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
    while let Some(event) = rx.recv().await {
        for r in reporters.iter_mut() {
            // A reporter that panics must not take the others (and the results) down.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.handle(&event)));
            let failed = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e.flatten(),
                Err(panic) => vec![ReportError::panicked(panic)],
            };
            for error in failed {
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
    }
    errors
}

/// The end-of-run documents of a results folder: `report.html`,
/// `execution_report.md` and `junit.xml`, in that order.
pub fn documents(results_dir: &std::path::Path) -> Vec<Box<dyn Exporter>> {
    vec![
        Box::new(HtmlExporter::new(results_dir.to_path_buf())),
        Box::new(Document::new(
            results_dir.join("execution_report.md"),
            markdown::render_bytes,
        )),
        Box::new(Document::new(
            results_dir.join("junit.xml"),
            junit::render_bytes,
        )),
    ]
}

/// The `--export-*` documents: each a [`Document`] of its format, where the user named.
pub fn exports(exports: &[Export]) -> Vec<Box<dyn Exporter>> {
    let exporter = |e: &Export| -> Box<dyn Exporter> {
        let render = match e.format {
            ExportFormat::Json => json::render_bytes,
            ExportFormat::Markdown => markdown::render_bytes,
            ExportFormat::Junit => junit::render_bytes,
            ExportFormat::Csv => csv::render_bytes,
        };
        Box::new(Document::to(e.target.clone(), render))
    };
    exports.iter().map(exporter).collect()
}
