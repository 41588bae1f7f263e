//! The end-of-run documents (HTML, Markdown, JUnit, GNN's summaries) as exporters of
//! one aggregate, as hyperfine's exporters each serialize the same results: the
//! [`EndOfRun`] reporter keeps the run's script records once and, when the run ends,
//! hands every exporter the same [`RunRecord`]. Adding a report is one exporter.

use std::path::PathBuf;
use std::time::SystemTime;

use super::record::{Records, ScriptRecord};
use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::{ExportTarget, Outcomes, PerformanceMetrics};

/// The finished run as every end-of-run document sees it.
#[derive(Debug, Clone, Copy)]
pub struct RunRecord<'a> {
    /// The final metrics, as written to `performance_metrics.json`.
    pub metrics: &'a PerformanceMetrics,
    /// When the run started (read once from the metrics' text).
    pub started_at: Option<SystemTime>,
    records: &'a Records,
}

impl<'a> RunRecord<'a> {
    pub fn new(metrics: &'a PerformanceMetrics, records: &'a Records) -> Self {
        RunRecord {
            metrics,
            started_at: Some(metrics.run.started_at.into()),
            records,
        }
    }

    /// The records in discovery order (see [`Records::ordered`]).
    pub fn ordered(&self) -> Vec<&'a ScriptRecord> {
        self.records.ordered(self.metrics)
    }

    /// The records as scripts finished (or were carried).
    pub fn finishing_order(&self) -> &'a [ScriptRecord] {
        self.records.finishing_order()
    }

    /// The counts of the run's final statuses, worded by [`Outcomes::words`].
    pub fn outcomes(&self) -> Outcomes {
        self.metrics.totals.outcomes()
    }
}

/// One end-of-run document.
pub trait Exporter: Send {
    /// Takes what the document needs from an event beyond the shared records (memory
    /// samples, a script's own files as it finishes); `record` is the script record
    /// the event just finished, if any. Most documents need nothing.
    fn observe(
        &mut self,
        _event: &RunEvent,
        _record: Option<&ScriptRecord>,
    ) -> Result<(), ReportError> {
        Ok(())
    }

    /// Writes the document of the finished run.
    fn export(&mut self, run: &RunRecord) -> Result<(), ReportError>;
}

/// A pure function from the run to a document's bytes.
pub type Render = fn(&RunRecord) -> Result<Vec<u8>, ReportError>;

/// A document that is one file (or standard output), rendered by a pure function of
/// the run.
pub struct Document {
    target: ExportTarget,
    render: Render,
}

impl Document {
    /// The document written atomically to `path`.
    pub fn new(path: PathBuf, render: Render) -> Self {
        Document::to(ExportTarget::File(path), render)
    }

    /// The document written to `target`: a file atomically, or standard output.
    pub fn to(target: ExportTarget, render: Render) -> Self {
        Document { target, render }
    }
}

impl Exporter for Document {
    fn export(&mut self, run: &RunRecord) -> Result<(), ReportError> {
        let bytes = (self.render)(run)?;
        match &self.target {
            ExportTarget::File(path) => write_atomic(&as_named(path)?, &bytes),
            ExportTarget::Stdout => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)
                    .and_then(|_| out.flush())
                    .map_err(|source| ReportError::Write {
                        path: "standard output".into(),
                        source,
                    })
            }
        }
    }
}

/// The reporter that owns the run's records and drives the exporters.
pub struct EndOfRun {
    records: Records,
    exporters: Vec<Box<dyn Exporter>>,
}

impl EndOfRun {
    pub fn new(exporters: Vec<Box<dyn Exporter>>) -> Self {
        EndOfRun {
            records: Records::new(),
            exporters,
        }
    }
}

impl Reporter for EndOfRun {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        let record = self.records.handle(event);
        let mut errors = Vec::new();
        for e in self.exporters.iter_mut() {
            errors.extend(guarded(|| e.observe(event, record)));
        }
        if let RunEvent::RunFinished { metrics } = event {
            let run = RunRecord::new(metrics, &self.records);
            for e in self.exporters.iter_mut() {
                errors.extend(guarded(|| e.export(&run)));
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ReportError::Several(errors)),
        }
    }
}

/// Runs one exporter's step so that its panic or error leaves the others writing.
fn guarded(f: impl FnOnce() -> Result<(), ReportError>) -> Option<ReportError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(panic) => Some(ReportError::panicked(panic)),
    }
}

/// A file the user named, resolved as named (links followed): [`write_atomic`]
/// follows none, as the results folders' own files need. Its folder was checked
/// before the run; one removed since is made again rather than losing the export.
fn as_named(path: &std::path::Path) -> Result<std::path::PathBuf, ReportError> {
    let fail = |source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    };
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).map_err(fail)?;
            Ok(dir.canonicalize().map_err(fail)?.join(name))
        }
        _ => Ok(path.to_path_buf()),
    }
}
