//! `junit.xml`: one testcase per script, so CI systems show runs natively. Failures
//! carry their class, the deciding line and the stderr tail.

use std::fmt::Write;
use std::path::PathBuf;

use super::record::{Records, ScriptRecord};
use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::listing::{head, LISTED};
use crate::model::{PerformanceMetrics, Status};

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters, even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Testcases of render manifest entries that did not run: at most [`LISTED`] named,
/// then one that counts the rest, so 200,000 missing entries stay a small file.
fn manifest_cases(entries: &[String], kind: &str, message: &str) -> Vec<String> {
    let case = |name: &str, message: &str| {
        format!(
            "    <testcase classname=\"manifest\" name=\"{}\" time=\"0\">\n      <failure type=\"{kind}\" message=\"{}\"/>\n    </testcase>",
            esc(name),
            esc(message)
        )
    };
    let (shown, rest) = head(entries, LISTED);
    let mut cases: Vec<String> = shown.iter().map(|e| case(e, message)).collect();
    if rest > 0 {
        let name = format!("and {rest} more (every one is in performance_metrics.json)");
        cases.push(case(&name, message));
    }
    cases
}

/// Renders the JUnit XML document.
pub fn render(m: &PerformanceMetrics, scripts: &[&ScriptRecord]) -> String {
    let missing = manifest_cases(
        &m.missing_scripts,
        "missing",
        "listed in the render manifest but missing",
    );
    let refused = manifest_cases(
        &m.refused_scripts,
        "refused",
        "listed in the render manifest, outside --output-dir: refused, not run",
    );
    let failures = scripts
        .iter()
        .filter(|d| matches!(d.status, Status::Failed | Status::TimedOut))
        .count()
        + refused.len();
    let skipped = scripts
        .iter()
        .filter(|d| d.status == Status::Interrupted)
        .count()
        + missing.len();
    let tests = scripts.len() + missing.len() + refused.len();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"jax-runner\" tests=\"{tests}\" failures=\"{failures}\" time=\"{:.3}\">",
        m.run.wall_time_s
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"jax-scripts\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{:.3}\" timestamp=\"{}\">",
        m.run.wall_time_s,
        esc(&m.run.started_at)
    );
    for d in scripts {
        let _ = write!(
            s,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
            esc(d.relative_path.rsplit_once('/').map_or("", |(dir, _)| dir)),
            esc(&d.id),
            d.execution_time_s
        );
        match d.status {
            Status::Succeeded => s.push_str("/>\n"),
            Status::Interrupted => {
                s.push_str(">\n      <skipped message=\"interrupted\"/>\n    </testcase>\n");
            }
            Status::Failed | Status::TimedOut => {
                let message = d
                    .reason_line()
                    .unwrap_or_else(|| d.status.as_str().to_string());
                let _ = writeln!(
                    s,
                    ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    esc(d.class.as_str()),
                    esc(&message),
                    esc(&d.stderr_tail.join("\n"))
                );
                let _ = writeln!(
                    s,
                    "      <system-out>{}</system-out>\n    </testcase>",
                    esc(&d.stdout_log)
                );
            }
        }
    }
    for case in missing.iter().chain(&refused) {
        let _ = writeln!(s, "{case}");
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

/// Writes `junit.xml` into the results folder when the run ends.
#[derive(Debug)]
pub struct JunitReporter {
    results_dir: PathBuf,
    records: Records,
}

impl JunitReporter {
    pub fn new(results_dir: PathBuf) -> Self {
        JunitReporter {
            results_dir,
            records: Records::new(),
        }
    }
}

impl Reporter for JunitReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        self.records.handle(event);
        if let RunEvent::RunFinished { metrics } = event {
            let xml = render(metrics, &self.records.ordered(metrics));
            write_atomic(&self.results_dir.join("junit.xml"), xml.as_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{esc, manifest_cases, LISTED};

    #[test]
    fn many_missing_entries_make_a_bounded_document() {
        let missing: Vec<String> = (0..200_000).map(|i| format!("gone/{i}.py")).collect();
        let cases = manifest_cases(&missing, "missing", "gone");
        assert_eq!(cases.len(), LISTED + 1);
        assert!(
            cases[LISTED].contains("and 199950 more"),
            "{}",
            cases[LISTED]
        );
    }

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            esc("<a & 'b'>\u{1b}[31m"),
            "&lt;a &amp; &apos;b&apos;&gt;?[31m"
        );
    }
}
