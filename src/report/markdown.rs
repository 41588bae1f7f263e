//! `execution_report.md`: the run's summary for people reading a repository.

use std::fmt::Write;
use std::path::PathBuf;

use super::record::{Records, ScriptRecord};
use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::listing::{head, LISTED};
use crate::model::PerformanceMetrics;

/// Renders the Markdown report.
pub fn render(m: &PerformanceMetrics, scripts: &[&ScriptRecord]) -> String {
    let t = &m.totals;
    let mut s = String::new();
    let _ = writeln!(s, "# JAX execution report\n");
    let _ = writeln!(
        s,
        "{} of {} scripts succeeded, {} failed ({} timed out, {} interrupted) in {:.2} s on {} with {} job(s).\n",
        t.succeeded, t.total_scripts, t.failed, t.timed_out, t.interrupted, m.run.wall_time_s,
        m.run.device.as_str(), m.run.jobs
    );
    let _ = writeln!(s, "| | |\n| --- | --- |");
    let _ = writeln!(s, "| run id | `{}` |", cell(&m.run.run_id));
    let _ = writeln!(s, "| jax-runner | {} |", cell(&m.run.runner_version));
    let _ = writeln!(s, "| started | {} |", m.run.started_at);
    let _ = writeln!(
        s,
        "| device | {} requested, {} used ({}) |",
        m.run.device_requested.as_str(),
        m.run.device.as_str(),
        m.run.device_choice
    );
    let _ = writeln!(
        s,
        "| python | {} |",
        m.run.python_version.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        s,
        "| jax | {} |",
        m.run.jax_version.as_deref().unwrap_or("-")
    );
    let _ = writeln!(s, "| fallbacks | {} |", t.fallbacks);
    let _ = writeln!(s, "| device mismatches | {} |", t.device_mismatches);
    let _ = writeln!(s, "| leaked processes | {} |\n", t.leaks);
    let _ = writeln!(s, "## Scripts\n");
    let _ = writeln!(
        s,
        "| script | status | class | device | attempts | wall (s) | peak RSS (MiB) |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for d in scripts {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {:.2} | {:.0} |",
            cell(&d.relative_path),
            d.status.as_str(),
            d.class.as_str(),
            d.device_used.map_or("-", |p| p.as_str()),
            d.attempts.len(),
            d.execution_time_s,
            d.peak_memory_mb
        );
    }
    for (status, entries) in [
        ("missing", &m.missing_scripts),
        ("refused", &m.refused_scripts),
    ] {
        let (shown, rest) = head(entries, LISTED);
        for entry in shown {
            let _ = writeln!(s, "| `{}` | {status} | - | - | 0 | - | - |", cell(entry));
        }
        if rest > 0 {
            let _ = writeln!(
                s,
                "| and {rest} more (in performance_metrics.json) | {status} | - | - | 0 | - | - |"
            );
        }
    }
    let failures: Vec<&ScriptRecord> = scripts.iter().copied().filter(|d| !d.succeeded()).collect();
    if !failures.is_empty() {
        let _ = writeln!(s, "\n## Failures");
        for d in failures {
            let _ = writeln!(s, "\n### `{}`: {}\n", cell(&d.id), d.class.as_str());
            if let Some(reason) = &d.reason {
                let _ = writeln!(s, "{}\n", reason.words);
                if !reason.tail.is_empty() {
                    let _ = writeln!(s, "Last lines of {}:\n", reason.stream);
                    let _ = writeln!(
                        s,
                        "```\n{}\n```",
                        reason.tail.join("\n").replace("```", "'''")
                    );
                }
            }
        }
    }
    s
}

/// Table cells cannot hold pipes or newlines.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Writes `execution_report.md` into the results folder when the run ends.
#[derive(Debug)]
pub struct MarkdownReporter {
    results_dir: PathBuf,
    records: Records,
}

impl MarkdownReporter {
    pub fn new(results_dir: PathBuf) -> Self {
        MarkdownReporter {
            results_dir,
            records: Records::new(),
        }
    }
}

impl Reporter for MarkdownReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        self.records.handle(event);
        if let RunEvent::RunFinished { metrics } = event {
            let text = render(metrics, &self.records.ordered(metrics));
            write_atomic(
                &self.results_dir.join("execution_report.md"),
                text.as_bytes(),
            )?;
        }
        Ok(())
    }
}
