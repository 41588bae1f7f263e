//! `junit.xml`: one testcase per script, so CI systems show runs natively. Failures
//! carry their class, the deciding line and the stderr tail.

use std::fmt::Write;
use std::path::PathBuf;

use super::record::{Records, ScriptRecord};
use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
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

/// Renders the JUnit XML document.
pub fn render(m: &PerformanceMetrics, scripts: &[&ScriptRecord]) -> String {
    let failures = scripts
        .iter()
        .filter(|d| matches!(d.status, Status::Failed | Status::TimedOut))
        .count();
    let skipped = scripts
        .iter()
        .filter(|d| d.status == Status::Interrupted)
        .count()
        + m.missing_scripts.len();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"jax-runner\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
        scripts.len() + m.missing_scripts.len(),
        m.run.wall_time_s
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"jax-scripts\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{:.3}\" timestamp=\"{}\">",
        scripts.len() + m.missing_scripts.len(),
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
                    .matched_line
                    .clone()
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
    for missing in &m.missing_scripts {
        let _ = writeln!(
            s,
            "    <testcase classname=\"manifest\" name=\"{}\" time=\"0\">\n      <failure type=\"missing\" message=\"listed in the render manifest but missing\"/>\n    </testcase>",
            esc(missing)
        );
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
    use super::esc;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            esc("<a & 'b'>\u{1b}[31m"),
            "&lt;a &amp; &apos;b&apos;&gt;?[31m"
        );
    }
}
