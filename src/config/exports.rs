//! `--export-json`, `--export-markdown`, `--export-junit` and `--export-csv`: a run's
//! end-of-run documents, also written where the user names (`-` for standard
//! output), as hyperfine's `--export-* FILE`.

use std::path::{Path, PathBuf};

use clap::Args;

use super::tree::absolute;
use crate::error::ConfigError;
use crate::model::{Export, ExportFormat, ExportTarget};

/// The `--export-*` options, as clap parses them.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Output")]
pub struct ExportOptions {
    /// Also write the run's metrics to FILE (`-`: standard output).
    ///
    /// The bytes of performance_metrics.json.
    #[arg(long, value_name = "FILE|-")]
    pub export_json: Option<PathBuf>,
    /// Also write the Markdown report to FILE (`-`: standard output).
    #[arg(long, value_name = "FILE|-")]
    pub export_markdown: Option<PathBuf>,
    /// Also write the JUnit XML report to FILE (`-`: standard output).
    #[arg(long, value_name = "FILE|-")]
    pub export_junit: Option<PathBuf>,
    /// Write one CSV row per script to FILE (`-`: standard output).
    ///
    /// Columns: id, status, exit code, seconds, peak MiB, device, attempts, reason.
    #[arg(long, value_name = "FILE|-")]
    pub export_csv: Option<PathBuf>,
}

impl ExportOptions {
    /// Each option given, with its format.
    fn given(&self) -> impl Iterator<Item = (ExportFormat, &Path)> {
        let paths = [
            &self.export_json,
            &self.export_markdown,
            &self.export_junit,
            &self.export_csv,
        ];
        ExportFormat::ALL
            .into_iter()
            .zip(paths)
            .filter_map(|(f, p)| Some((f, p.as_deref()?)))
    }

    /// The exports of a run, their files absolute. Standard output can carry one
    /// stream: at most one of them, or `--events`, may be `-`.
    pub fn validate(&self, events: Option<&Path>) -> Result<Vec<Export>, ConfigError> {
        let is_stdout = |p: &Path| p.as_os_str() == "-";
        let mut exports = Vec::new();
        let mut stdout = events.filter(|p| is_stdout(p)).map(|_| "--events");
        for (format, path) in self.given() {
            if path.as_os_str().is_empty() {
                return Err(invalid(
                    format,
                    path,
                    "give a file name, or - for standard output",
                ));
            }
            let target = match is_stdout(path) {
                true => ExportTarget::Stdout,
                false => ExportTarget::File(absolute(path)),
            };
            // A folder is not made for a file the user names: a typo in it would
            // otherwise leave the export where nobody looks.
            if let ExportTarget::File(file) = &target {
                let folder = file.parent().unwrap_or(Path::new("/"));
                if !folder.is_dir() {
                    let why = format!(
                        "its folder {} does not exist: make it first, or name a file in a folder that does",
                        folder.display()
                    );
                    return Err(invalid(format, path, &why));
                }
            }
            if target == ExportTarget::Stdout {
                if let Some(other) = stdout {
                    let why = format!(
                        "{other} already writes to standard output: give one of them a file"
                    );
                    return Err(invalid(format, path, &why));
                }
                stdout = Some(format.option());
            }
            exports.push(Export { format, target });
        }
        Ok(exports)
    }
}

fn invalid(format: ExportFormat, path: &Path, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        option: format.option(),
        value: path.display().to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunOptions;

    fn exports(args: &[&str]) -> Result<Vec<Export>, ConfigError> {
        let o = RunOptions::from_args(args.iter().copied()).unwrap();
        o.exports.validate(o.events.as_deref())
    }

    #[test]
    fn files_become_absolute_and_dash_is_stdout() {
        let e = exports(&["--export-csv", "-", "--export-json", "m.json"]).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].format, ExportFormat::Json);
        assert!(matches!(&e[0].target, ExportTarget::File(p) if p.is_absolute()));
        assert_eq!(e[1].target, ExportTarget::Stdout);
    }

    #[test]
    fn a_file_in_a_missing_folder_is_refused() {
        let err = exports(&["--export-json", "/no/such/dir/m.json"]).unwrap_err();
        let said = err.to_string();
        assert!(
            said.contains("--export-json") && said.contains("/no/such/dir does not exist"),
            "{said}"
        );
        assert!(!Path::new("/no/such/dir").exists());
    }

    #[test]
    fn only_one_stream_on_stdout() {
        let err = exports(&["--export-csv", "-", "--export-markdown", "-"]).unwrap_err();
        assert!(
            err.to_string().contains("--export-markdown already"),
            "{err}"
        );
        let err = exports(&["--events", "-", "--export-junit", "-"]).unwrap_err();
        assert!(err.to_string().contains("--events already"), "{err}");
        assert!(exports(&[]).unwrap().is_empty());
    }
}
