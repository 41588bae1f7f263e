//! Every reporter of a run, built in one place: the results files, the HTML,
//! Markdown and JUnit reports, GNN's step-12 layout when asked for, and the edge's
//! own (terminal, progress, NDJSON), in the order they see each event.

use tokio::task::JoinHandle;

use super::Prepared;
use crate::config::RunConfig;
use crate::error::ReportError;
use crate::events::EventSender;
use crate::halt::Halt;
use crate::report::{self, Reporter};

/// Starts the dispatcher: the returned sender feeds every reporter; the handle ends
/// with the errors they met once the sender is dropped.
pub fn start(
    config: &RunConfig,
    prepared: &Prepared,
    edge: Vec<Box<dyn Reporter>>,
    halt: Halt,
) -> (EventSender, JoinHandle<Vec<ReportError>>) {
    let results = config.results_dir.clone();
    // The results files first: everything after them may read what they wrote.
    let mut all: Vec<Box<dyn Reporter>> =
        vec![Box::new(report::JsonReporter::new(results.clone()))];
    all.extend(edge);
    // The end-of-run documents: one aggregate of the run's records, many exporters.
    let mut documents = report::documents(&results);
    documents.extend(report::exports(&config.exports));
    if let Some(entries) = &prepared.gnn {
        let discovery = &prepared.discovery;
        documents.push(Box::new(report::GnnExporter::new(
            config.step12_dir.clone(),
            results,
            entries.clone(),
            report::gnn::RunFacts {
                target_directory: config.output_dir.clone(),
                render_failures: discovery.render_failures.clone(),
                missing_render_scripts: discovery.missing_paths.clone(),
                distributed: config.ray.is_some(),
            },
        )));
    }
    all.push(Box::new(report::EndOfRun::new(documents)));
    let (events, rx) = EventSender::channel();
    (events, tokio::spawn(report::dispatch(rx, all, halt)))
}
