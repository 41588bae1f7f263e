//! The end of a run as the terminal shows it, and as `jax-runner show` shows it again:
//! the manifest's problems first, this run's failures, the carried records still
//! failing (counted apart), then one summary line.

use std::path::Path;

use console::Style;

use super::{painted, script_line, time, Detail, Failure};
use crate::listing::{head, LISTED};
use crate::model::PerformanceMetrics;
use crate::report::escape;

/// The last line: the counts in the one vocabulary, the wall time and where the
/// report is: `Summary [    3.10s] 1 of 2 succeeded, 1 failed; sandboxed (landlock-v7,
/// seccomp), 2 of 2 started warm; report: DIR/report.html`.
pub fn summary_line(m: &PerformanceMetrics, color: bool) -> String {
    // Green only when the whole tree stands succeeded: a carried failure is red.
    let style = match m.tree_succeeded() {
        true => Style::new().green().bold(),
        false => Style::new().red().bold(),
    };
    // How the scripts were confined is part of the one line: a run that was not
    // sandboxed must say so where everyone reads.
    let isolation = crate::report::summary::isolation(m)
        .map(|how| format!("; {how}"))
        .unwrap_or_default();
    // What the manifest says went wrong before any script: counted in the line too.
    let mut words = m.totals.outcomes().words();
    for (n, what) in [
        (m.totals.render_failures, "failed to render"),
        (m.totals.missing, "missing"),
        (m.totals.refused, "refused"),
    ] {
        if n > 0 {
            words.push_str(&format!(", {n} {what}"));
        }
    }
    format!(
        "{} {} {words}{isolation}; report: {}",
        painted("Summary", style, color),
        time(Some(m.run.wall_time_s)),
        escape::line(
            &Path::new(&m.run.results_dir)
                .join("report.html")
                .display()
                .to_string()
        )
    )
}

/// What the terminal shows when a run has ended: at `Verbose` the table, then the
/// failures with their reasons and stderr logs, then the summary line; at `Quiet`
/// the summary line alone.
pub fn end_of_run(
    m: &PerformanceMetrics,
    failures: &[Failure],
    detail: Detail,
    color: bool,
) -> String {
    let mut out = String::new();
    if detail == Detail::Silent {
        return out;
    }
    if detail >= Detail::Verbose {
        out.push('\n');
        out.push_str(&crate::report::summary::run_table(m));
    }
    if detail >= Detail::Normal {
        // What the render manifest says went wrong comes first: no script of it ran.
        crate::report::summary::render_failure_lines(&mut out, &m.render_failures);
        crate::report::summary::manifest_lines(&mut out, &m.missing_scripts, &m.refused_scripts);
        failure_section(&mut out, m, failures, color);
        out.push('\n');
    }
    out.push_str(&summary_line(m, color));
    out.push('\n');
    out
}

/// This run's failures, then (counted apart) the carried records still failing.
fn failure_section(out: &mut String, m: &PerformanceMetrics, failures: &[Failure], color: bool) {
    let (standing, this_run): (Vec<Failure>, Vec<Failure>) =
        failures.iter().cloned().partition(|f| f.since.is_some());
    failure_list(out, m, "failures", &this_run, color);
    let all = m.totals.still_failing.max(standing.len());
    let heading = format!("still failing from earlier runs ({all})");
    failure_list(out, m, &heading, &standing, color);
    // The end of a run names a few (its CARRIED line named them too); `show` all.
    if !standing.is_empty() && standing.len() < all {
        out.push_str(&format!(
            "and {} more still failing (`jax-runner show` lists them)\n",
            all - standing.len()
        ));
    }
}

fn failure_list(
    out: &mut String,
    m: &PerformanceMetrics,
    heading: &str,
    failures: &[Failure],
    color: bool,
) {
    if failures.is_empty() {
        return;
    }
    out.push_str(&format!("\n{heading}:\n"));
    let (shown, rest) = head(failures, LISTED);
    for f in shown {
        let reason = escape::line(f.reason.as_deref().unwrap_or("no reason recorded"));
        let line = script_line(f.status, Some(f.execution_time_s), &f.id, color);
        match &f.since {
            Some(run) => out.push_str(&format!(
                "{line}: still failing since run {}: {reason}\n",
                escape::line(run)
            )),
            None => out.push_str(&format!("{line}: {reason}\n")),
        }
        if let Some(log) = &f.stderr_log {
            out.push_str(&format!("{:>17} {}\n", "stderr:", escape::line(log)));
        }
    }
    if rest > 0 {
        out.push_str(&format!(
            "and {rest} more did not succeed (every reason is in {})\n",
            Path::new(&m.run.results_dir)
                .join("performance_metrics.json")
                .display()
        ));
    }
}
