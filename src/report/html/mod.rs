//! `report.html`: one self-contained page (inline CSS, inline JS, inline SVG, no
//! remote assets) rendered from `templates/report.html.j2` when the run ends.
//!
//! The reporter keeps only what the page needs while the run goes on: a slim row per
//! finished script (the stderr tail only for scripts that did not succeed) and a
//! decimated series of memory samples per script. All geometry (timeline rectangles,
//! sparkline points, axis ticks) is computed here; the template only lays it out and
//! its script only sorts the table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use super::{write_atomic, Reporter};
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::{PerformanceMetrics, ScriptResult, ScriptSummary, Status};

/// Name of the page inside the results folder.
pub const HTML_FILE: &str = "report.html";

mod svg;
use svg::{sparkline, timeline};

const TEMPLATE_NAME: &str = "report.html.j2";
const TEMPLATE: &str = include_str!("../../../templates/report.html.j2");

/// Most memory samples kept per script; beyond it every other point is dropped and
/// only every second sample is taken from then on.
const MAX_POINTS: usize = 240;

/// Timeline geometry, in SVG user units.
const TL_GUTTER: f64 = 64.0;
const TL_PLOT_W: f64 = 1040.0;
const TL_ROW_H: f64 = 24.0;
const TL_BAR_H: f64 = 18.0;
const TL_AXIS_H: f64 = 22.0;

/// Sparkline size, in SVG user units.
const SPARK_W: f64 = 140.0;
const SPARK_H: f64 = 28.0;
const SPARK_PAD: f64 = 2.0;

/// Writes `report.html` when the run ends.
#[derive(Debug)]
pub struct HtmlReporter {
    results_dir: PathBuf,
    /// From `RunStarted`: used when the final metrics lack the interpreter.
    interpreter: Option<String>,
    /// Per script id, a bounded series of samples.
    samples: HashMap<String, Samples>,
    /// Worker slot of each started attempt, from `ScriptStarted`, until its script
    /// finishes: the event names the slot even where the attempt record does not.
    slots: HashMap<(String, u32), usize>,
    /// Finished scripts, slimmed, in finishing order.
    finished: Vec<Finished>,
}

impl HtmlReporter {
    pub fn new(results_dir: PathBuf) -> Self {
        HtmlReporter {
            results_dir,
            interpreter: None,
            samples: HashMap::new(),
            slots: HashMap::new(),
            finished: Vec::new(),
        }
    }

    fn path(&self) -> PathBuf {
        self.results_dir.join(HTML_FILE)
    }

    /// Renders the page for the final metrics.
    fn render(&self, metrics: &PerformanceMetrics) -> Result<String, minijinja::Error> {
        let page = build_page(metrics, &self.finished, &self.samples, &self.interpreter);
        let mut env = minijinja::Environment::new();
        // Explicit, although the default callback also picks HTML for `.html.j2`.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.add_template(TEMPLATE_NAME, TEMPLATE)?;
        env.get_template(TEMPLATE_NAME)?
            .render(minijinja::Value::from_serialize(&page))
    }
}

impl Reporter for HtmlReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::RunStarted { interpreter, .. } => {
                self.interpreter = Some(interpreter.clone());
            }
            RunEvent::Sample {
                id,
                attempt,
                elapsed_s,
                rss_mb,
                ..
            } => {
                self.samples
                    .entry(id.clone())
                    .or_default()
                    .push(*attempt, *elapsed_s, *rss_mb);
            }
            RunEvent::ScriptStarted {
                id, attempt, slot, ..
            } => {
                self.slots.insert((id.clone(), *attempt), *slot);
            }
            RunEvent::ScriptFinished { result } => {
                let mut finished = Finished::of(result);
                for a in &mut finished.attempts {
                    if let Some(slot) = self.slots.remove(&(result.id.clone(), a.number)) {
                        a.slot = slot;
                    }
                }
                self.finished.push(finished);
            }
            RunEvent::RunFinished { metrics } => {
                let path = self.path();
                let html = self.render(metrics).map_err(|e| render_error(&path, &e))?;
                write_atomic(&path, html.as_bytes())?;
            }
            _ => {}
        }
        Ok(())
    }
}

fn render_error(path: &Path, e: &minijinja::Error) -> ReportError {
    let mut message = format!("failed to render {TEMPLATE_NAME}: {e}");
    if let Some(detail) = e.detail() {
        message.push_str(&format!(" ({detail})"));
    }
    ReportError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(message),
    }
}

// ---------------------------------------------------------------------------------
// What is kept during the run.

/// A bounded, evenly decimated series of `(attempt, elapsed_s, rss_mb)` samples.
#[derive(Debug, Clone)]
struct Samples {
    /// Every `stride`-th sample is kept.
    stride: u64,
    /// Samples seen so far.
    seen: u64,
    points: Vec<(u32, f32, f32)>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            stride: 1,
            seen: 0,
            points: Vec::new(),
        }
    }
}

impl Samples {
    fn push(&mut self, attempt: u32, elapsed_s: f64, rss_mb: f64) {
        if self.seen % self.stride == 0 {
            self.points.push((attempt, elapsed_s as f32, rss_mb as f32));
            if self.points.len() >= MAX_POINTS {
                // Kept points are samples 0, s, 2s, …: keeping every other one leaves
                // 0, 2s, 4s, …, which is what a stride of 2s keeps from now on.
                let mut i = 0;
                self.points.retain(|_| {
                    i += 1;
                    (i - 1) % 2 == 0
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }
}

/// One attempt, as the timeline needs it.
#[derive(Debug, Clone)]
struct SlimAttempt {
    number: u32,
    slot: usize,
    started_at: String,
    duration_s: f64,
    status: Status,
    class: &'static str,
}

/// A finished script, as the page needs it.
#[derive(Debug, Clone)]
struct Finished {
    id: String,
    relative_path: String,
    compile_time_s: Option<f64>,
    attempts: Vec<SlimAttempt>,
    /// Only for scripts that did not succeed.
    failure: Option<FailureDetail>,
}

#[derive(Debug, Clone)]
struct FailureDetail {
    status: Status,
    class: &'static str,
    matched_line: Option<String>,
    exception: Option<String>,
    stderr_tail: Vec<String>,
}

impl Finished {
    fn of(r: &ScriptResult) -> Self {
        let failure = (r.status != Status::Succeeded).then(|| FailureDetail {
            status: r.status,
            class: r.class.as_str(),
            matched_line: r.matched_line.clone(),
            exception: r.exception.as_ref().map(|e| {
                if e.message.is_empty() {
                    e.kind.clone()
                } else {
                    format!("{}: {}", e.kind, e.message)
                }
            }),
            stderr_tail: r.stderr_tail.clone(),
        });
        Finished {
            id: r.id.clone(),
            relative_path: r.relative_path.clone(),
            compile_time_s: r.jax.as_ref().map(|j| j.compile_time_s),
            attempts: r
                .attempts
                .iter()
                .map(|a| SlimAttempt {
                    number: a.number,
                    slot: a.slot,
                    started_at: a.started_at.clone(),
                    duration_s: a.duration_s,
                    status: a.status,
                    class: a.class.as_str(),
                })
                .collect(),
            failure,
        }
    }
}

// ---------------------------------------------------------------------------------
// What the template sees: ready strings and numbers only.

#[derive(Debug, Serialize)]
struct Page {
    title: String,
    cards: Vec<Card>,
    run_info: Vec<(&'static str, String)>,
    by_class: Vec<(String, usize)>,
    rows: Vec<Row>,
    timeline: Timeline,
    failures: Vec<Failure>,
    warnings: Vec<String>,
    missing: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Card {
    label: &'static str,
    value: String,
    /// CSS modifier: `good`, `bad`, `warn` or empty.
    tone: &'static str,
}

#[derive(Debug, Serialize)]
struct Row {
    index: usize,
    id: String,
    path: String,
    status: &'static str,
    class: &'static str,
    device_requested: String,
    device_used: String,
    wall_s: f64,
    wall: String,
    peak_mb: f64,
    peak: String,
    /// Empty when the script reported no jax telemetry.
    compile_sort: String,
    compile: String,
    attempts: usize,
    spark: Option<Sparkline>,
}

#[derive(Debug, Serialize)]
struct Sparkline {
    width: f64,
    height: f64,
    /// One polyline per attempt; the last is drawn strongest.
    lines: Vec<SparkLine>,
    title: String,
}

#[derive(Debug, Serialize)]
struct SparkLine {
    points: String,
    last: bool,
}

#[derive(Debug, Serialize)]
struct Timeline {
    width: f64,
    height: f64,
    plot_top: f64,
    plot_bottom: f64,
    gutter: f64,
    row_h: f64,
    plot_w: f64,
    rows: Vec<TimelineRow>,
    ticks: Vec<Tick>,
    bars: Vec<Bar>,
    /// Attempts left out because their start time did not parse.
    skipped: usize,
    span: String,
}

#[derive(Debug, Serialize)]
struct TimelineRow {
    label: String,
    y: f64,
    text_y: f64,
    stripe: bool,
}

#[derive(Debug, Serialize)]
struct Tick {
    x: f64,
    label: String,
}

#[derive(Debug, Serialize)]
struct Bar {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    status: &'static str,
    title: String,
    /// The id drawn inside the bar when it is wide enough.
    label: Option<String>,
    text_x: f64,
    text_y: f64,
}

#[derive(Debug, Serialize)]
struct Failure {
    id: String,
    path: String,
    status: &'static str,
    class: &'static str,
    matched_line: Option<String>,
    exception: Option<String>,
    stderr: String,
    stderr_lines: usize,
}

fn build_page(
    metrics: &PerformanceMetrics,
    finished: &[Finished],
    samples: &HashMap<String, Samples>,
    interpreter: &Option<String>,
) -> Page {
    let run = &metrics.run;
    let t = &metrics.totals;
    let by_id: HashMap<&str, &Finished> = finished.iter().map(|f| (f.id.as_str(), f)).collect();

    let tone = |n: usize, bad: &'static str| if n == 0 { "" } else { bad };
    let cards = vec![
        Card {
            label: "scripts",
            value: t.total_scripts.to_string(),
            tone: "",
        },
        Card {
            label: "succeeded",
            value: t.succeeded.to_string(),
            tone: if t.succeeded == t.total_scripts && t.total_scripts > 0 {
                "good"
            } else {
                ""
            },
        },
        Card {
            label: "failed",
            value: t.failed.to_string(),
            tone: tone(t.failed, "bad"),
        },
        Card {
            label: "timed out",
            value: t.timed_out.to_string(),
            tone: tone(t.timed_out, "bad"),
        },
        Card {
            label: "interrupted",
            value: t.interrupted.to_string(),
            tone: tone(t.interrupted, "warn"),
        },
        Card {
            label: "fallbacks",
            value: t.fallbacks.to_string(),
            tone: tone(t.fallbacks, "warn"),
        },
        Card {
            label: "device mismatches",
            value: t.device_mismatches.to_string(),
            tone: tone(t.device_mismatches, "warn"),
        },
        Card {
            label: "leaks",
            value: t.leaks.to_string(),
            tone: tone(t.leaks, "warn"),
        },
    ];

    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".to_string());
    let mut run_info = vec![
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
        ("jobs", run.jobs.to_string()),
        (
            "interpreter",
            or_dash(&run.interpreter.clone().or_else(|| interpreter.clone())),
        ),
        ("python", or_dash(&run.python_version)),
        ("jax", or_dash(&run.jax_version)),
        ("jaxlib", or_dash(&run.jaxlib_version)),
        ("started", run.started_at.clone()),
        ("finished", run.finished_at.clone()),
        ("output folder", run.output_dir.clone()),
        ("results folder", run.results_dir.clone()),
    ];
    if let Some(reason) = &run.device_fallback_reason {
        run_info.push(("device fallback", reason.clone()));
    }
    if run.interrupted {
        run_info.push(("interrupted", "yes: the run was stopped by a signal".into()));
    }

    // Table rows: the metrics' scripts in discovery order, then any finished script
    // the metrics do not list.
    let mut rows: Vec<Row> = metrics
        .scripts
        .iter()
        .map(|s| row(s, by_id.get(s.id.as_str()).copied(), samples))
        .collect();
    for f in finished {
        if !metrics.scripts.iter().any(|s| s.id == f.id) {
            rows.push(Row {
                index: 0,
                id: f.id.clone(),
                path: f.relative_path.clone(),
                status: f
                    .attempts
                    .last()
                    .map(|a| a.status.as_str())
                    .unwrap_or("interrupted"),
                class: f.attempts.last().map(|a| a.class).unwrap_or(""),
                device_requested: "—".into(),
                device_used: "—".into(),
                wall_s: f.attempts.iter().map(|a| a.duration_s).sum(),
                wall: fmt_secs(f.attempts.iter().map(|a| a.duration_s).sum()),
                peak_mb: 0.0,
                peak: "—".into(),
                compile_sort: String::new(),
                compile: "—".into(),
                attempts: f.attempts.len(),
                spark: sparkline(&f.id, samples.get(&f.id)),
            });
        }
    }
    for (i, r) in rows.iter_mut().enumerate() {
        r.index = i;
    }

    // Failures, in table order.
    let mut failures = Vec::new();
    for r in &rows {
        if let Some(d) = by_id.get(r.id.as_str()).and_then(|f| f.failure.as_ref()) {
            failures.push(Failure {
                id: r.id.clone(),
                path: r.path.clone(),
                status: d.status.as_str(),
                class: d.class,
                matched_line: d.matched_line.clone(),
                exception: d.exception.clone(),
                stderr: d.stderr_tail.join("\n"),
                stderr_lines: d.stderr_tail.len(),
            });
        }
    }

    Page {
        title: format!(
            "jax-runner report: {} of {} succeeded",
            t.succeeded, t.total_scripts
        ),
        cards,
        run_info,
        by_class: t
            .by_class
            .iter()
            .map(|(c, n)| (c.as_str().to_string(), *n))
            .collect(),
        rows,
        timeline: timeline(metrics, finished),
        failures,
        warnings: metrics.warnings.clone(),
        missing: metrics.missing_scripts.clone(),
    }
}

fn row(s: &ScriptSummary, f: Option<&Finished>, samples: &HashMap<String, Samples>) -> Row {
    let compile = f.and_then(|f| f.compile_time_s);
    Row {
        index: 0,
        id: s.id.clone(),
        path: f.map(|f| f.relative_path.clone()).unwrap_or_default(),
        status: s.status.as_str(),
        class: s.class.as_str(),
        device_requested: device_label(&s.device_requested),
        device_used: s
            .device_used
            .map(|p| device_label(&p))
            .unwrap_or_else(|| "—".into()),
        wall_s: s.execution_time_s,
        wall: fmt_secs(s.execution_time_s),
        peak_mb: s.peak_memory_mb,
        peak: format!("{:.1}", s.peak_memory_mb),
        compile_sort: compile.map(|c| c.to_string()).unwrap_or_default(),
        compile: compile.map(fmt_secs).unwrap_or_else(|| "—".into()),
        attempts: s.attempts,
        spark: sparkline(&s.id, samples.get(&s.id)),
    }
}

/// Lower-case name of a serializable enum (`cpu`, `auto`, …), as the JSON files spell it.
fn device_label<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "—".into(),
    }
}

fn fmt_secs(s: f64) -> String {
    if !s.is_finite() {
        return "—".into();
    }
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else {
        let whole = s.round() as u64;
        format!("{} min {:02} s", whole / 60, whole % 60)
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn ellipsize(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests;
