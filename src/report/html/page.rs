//! What the template sees, built from the final metrics and the script records:
//! summary cards, run facts, the table (failures first, then in discovery order),
//! the failure details.

use std::collections::{HashMap, HashSet};

use super::detail::details;
use super::inline::json_for_script;
use super::links::script_links;
use super::svg::{origin, sparkline, timeline};
use super::*;
use crate::listing::{bounded_messages, LISTED};
use crate::model::{Outcomes, RunInfo, ScriptSummary, Status, Totals, STATUSES};

/// How a cut list ends.
const ALL_IN_METRICS: &str = "(every one is in performance_metrics.json)";
use crate::report::record::ScriptRecord;

/// Adds the GPU columns, when any script has a GPU figure or GPU samples: its peak
/// GPU memory and, where there are samples, a sparkline of it.
pub(super) fn with_gpu(page: &mut Page, gpu_samples: &HashMap<String, Samples>) {
    for r in &mut page.rows {
        r.gpu_spark = super::svg::series_sparkline(&r.id, "GPU memory", gpu_samples.get(&r.id));
    }
    page.has_gpu_spark = page.rows.iter().any(|r| r.gpu_spark.is_some());
    page.gpu = page.has_gpu_spark || page.rows.iter().any(|r| r.gpu_peak_mb >= 0.0);
}

/// The whole page. The records come in finishing order, the order the timeline draws.
pub(super) fn build_page(
    run: &RunRecord,
    samples: &HashMap<String, Samples>,
    interpreter: &Option<String>,
    report_dir: &std::path::Path,
) -> Page {
    let metrics = run.metrics;
    let records = run.finishing_order();
    let t = &metrics.totals;
    let by_id: HashMap<&str, &ScriptRecord> = records.iter().map(|f| (f.id.as_str(), f)).collect();
    let mut rows = rows(metrics, records, &by_id, samples);
    for r in &mut rows {
        if let Some(f) = by_id.get(r.id.as_str()) {
            r.links = script_links(report_dir, f);
        }
    }
    let row_of: HashMap<&str, usize> = rows.iter().map(|r| (r.id.as_str(), r.index)).collect();
    let failures = failures(&rows, &by_id);
    // Counted over the table's rows, which are the metrics' scripts: the same counts,
    // by the same function, as the totals every other report words.
    let outcomes = Outcomes {
        still_failing: metrics.totals.still_failing,
        ..Outcomes::count(rows.iter().map(|r| r.status))
    };
    let details = details(&rows, &by_id, origin(run.started_at, records));
    Page {
        title: format!("jax-runner report: {}", outcomes.words()),
        failures_counts: failures_counts(&failures),
        provenance: format!(
            "run {} · jax-runner {}",
            metrics.run.run_id, metrics.run.runner_version
        ),
        status_cards: status_cards(&outcomes),
        total: rows.len(),
        other_cards: other_cards(t),
        has_spark: rows.iter().any(|r| r.spark.is_some()),
        gpu: false,
        has_gpu_spark: false,
        script_data: json_for_script(&details),
        script: "",
        csp: String::new(),
        run_info: run_info(&metrics.run, interpreter),
        by_class: t
            .by_class
            .iter()
            .map(|(c, n)| (c.as_str().to_string(), *n))
            .collect(),
        timeline: timeline(run, records, &row_of),
        rows,
        failures,
        warnings: bounded_messages(&metrics.warnings, LISTED, ALL_IN_METRICS),
        missing: bounded_messages(&metrics.missing_scripts, LISTED, ALL_IN_METRICS),
        render_failures: bounded_messages(
            &(metrics.render_failures.iter())
                .map(|f| format!("{}: {}", f.source, f.message))
                .collect::<Vec<_>>(),
            LISTED,
            ALL_IN_METRICS,
        ),
        refused: bounded_messages(&metrics.refused_scripts, LISTED, ALL_IN_METRICS),
    }
}

fn tone(n: usize, bad: &'static str) -> &'static str {
    if n == 0 {
        ""
    } else {
        bad
    }
}

/// One card per final status: each script is in exactly one, so they add up to the
/// number of rows. Carried only shows when some script was carried.
fn status_cards(outcomes: &Outcomes) -> Vec<Card> {
    let all_good = outcomes.succeeded == outcomes.total() && outcomes.total() > 0;
    STATUSES
        .into_iter()
        .filter(|s| *s != Status::Carried || outcomes.carried > 0)
        .map(|status| {
            let n = outcomes.of(status);
            let tone = match status {
                Status::Succeeded if all_good => "good",
                // Carried records still failing keep the tree red: the card says so.
                Status::Carried => tone(outcomes.still_failing, "bad"),
                Status::Succeeded => "",
                Status::Failed | Status::TimedOut => tone(n, "bad"),
                Status::Interrupted | Status::Skipped => tone(n, "warn"),
            };
            Card {
                label: Outcomes::label(status),
                value: n,
                tone,
                status: status.as_str(),
            }
        })
        .collect()
}

/// Counts that cut across the statuses; the rarer ones only when they happened.
fn other_cards(t: &Totals) -> Vec<Card> {
    let card = |label, n: usize, bad| Card {
        label,
        value: n,
        tone: tone(n, bad),
        status: "",
    };
    let mut cards = vec![
        card("retried", t.retried, "warn"),
        card("fallbacks", t.fallbacks, "warn"),
        card("device mismatches", t.device_mismatches, "warn"),
        card("leaks", t.leaks, "warn"),
    ];
    for (label, n, bad) in [
        ("resumed", t.resumed, ""),
        ("render failures", t.render_failures, "bad"),
        ("missing", t.missing, "bad"),
        ("refused", t.refused, "bad"),
    ] {
        if n > 0 {
            cards.push(card(label, n, bad));
        }
    }
    cards
}

fn run_info(run: &RunInfo, interpreter: &Option<String>) -> Vec<(&'static str, String)> {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".to_string());
    let mut info = vec![
        ("run id", run.run_id.clone()),
        ("jax-runner", run.runner_version.clone()),
        ("command", run.argv.join(" ")),
        ("wall time", fmt_secs(run.wall_time_s)),
        (
            "device",
            format!(
                "{} (requested {})",
                device_label(&run.device),
                device_label(&run.device_requested)
            ),
        ),
        ("device choice", run.device_choice.clone()),
        ("jobs", run.jobs_words()),
        (
            "interpreter",
            or_dash(&run.interpreter.clone().or_else(|| interpreter.clone())),
        ),
        ("python", or_dash(&run.python_version)),
        ("jax", or_dash(&run.jax_version)),
        ("jaxlib", or_dash(&run.jaxlib_version)),
        ("started", run.started_at.rfc3339()),
        ("finished", run.finished_at.rfc3339()),
        ("output folder", run.output_dir.clone()),
        ("results folder", run.results_dir.clone()),
    ];
    if let Some(reason) = &run.device_fallback_reason {
        info.push(("device fallback", reason.clone()));
    }
    if run.interrupted {
        info.push(("interrupted", "yes: the run was stopped by a signal".into()));
    }
    info
}

/// Table rows, failures first: by final status (failed, timed out, interrupted,
/// succeeded), and within one, the metrics' scripts in discovery order, then any
/// finished script the metrics do not list, as it finished.
fn rows(
    metrics: &crate::model::PerformanceMetrics,
    records: &[ScriptRecord],
    by_id: &HashMap<&str, &ScriptRecord>,
    samples: &HashMap<String, Samples>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = metrics
        .scripts
        .iter()
        .map(|s| row(s, by_id.get(s.id.as_str()).copied(), samples))
        .collect();
    let listed: HashSet<&str> = metrics.scripts.iter().map(|s| s.id.as_str()).collect();
    for f in records {
        if !listed.contains(f.id.as_str()) {
            rows.push(unlisted_row(f, samples));
        }
    }
    rows.sort_by_key(|r| status_rank(r.status));
    for (i, r) in rows.iter_mut().enumerate() {
        r.index = i;
    }
    rows
}

/// Where a status sorts in the table: what needs attention first, in the order the
/// counts are worded.
fn status_rank(status: Status) -> usize {
    match status {
        Status::Succeeded => STATUSES.len(),
        other => STATUSES.iter().position(|s| *s == other).unwrap_or(0),
    }
}

fn row(s: &ScriptSummary, f: Option<&ScriptRecord>, samples: &HashMap<String, Samples>) -> Row {
    let compile = f.and_then(|f| f.compile_time_s);
    Row {
        index: 0,
        id: s.id.clone(),
        // On one line, as every report words a path (a name may hold a line break).
        path: f
            .map(|f| crate::report::escape::line(&f.relative_path).into_owned())
            .unwrap_or_default(),
        status: s.status,
        class: s.class.as_str(),
        device_requested: device_label(&s.device_requested),
        device_used: s
            .device_used
            .map(|p| device_label(&p))
            .unwrap_or_else(|| "—".into()),
        wall_s: round3(s.execution_time_s),
        wall: fmt_secs(s.execution_time_s),
        peak_mb: round1(s.peak_memory_mb),
        peak: format!("{:.1}", s.peak_memory_mb),
        gpu_peak_mb: s.peak_gpu_memory_mb.unwrap_or(-1.0),
        gpu_peak: s
            .peak_gpu_memory_mb
            .map_or_else(|| "—".into(), |m| format!("{m:.1}")),
        gpu_spark: None,
        compile_sort: compile.map(|c| c.to_string()).unwrap_or_default(),
        compile: compile.map(fmt_secs).unwrap_or_else(|| "—".into()),
        split: f
            .and_then(|f| f.time_breakdown.as_ref())
            .map(super::split::time_bar),
        attempts: s.attempts,
        spark: sparkline(&s.id, samples.get(&s.id)),
        exit: f.map(exit_of).unwrap_or_else(|| "—".into()),
        links: Vec::new(),
    }
}

/// A finished script the metrics do not list: what its attempts tell.
fn unlisted_row(f: &ScriptRecord, samples: &HashMap<String, Samples>) -> Row {
    let wall: f64 = f.attempts.iter().map(|a| a.duration_s).sum();
    Row {
        index: 0,
        id: f.id.clone(),
        path: crate::report::escape::line(&f.relative_path).into_owned(),
        status: f.attempts.last().map_or(Status::Interrupted, |a| a.status),
        class: f.attempts.last().map(|a| a.class.as_str()).unwrap_or(""),
        device_requested: "—".into(),
        device_used: "—".into(),
        wall_s: round3(wall),
        wall: fmt_secs(wall),
        peak_mb: 0.0,
        peak: "—".into(),
        gpu_peak_mb: -1.0,
        gpu_peak: "—".into(),
        gpu_spark: None,
        compile_sort: String::new(),
        compile: "—".into(),
        split: None,
        attempts: f.attempts.len(),
        spark: sparkline(&f.id, samples.get(&f.id)),
        exit: exit_of(f),
        links: Vec::new(),
    }
}

/// The exit column: the exit code, or the signal that ended the script.
fn exit_of(f: &ScriptRecord) -> String {
    match (f.return_code, &f.signal_name, f.signal) {
        (Some(code), _, _) => code.to_string(),
        (None, Some(name), _) => name.clone(),
        (None, None, Some(n)) => crate::model::reason::signal_name(n),
        (None, None, None) => "—".into(),
    }
}

/// The failures section's counts: this run's, by status, then the carried records
/// still failing, counted apart.
fn failures_counts(failures: &[Failure]) -> String {
    let (standing, this_run): (Vec<&Failure>, Vec<&Failure>) =
        failures.iter().partition(|f| f.since.is_some());
    let mut parts = Vec::new();
    if !this_run.is_empty() {
        parts.push(format!(
            "this run: {}",
            Outcomes::count(this_run.iter().map(|f| f.status)).problems()
        ));
    }
    if !standing.is_empty() {
        parts.push(format!(
            "{} still failing from earlier runs (carried, not run by this one)",
            standing.len()
        ));
    }
    parts.join("; ")
}

/// Failures, in table order: this run's and the carried records still failing.
fn failures(rows: &[Row], by_id: &HashMap<&str, &ScriptRecord>) -> Vec<Failure> {
    rows.iter()
        .filter_map(|r| {
            let d = by_id.get(r.id.as_str());
            let d = d.filter(|d| d.needs_attention() || d.still_failing())?;
            let reason = d.reason.as_ref();
            let since = d.carried.as_ref().map(|c| c.from.clone());
            Some(Failure {
                since,
                i: r.index,
                open: false,
                id: r.id.clone(),
                path: r.path.clone(),
                status: d.carried.as_ref().map_or(d.status, |c| c.status),
                class: d.class.as_str(),
                reason: reason.map_or_else(|| d.class.as_str().to_string(), |r| r.words.clone()),
                matched_line: d.matched_line.clone(),
                exception: d.exception_text(),
                tail: reason.map(|r| r.tail.join("\n")).unwrap_or_default(),
                tail_lines: reason.map_or(0, |r| r.tail.len()),
                tail_stream: reason.map_or("stderr", |r| r.stream),
                links: r.links.clone(),
            })
        })
        .enumerate()
        .map(|(n, f)| Failure {
            open: n < OPEN_FAILURES,
            ..f
        })
        .collect()
}

/// Enough digits to sort by, not the 17 of a full `f64`.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
