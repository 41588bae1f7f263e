//! Writes `<id>_results.json` as each script finishes and `performance_metrics.json`
//! when the run ends.

use std::path::PathBuf;

use super::export::RunRecord;
use super::{json_bytes, write_atomic, write_json_with, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::results_file_name;

pub const METRICS_FILE: &str = "performance_metrics.json";

/// The JSON contract writer.
#[derive(Debug)]
pub struct JsonReporter {
    results_dir: PathBuf,
}

impl JsonReporter {
    pub fn new(results_dir: PathBuf) -> Self {
        JsonReporter { results_dir }
    }
}

impl Reporter for JsonReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::ScriptFinished { result } => write_json_with(
                &self.results_dir.join(results_file_name(&result.id)),
                "script result",
                result,
                false,
            ),
            RunEvent::RunFinished { metrics } => write_atomic(
                &self.results_dir.join(METRICS_FILE),
                &metrics_bytes(metrics)?,
            ),
            _ => Ok(()),
        }
    }
}

/// `performance_metrics.json`'s bytes.
fn metrics_bytes(metrics: &crate::model::PerformanceMetrics) -> Result<Vec<u8>, ReportError> {
    json_bytes("run metrics", metrics)
}

/// `--export-json`: the same bytes as `performance_metrics.json`.
pub fn render_bytes(run: &RunRecord) -> Result<Vec<u8>, ReportError> {
    metrics_bytes(run.metrics)
}
