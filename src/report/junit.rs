//! `junit.xml`: one testcase per script, so CI systems show runs natively, written
//! with the `quick-junit` crate (nextest's), which escapes and counts for us: the
//! header's `tests`/`failures`/`skipped` are computed from the elements themselves.
//!
//! Like nextest: a failure's message is its reason ("exit code 3: …"), its text the
//! output tail; `<system-out>`/`<system-err>` hold the last lines of output; earlier
//! failed attempts of a script that finally succeeded are `<flakyFailure>`, of one
//! that finally failed `<rerunFailure>`. Interrupted scripts are skipped; missing and
//! refused render manifest entries are failures with a message.

use std::path::PathBuf;
use std::time::Duration;

use quick_junit::{
    FlakyOrRerun, NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite,
};

use super::record::{AttemptRecord, Records, ScriptRecord};
use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::listing::{head, LISTED};
use crate::model::reason::{last_lines, STDOUT_TAIL_LINES};
use crate::model::{PerformanceMetrics, Status};

/// Renders the JUnit XML document.
pub fn render(m: &PerformanceMetrics, scripts: &[&ScriptRecord]) -> Result<String, ReportError> {
    let mut suite = TestSuite::new("jax-scripts");
    suite.set_time(secs(m.run.wall_time_s));
    if let Some(t) = timestamp(&m.run.started_at) {
        suite.set_timestamp(t);
    }
    suite.add_test_cases(scripts.iter().map(|d| script_case(d)));
    suite.add_test_cases(manifest_cases(
        &m.missing_scripts,
        "missing",
        "listed in the render manifest but missing",
    ));
    suite.add_test_cases(manifest_cases(
        &m.refused_scripts,
        "refused",
        "listed in the render manifest, outside --output-dir: refused, not run",
    ));
    let mut report = Report::new("jax-runner");
    report.set_time(secs(m.run.wall_time_s));
    report.add_test_suite(suite);
    report.to_string().map_err(ReportError::Junit)
}

/// The testcase of one script.
fn script_case(d: &ScriptRecord) -> TestCase {
    let (earlier, _) = d.attempts.split_at(d.attempts.len().saturating_sub(1));
    let reruns = earlier.iter().filter(|a| a.status != Status::Succeeded);
    let line = d.reason_line().unwrap_or_else(|| d.status.as_str().into());
    let mut status = match d.status {
        Status::Succeeded => TestCaseStatus::success(),
        Status::Interrupted | Status::Skipped | Status::Carried => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(line).set_type(d.class.as_str());
            s
        }
        Status::Failed | Status::TimedOut => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(line)
                .set_type(d.class.as_str())
                .set_rerun_kind(FlakyOrRerun::Rerun);
            if let Some(r) = &d.reason {
                s.set_description(r.tail.join("\n"));
            }
            s
        }
    };
    // For a success these are written as flakyFailure, for a failure as rerunFailure.
    status.add_reruns(reruns.map(rerun));
    let mut case = TestCase::new(d.id.as_str(), status);
    let classname = d.relative_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    case.set_classname(classname)
        .set_time(secs(d.execution_time_s));
    if let Some(t) = d.started_at.as_deref().and_then(timestamp) {
        case.set_timestamp(t);
    }
    // A carried script's logs are an earlier run's: none of this run's output.
    if !d.succeeded() && d.status != Status::Carried {
        let (out, err) = output_tails(d);
        if !out.is_empty() {
            case.set_system_out(out.join("\n"));
        }
        if !err.is_empty() {
            case.set_system_err(err.join("\n"));
        }
    }
    case
}

/// An earlier attempt that failed.
fn rerun(a: &AttemptRecord) -> TestRerun {
    let mut r = TestRerun::new(NonSuccessKind::Failure);
    r.set_time(secs(a.duration_s))
        .set_type(a.class.as_str())
        .set_message(
            a.words
                .clone()
                .unwrap_or_else(|| a.status.as_str().to_string()),
        )
        .set_description(format!("attempt {}", a.number));
    if let Some(t) = timestamp(&a.started_at) {
        r.set_timestamp(t);
    }
    r
}

/// The last lines of a failed script's stdout and stderr.
fn output_tails(d: &ScriptRecord) -> (Vec<String>, Vec<String>) {
    let out = match &d.reason {
        Some(r) if r.stream == "stdout" => r.tail.clone(),
        _ => last_lines(&d.stdout_log, STDOUT_TAIL_LINES),
    };
    (out, d.stderr_tail.clone())
}

/// Testcases of render manifest entries that did not run: at most [`LISTED`] named,
/// then one that counts the rest, so 200,000 missing entries stay a small file.
fn manifest_cases(entries: &[String], kind: &str, message: &str) -> Vec<TestCase> {
    let case = |name: &str| {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        status.set_message(message).set_type(kind);
        let mut case = TestCase::new(name, status);
        case.set_classname("manifest");
        case
    };
    let (shown, rest) = head(entries, LISTED);
    let mut cases: Vec<TestCase> = shown.iter().map(|e| case(e)).collect();
    if rest > 0 {
        cases.push(case(&format!(
            "and {rest} more (every one is in performance_metrics.json)"
        )));
    }
    cases
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() { s.max(0.0) } else { 0.0 })
}

fn timestamp(rfc3339: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(rfc3339).ok()
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
            let xml = render(metrics, &self.records.ordered(metrics))?;
            write_atomic(&self.results_dir.join("junit.xml"), xml.as_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
