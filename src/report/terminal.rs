//! The terminal as nextest draws it: one line per finished script (`PASS`, `FAIL`,
//! `TIMEOUT`, `INTR`, `SKIP`, `CARRIED`) with its time and id, a `SLOW` line for a
//! script still running past `--slow-timeout`, and at the end the failures alone and
//! one summary line. `jax-runner show` renders a finished run with the same
//! functions ([`end_of_run`]), so the two cannot disagree.
//!
//! What a script controls (its id and path, its reason, the paths of its logs) is
//! shown through [`escape::line`]: no escape sequence it printed reaches the terminal.

use std::collections::HashMap;
use std::time::Duration;

use console::Style;

use super::escape;
use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::{PerformanceMetrics, ScriptResult, Status};

/// How much the terminal says: `-q` the summary line, the default adds a line per
/// script and the failures, `-v` adds start lines (the log's) and the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Detail {
    /// `-qq`: nothing.
    Silent,
    /// `-q`: the summary line only.
    Quiet,
    Normal,
    Verbose,
}

impl Detail {
    /// The detail of a tracing level (`-q` is WARN, the default INFO, `-v` DEBUG).
    pub fn of(level: tracing::Level) -> Detail {
        match level {
            l if l >= tracing::Level::DEBUG => Detail::Verbose,
            tracing::Level::INFO => Detail::Normal,
            tracing::Level::WARN => Detail::Quiet,
            _ => Detail::Silent,
        }
    }
}

/// A script that did not succeed, as the failures section shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub status: Status,
    pub id: String,
    pub execution_time_s: f64,
    /// The result's `reason`.
    pub reason: Option<String>,
    /// Where its standard error is, when it ran.
    pub stderr_log: Option<String>,
    /// For a carried record still failing: the run that wrote it.
    pub since: Option<String>,
}

impl Failure {
    /// Whether a script of this status belongs in the failures section: it ran, or
    /// began to, and did not succeed (skipped and carried scripts are only counted).
    pub fn listed(status: Status) -> bool {
        matches!(
            status,
            Status::Failed | Status::TimedOut | Status::Interrupted
        )
    }

    pub fn of(result: &ScriptResult) -> Failure {
        Failure {
            status: result.status,
            id: result.id.clone(),
            execution_time_s: result.execution_time_s,
            reason: result.reason.clone(),
            stderr_log: (!result.stderr_log.is_empty()).then(|| result.stderr_log.clone()),
            since: None,
        }
    }
}

/// The failures of a finished run in its scripts' order, this run's and then the
/// carried records still failing (marked with the run that wrote them): each from
/// `known` (the results as the run emitted them, or as `show` reads them back) when
/// there, else from the run's summary row, without a log.
pub fn failures(m: &PerformanceMetrics, known: &HashMap<String, Failure>) -> Vec<Failure> {
    let row = |s: &crate::model::ScriptSummary| {
        let mut f = known.get(&s.id).cloned().unwrap_or_else(|| Failure {
            status: s.status,
            id: s.id.clone(),
            execution_time_s: s.execution_time_s,
            reason: s.reason.clone(),
            stderr_log: None,
            since: None,
        });
        if s.still_failing() {
            f.status = s.carried_status.unwrap_or(Status::Failed);
            f.since = s.carried_from.clone();
        }
        f
    };
    // A script the run never started is counted on one line of its kind, not listed.
    let this_run = (m.scripts.iter())
        .filter(|s| Failure::listed(s.status) && !never_started(s.attempts, s.status));
    let standing = m.scripts.iter().filter(|s| s.still_failing());
    this_run.chain(standing).map(row).collect()
}

/// A script the run never started: skipped by `--fail-fast`, or not started before a
/// stop. Counted on one line of its kind, never listed one by one; any other script
/// without an attempt (refused before it could start) is a failure like any other.
fn never_started(attempts: usize, status: Status) -> bool {
    attempts == 0 && matches!(status, Status::Skipped | Status::Interrupted)
}

/// A status as the terminal tags it.
pub fn tag(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "PASS",
        Status::Failed => "FAIL",
        Status::TimedOut => "TIMEOUT",
        Status::Interrupted => "INTR",
        Status::Skipped => "SKIP",
        Status::Carried => "CARRIED",
    }
}

fn style_of(status: Status) -> Style {
    match status {
        Status::Succeeded => Style::new().green().bold(),
        Status::Failed | Status::TimedOut | Status::Interrupted => Style::new().red().bold(),
        Status::Skipped | Status::Carried => Style::new().yellow().bold(),
    }
}

/// `text` right-aligned in the tag column, in `style` when colours are on.
fn painted(text: &str, style: Style, color: bool) -> String {
    style
        .force_styling(color)
        .apply_to(format!("{text:>7}"))
        .to_string()
}

/// `[   1.23s]`, or blanks for a script that took no time of this run.
fn time(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) => format!("[{s:>8.2}s]"),
        None => format!("[{:>9}]", ""),
    }
}

/// `   PASS [    1.23s] id`.
pub fn script_line(status: Status, seconds: Option<f64>, id: &str, color: bool) -> String {
    format!(
        "{} {} {}",
        painted(tag(status), style_of(status), color),
        time(seconds),
        escape::line(id)
    )
}

/// `   SLOW [   60.00s] id`: still running.
pub fn slow_line(seconds: f64, id: &str, color: bool) -> String {
    format!(
        "{} {} {}",
        painted("SLOW", Style::new().yellow().bold(), color),
        time(Some(seconds)),
        escape::line(id)
    )
}

/// How many names a carried line lists before "and N more".
const CARRIED_NAMED: usize = 3;

/// One line for every script carried for the same reason:
/// `CARRIED 499 from earlier runs (not selected by -k), 3 of them failing: a, b, c`.
fn carried_line(why: &str, ids: &[(String, Status)], color: bool) -> String {
    let failing: Vec<&str> = ids
        .iter()
        .filter(|(_, s)| Failure::listed(*s))
        .map(|(id, _)| id.as_str())
        .collect();
    let mut text = format!(
        "{} {} from earlier runs ({})",
        painted(tag(Status::Carried), style_of(Status::Carried), color),
        ids.len(),
        escape::line(why)
    );
    if !failing.is_empty() {
        let named: Vec<String> = failing
            .iter()
            .take(CARRIED_NAMED)
            .map(|id| escape::line(id).into_owned())
            .collect();
        let more = failing.len().saturating_sub(CARRIED_NAMED);
        text.push_str(&format!(
            ", {} of them failing: {}{}",
            failing.len(),
            named.join(", "),
            match more {
                0 => String::new(),
                n => format!(" and {n} more"),
            }
        ));
    }
    text
}

/// The terminal's subscriber: a line per finished script (on stderr, above the
/// progress bars), `SLOW` lines from the running scripts' samples, and the end of
/// the run on stdout (unless stdout carries the event stream).
pub struct TerminalReporter {
    detail: Detail,
    color: bool,
    slow: Duration,
    /// Whether the end of the run is printed (stdout is not the event stream's).
    end: bool,
    /// The failures so far, by id.
    failures: HashMap<String, Failure>,
    /// How many `SLOW` lines each running script has had.
    slow_marks: HashMap<String, u64>,
    /// The scripts carried from earlier runs, by why, in the order they came: said
    /// as one line each kind at the end, never one per script.
    carried: Vec<(String, Vec<(String, Status)>)>,
    /// The scripts this run did not start (skipped, not started before a stop), by
    /// status and reason: one line each kind at the end, after the culprit's.
    unstarted: Vec<((Status, String), usize)>,
}

impl TerminalReporter {
    pub fn new(detail: Detail, color: bool, slow: Duration, end: bool) -> Self {
        TerminalReporter {
            detail,
            color,
            slow,
            end,
            failures: HashMap::new(),
            slow_marks: HashMap::new(),
            carried: Vec::new(),
            unstarted: Vec::new(),
        }
    }

    fn line(&self, text: &str) {
        if self.detail >= Detail::Normal && !super::print_above_bars(text) {
            eprintln!("{text}");
        }
    }

    /// A `SLOW` line each time the script passes another multiple of the threshold.
    fn sample(&mut self, id: &str, elapsed_s: f64) {
        let every = self.slow.as_secs_f64();
        if every <= 0.0 {
            return;
        }
        let passed = (elapsed_s / every).floor() as u64;
        let marks = self.slow_marks.entry(id.to_string()).or_default();
        if passed > *marks {
            *marks = passed;
            let text = slow_line(passed as f64 * every, id, self.color);
            self.line(&text);
        }
    }
}

impl Reporter for TerminalReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::ScriptStarted { id, .. } => {
                self.slow_marks.remove(id);
            }
            RunEvent::Sample { id, elapsed_s, .. } => self.sample(id, *elapsed_s),
            // A success `--resume` kept did not run: no `PASS`; the end counts them.
            RunEvent::ScriptFinished { result } if result.resumed_from.is_some() => {}
            RunEvent::ScriptFinished { result }
                if never_started(result.attempts.len(), result.status) =>
            {
                // Never started: counted by kind, said once at the end.
                let kind = (result.status, result.reason.clone().unwrap_or_default());
                match self.unstarted.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, n)) => *n += 1,
                    None => self.unstarted.push((kind, 1)),
                }
            }
            RunEvent::ScriptFinished { result } => {
                self.slow_marks.remove(&result.id);
                let seconds = (result.status != Status::Skipped).then_some(result.execution_time_s);
                self.line(&script_line(result.status, seconds, &result.id, self.color));
                if Failure::listed(result.status) {
                    self.failures.insert(result.id.clone(), Failure::of(result));
                }
            }
            RunEvent::ScriptCarried { result, why } => {
                let entry = (result.id.clone(), result.status);
                match self.carried.iter_mut().find(|(w, _)| w == why) {
                    Some((_, ids)) => ids.push(entry),
                    None => self.carried.push((why.clone(), vec![entry])),
                }
            }
            RunEvent::RunFinished { metrics } if self.end && metrics.totals.total_scripts > 0 => {
                if metrics.totals.resumed > 0 {
                    let tag = painted("KEPT", style_of(Status::Succeeded), self.color);
                    let line = format!(
                        "{tag} {} earlier success(es), unchanged: not run again (--resume)",
                        metrics.totals.resumed
                    );
                    self.line(&line);
                }
                for ((status, reason), n) in &self.unstarted {
                    let tag = painted(tag(*status), style_of(*status), self.color);
                    self.line(&format!("{tag} {n} {}", escape::line(reason)));
                }
                for (why, ids) in &self.carried {
                    self.line(&carried_line(why, ids, self.color));
                }
                let mut failures = failures(metrics, &self.failures);
                // Carried failures are an earlier run's news: a few are named here.
                let mut standing = 0;
                failures.retain(|f| {
                    standing += usize::from(f.since.is_some());
                    f.since.is_none() || standing <= CARRIED_NAMED
                });
                print!(
                    "{}",
                    end_of_run(metrics, &failures, self.detail, self.color)
                );
            }
            _ => {}
        }
        Ok(())
    }
}

mod end;

pub use end::{end_of_run, summary_line};

#[cfg(test)]
mod tests;
