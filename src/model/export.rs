//! `--export-*`: the end-of-run documents a run also writes where the user names, as
//! hyperfine's `--export-json FILE`. The configuration speaks of them and the reports
//! write them, so the vocabulary lives here, below both.

use std::path::PathBuf;

/// The document an `--export-*` option asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The run's metrics: the bytes of `performance_metrics.json`.
    Json,
    /// The Markdown report (`execution_report.md`).
    Markdown,
    /// The JUnit XML document (`junit.xml`).
    Junit,
    /// One CSV row per script.
    Csv,
}

impl ExportFormat {
    /// Every format, in the order the options are listed.
    pub const ALL: [ExportFormat; 4] = [
        ExportFormat::Json,
        ExportFormat::Markdown,
        ExportFormat::Junit,
        ExportFormat::Csv,
    ];

    /// The option as the command line spells it: `--export-json`.
    pub fn option(self) -> &'static str {
        match self {
            ExportFormat::Json => "--export-json",
            ExportFormat::Markdown => "--export-markdown",
            ExportFormat::Junit => "--export-junit",
            ExportFormat::Csv => "--export-csv",
        }
    }
}

/// Where an export goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTarget {
    /// A file, written atomically (absolute once validated).
    File(PathBuf),
    /// Standard output (`-`), which is then the export's alone.
    Stdout,
}

/// One `--export-*` option as the run carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub format: ExportFormat,
    pub target: ExportTarget,
}
