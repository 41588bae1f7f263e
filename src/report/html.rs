//! `report.html`: placeholder, replaced by the HTML report writer.

use std::path::PathBuf;

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;

/// Writes `report.html` when the run ends.
#[derive(Debug)]
pub struct HtmlReporter {
    #[allow(dead_code)]
    results_dir: PathBuf,
}

impl HtmlReporter {
    pub fn new(results_dir: PathBuf) -> Self {
        HtmlReporter { results_dir }
    }
}

impl Reporter for HtmlReporter {
    fn handle(&mut self, _event: &RunEvent) -> Result<(), ReportError> {
        Ok(())
    }
}
