//! `junit.xml`: one testcase per script, so CI systems show runs natively, written
//! with the `quick-junit` crate (nextest's), which escapes and counts for us: the
//! header's `tests`/`failures`/`skipped` are computed from the elements themselves.
//!
//! The six final statuses map as nextest maps its outcomes:
//! - succeeded: a plain testcase;
//! - failed: `<failure>` typed by the failure class (`script_error`, `oom`, …), its
//!   message the reason ("exit code 3: …"), its text the output tail;
//! - timed out: `<failure type="timed_out">`, as nextest writes a timeout as a
//!   failure of its own type;
//! - interrupted: `<failure type="interrupted">`: nextest reports a test its
//!   cancellation killed as a failure (it did not pass, and the run's exit code says
//!   so too); here that includes scripts the stop came before;
//! - skipped (`--fail-fast`/`--max-fail` stopped the run first): `<skipped>`, the
//!   JUnit element for a test that was meant to run and did not;
//! - carried: `<skipped message="carried from run X: <earlier status>">`, with no
//!   output: this run did not run it, and the earlier run's logs are not this run's.
//!   A carried record that did not succeed is also a `<failure type="still_failing">`
//!   in a second suite, `jax-scripts (still failing from earlier runs)`: the tree is
//!   red there, and the count stays apart from this run's.
//!
//! The header's `failures`/`skipped` are computed by quick-junit from the elements;
//! the six exact counts ([`crate::model::Outcomes`]) are the suite's `<properties>`
//! (`succeeded`, `failed`, `timed_out`, `interrupted`, `skipped`, `carried`), so a
//! consumer reads the same numbers as every other report.
//!
//! Like nextest, `<system-out>`/`<system-err>` hold the last lines of output; earlier
//! failed attempts of a script that finally succeeded are `<flakyFailure>`, of one
//! that finally failed `<rerunFailure>`. Missing and refused render manifest entries
//! are failures with a message.
//!
//! quick-junit drops what XML 1.0 cannot hold (most C0 controls, ANSI sequences)
//! without a trace; every text from a script goes through [`escape`] first, so the
//! report shows `\x1b]0;…` where the script printed one, and DEL, C1 and
//! bidirectional controls are written visibly too.

use std::time::{Duration, SystemTime};

use quick_junit::{
    FlakyOrRerun, NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestRerun, TestSuite,
};

use super::escape;
use super::export::RunRecord;
use super::record::{AttemptRecord, ScriptRecord};
use crate::error::ReportError;
use crate::listing::{head, LISTED};
use crate::model::reason::{last_lines, STDOUT_TAIL_LINES};
use crate::model::{Outcomes, Status, STATUSES};

/// `junit.xml` of a finished run.
pub fn render_bytes(run: &RunRecord) -> Result<Vec<u8>, ReportError> {
    render(run, &run.ordered()).map(String::into_bytes)
}

/// Renders the JUnit XML document of `scripts`.
pub fn render(run: &RunRecord, scripts: &[&ScriptRecord]) -> Result<String, ReportError> {
    let m = run.metrics;
    let mut suite = TestSuite::new("jax-scripts");
    suite.set_time(secs(m.run.wall_time_s));
    if let Some(t) = run.started_at {
        suite.set_timestamp(timestamp(t));
    }
    let outcomes = run.outcomes();
    suite.add_properties(
        STATUSES
            .iter()
            .map(|s| Property::new(s.as_str(), outcomes.of(*s).to_string())),
    );
    suite.add_property(Property::new(
        "still_failing",
        m.totals.still_failing.to_string(),
    ));
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
    // The carried records still failing, in a suite of their own: listed as the
    // failures they are, counted apart from this run's.
    let standing: Vec<TestCase> = scripts
        .iter()
        .filter(|d| d.still_failing())
        .map(|d| still_failing_case(d))
        .collect();
    if !standing.is_empty() {
        let mut earlier = TestSuite::new("jax-scripts (still failing from earlier runs)");
        earlier.add_test_cases(standing);
        report.add_test_suite(earlier);
    }
    report.to_string().map_err(ReportError::Junit)
}

/// The testcase of one script.
fn script_case(d: &ScriptRecord) -> TestCase {
    let (earlier, _) = d.attempts.split_at(d.attempts.len().saturating_sub(1));
    let reruns = earlier.iter().filter(|a| a.status != Status::Succeeded);
    let line = d.reason_line().unwrap_or_else(|| d.status.as_str().into());
    let mut status = match (d.status, &d.carried) {
        (Status::Succeeded, _) => TestCaseStatus::success(),
        (Status::Carried, Some(c)) => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(escape::line(&c.line())).set_type("carried");
            s
        }
        (Status::Skipped | Status::Carried, _) => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(format!(
                "{}: {}",
                Outcomes::label(d.status),
                escape::line(&line)
            ))
            .set_type(d.status.as_str());
            s
        }
        (Status::Failed | Status::TimedOut | Status::Interrupted, _) => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            // Timeouts and stops are typed by their status (as the class says too);
            // failures by their class, which says what kind of failure.
            s.set_message(escape::line(&line))
                .set_type(d.class.as_str())
                .set_rerun_kind(FlakyOrRerun::Rerun);
            if let Some(r) = &d.reason {
                s.set_description(escape::excerpt(&r.tail.join("\n")));
            }
            s
        }
    };
    // For a success these are written as flakyFailure, for a failure as rerunFailure.
    status.add_reruns(reruns.map(rerun));
    let mut case = TestCase::new(escape::line(&d.id), status);
    let classname = d.relative_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    case.set_classname(escape::line(classname))
        .set_time(secs(d.execution_time_s));
    if let Some(t) = d.started_at {
        case.set_timestamp(timestamp(t));
    }
    if d.needs_attention() {
        let (out, err) = output_tails(d);
        if !out.is_empty() {
            case.set_system_out(escape::excerpt(&out.join("\n")));
        }
        if !err.is_empty() {
            case.set_system_err(escape::excerpt(&err.join("\n")));
        }
    }
    case
}

/// A carried record still failing: `<failure type="still_failing">`, its message the
/// run it comes from and its reason, its text that run's output tail.
fn still_failing_case(d: &ScriptRecord) -> TestCase {
    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
    let since = d.carried.as_ref().map(|c| c.line()).unwrap_or_default();
    let message = match d.reason_line() {
        Some(line) => format!("{since}: {line}"),
        None => since,
    };
    s.set_message(escape::line(&message))
        .set_type("still_failing");
    if let Some(r) = &d.reason {
        s.set_description(escape::excerpt(&r.tail.join("\n")));
    }
    let mut case = TestCase::new(escape::line(&d.id), s);
    let classname = d.relative_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    case.set_classname(escape::line(classname));
    case
}

/// An earlier attempt that failed.
fn rerun(a: &AttemptRecord) -> TestRerun {
    let mut r = TestRerun::new(NonSuccessKind::Failure);
    r.set_time(secs(a.duration_s))
        .set_type(a.class.as_str())
        .set_message(escape::line(
            a.words.as_deref().unwrap_or(a.status.as_str()),
        ))
        .set_description(format!("attempt {}", a.number));
    if let Some(t) = a.started_at {
        r.set_timestamp(timestamp(t));
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
        let mut case = TestCase::new(escape::line(name), status);
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

fn timestamp(t: SystemTime) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::<chrono::Utc>::from(t).fixed_offset()
}

#[cfg(test)]
mod tests;
