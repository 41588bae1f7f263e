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

const TEMPLATE_NAME: &str = "report.html.j2";
const TEMPLATE: &str = include_str!("../../templates/report.html.j2");

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

fn sparkline(id: &str, samples: Option<&Samples>) -> Option<Sparkline> {
    let points = &samples?.points;
    if points.is_empty() {
        return None;
    }
    let max_t = points
        .iter()
        .map(|p| p.1 as f64)
        .fold(0.0, f64::max)
        .max(1e-9);
    let max_m = points.iter().map(|p| p.2 as f64).fold(0.0, f64::max);
    let scale_m = max_m.max(1e-9);
    let inner_w = SPARK_W - 2.0 * SPARK_PAD;
    let inner_h = SPARK_H - 2.0 * SPARK_PAD;
    let y_of = |m: f64| SPARK_PAD + inner_h - (m / scale_m) * inner_h;

    let mut lines = Vec::new();
    let mut start = 0;
    while start < points.len() {
        let attempt = points[start].0;
        let end = points[start..]
            .iter()
            .position(|p| p.0 != attempt)
            .map_or(points.len(), |n| start + n);
        let seg = &points[start..end];
        let coords: Vec<String> = if seg.len() == 1 {
            // A single sample: a short flat stroke so it shows.
            let x = SPARK_PAD + (seg[0].1 as f64 / max_t) * inner_w;
            let y = y_of(seg[0].2 as f64);
            let x0 = (x - 3.0).max(SPARK_PAD);
            let x1 = (x0 + 6.0).min(SPARK_W - SPARK_PAD);
            vec![format!("{x0:.1},{y:.1}"), format!("{x1:.1},{y:.1}")]
        } else {
            seg.iter()
                .map(|p| {
                    let x = SPARK_PAD + (p.1 as f64 / max_t) * inner_w;
                    format!("{x:.1},{:.1}", y_of(p.2 as f64))
                })
                .collect()
        };
        lines.push(SparkLine {
            points: coords.join(" "),
            last: false,
        });
        start = end;
    }
    if let Some(l) = lines.last_mut() {
        l.last = true;
    }
    Some(Sparkline {
        width: SPARK_W,
        height: SPARK_H,
        title: format!(
            "{id}: resident memory over {}, {} samples shown, highest {max_m:.1} MiB",
            fmt_secs(max_t),
            points.len()
        ),
        lines,
    })
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s)
        .or_else(|_| humantime::parse_rfc3339_weak(s))
        .ok()
}

/// Seconds from `origin` to `t`, negative when `t` is earlier.
fn secs_between(origin: SystemTime, t: SystemTime) -> f64 {
    match t.duration_since(origin) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A round step for about `target` ticks over `span` seconds.
fn tick_step(span: f64, target: f64) -> f64 {
    let raw = (span / target).max(1e-3);
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0} s")
    } else if step >= 0.1 {
        format!("{v:.1} s")
    } else {
        format!("{v:.2} s")
    }
}

fn timeline(metrics: &PerformanceMetrics, finished: &[Finished]) -> Timeline {
    let mut placed = Vec::new();
    let mut skipped = 0;
    for f in finished {
        for a in &f.attempts {
            match parse_time(&a.started_at) {
                Some(t) => placed.push((f, a, t)),
                None => skipped += 1,
            }
        }
    }
    // The run's start is the origin; an attempt stamped earlier (clock skew, a
    // started_at that did not parse) moves it back so nothing is drawn off the left.
    let run_start = parse_time(&metrics.run.started_at);
    let earliest = placed.iter().map(|p| p.2).min();
    let origin = match (run_start, earliest) {
        (Some(r), Some(e)) => r.min(e),
        (Some(r), None) => r,
        (None, Some(e)) => e,
        (None, None) => SystemTime::UNIX_EPOCH,
    };
    let shift = run_start.map_or(0.0, |r| secs_between(origin, r));
    let end = placed
        .iter()
        .map(|(_, a, t)| secs_between(origin, *t) + a.duration_s.max(0.0))
        .fold(shift + metrics.run.wall_time_s.max(0.0), f64::max);
    let span = if end > 0.0 { end } else { 1.0 };

    let slots = placed
        .iter()
        .map(|(_, a, _)| a.slot + 1)
        .max()
        .unwrap_or(0)
        .max(metrics.run.jobs)
        .max(1);
    let plot_top = 4.0;
    let plot_bottom = plot_top + slots as f64 * TL_ROW_H;
    let x_of = |s: f64| TL_GUTTER + (s / span) * TL_PLOT_W;

    let rows = (0..slots)
        .map(|i| {
            let y = plot_top + i as f64 * TL_ROW_H;
            TimelineRow {
                label: format!("slot {i}"),
                y,
                text_y: y + TL_ROW_H / 2.0 + 4.0,
                stripe: i % 2 == 1,
            }
        })
        .collect();

    let step = tick_step(span, 10.0);
    let mut ticks = Vec::new();
    let mut v = 0.0;
    while v <= span + step * 1e-6 {
        ticks.push(Tick {
            x: round1(x_of(v)),
            label: fmt_tick(v, step),
        });
        v += step;
    }

    let bars = placed
        .iter()
        .map(|(f, a, t)| {
            let start = secs_between(origin, *t).max(0.0);
            let x = x_of(start);
            let w = ((a.duration_s.max(0.0) / span) * TL_PLOT_W).max(1.5);
            let y = plot_top + a.slot as f64 * TL_ROW_H + (TL_ROW_H - TL_BAR_H) / 2.0;
            // Roughly 6.5 units per character at the label's font size.
            let fits = ((w - 6.0) / 6.5).floor().max(0.0) as usize;
            let label = (fits >= 4).then(|| ellipsize(&f.id, fits));
            Bar {
                x: round1(x),
                y: round1(y),
                w: round1(w),
                h: TL_BAR_H,
                status: a.status.as_str(),
                title: format!(
                    "{} · attempt {} · {} · {} · slot {} · from {} to {}",
                    f.id,
                    a.number,
                    a.class,
                    fmt_secs(a.duration_s),
                    a.slot,
                    fmt_secs(start),
                    fmt_secs(start + a.duration_s.max(0.0)),
                ),
                label,
                text_x: round1(x + 4.0),
                text_y: round1(y + TL_BAR_H / 2.0 + 4.0),
            }
        })
        .collect();

    Timeline {
        width: TL_GUTTER + TL_PLOT_W + 16.0,
        height: plot_bottom + TL_AXIS_H,
        plot_top,
        plot_bottom,
        gutter: TL_GUTTER,
        row_h: TL_ROW_H,
        plot_w: TL_PLOT_W,
        rows,
        ticks,
        bars,
        skipped,
        span: fmt_secs(span),
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
mod tests {
    use super::*;
    use serde_json::json;

    fn attempt(
        number: u32,
        slot: usize,
        started_at: &str,
        duration_s: f64,
        ok: bool,
    ) -> serde_json::Value {
        json!({
            "number": number,
            "device": "cpu",
            "slot": slot,
            "started_at": started_at,
            "duration_s": duration_s,
            "status": if ok { "succeeded" } else { "failed" },
            "return_code": if ok { 0 } else { 1 },
            "signal": null,
            "peak_memory_mb": 120.5,
            "cpu_user_s": 1.0,
            "cpu_system_s": 0.1,
            "class": if ok { "succeeded" } else { "script_error" },
            "stdout_log": "/r/x.stdout.log",
            "stderr_log": "/r/x.stderr.log"
        })
    }

    fn result(
        id: &str,
        attempts: Vec<serde_json::Value>,
        ok: bool,
        stderr_tail: &[&str],
    ) -> ScriptResult {
        let mut v = json!({
            "schema_version": 1,
            "id": id,
            "script_path": format!("/out/m/jax/{id}.py"),
            "relative_path": format!("m/jax/{id}.py"),
            "discovered_by": "jax_folder",
            "success": ok,
            "status": if ok { "succeeded" } else { "failed" },
            "class": if ok { "succeeded" } else { "script_error" },
            "return_code": if ok { 0 } else { 1 },
            "signal": null,
            "device_requested": "cpu",
            "device_used": "cpu",
            "device_mismatch": false,
            "jax": {"jax_imported": true, "backend": "cpu", "compile_time_s": 0.75, "uncaught_exception": null},
            "attempts": attempts,
            "execution_time_s": 2.5,
            "peak_memory_mb": 130.25,
            "cpu_user_s": 1.0,
            "cpu_system_s": 0.1,
            "timeout_s": 300.0,
            "started_at": "2026-11-22T07:40:35.693Z",
            "finished_at": "2026-11-22T07:40:38.193Z",
            "stdout_log": "/r/x.stdout.log",
            "stderr_log": "/r/x.stderr.log",
            "stdout_bytes": 10,
            "stderr_bytes": 10,
            "stderr_tail": stderr_tail,
            "log_truncated": false,
            "leaks": [],
            "data_dir": "/r/data",
            "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
        });
        if !ok {
            v["matched_line"] = json!("ValueError: bad <value> & more");
            v["exception"] = json!({"type": "ValueError", "message": "bad <value>"});
        }
        serde_json::from_value(v).expect("a valid ScriptResult")
    }

    fn metrics(results: &[ScriptResult]) -> PerformanceMetrics {
        let run: crate::model::RunInfo = serde_json::from_value(json!({
            "started_at": "2026-11-22T07:40:35.000Z",
            "finished_at": "2026-11-22T07:40:45.000Z",
            "wall_time_s": 10.0,
            "device_requested": "cpu",
            "device": "cpu",
            "jobs": 2,
            "interpreter": "/venv/bin/python",
            "interpreter_source": "flag",
            "python_version": "3.11.2",
            "jax_version": "0.10.2",
            "jaxlib_version": "0.10.2",
            "output_dir": "/out",
            "results_dir": "/out/execution_results/jax",
            "compilation_cache": null,
            "interrupted": false,
            "retries": 1,
            "retry_on": ["timed_out"],
            "fallback": "cpu",
            "runner_peak_rss_mb": 20.0,
            "device_choice": "requested"
        }))
        .unwrap();
        PerformanceMetrics::build(
            run,
            results.iter().map(ScriptSummary::of).collect(),
            vec![],
            vec!["a <warning>".into()],
        )
    }

    fn feed(events: &[RunEvent]) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let mut r = HtmlReporter::new(dir.path().to_path_buf());
        for e in events {
            r.handle(e).unwrap();
        }
        let html = std::fs::read_to_string(dir.path().join(HTML_FILE)).unwrap();
        (dir, html)
    }

    fn sample_events() -> Vec<RunEvent> {
        let ok = result(
            "ok_model",
            vec![attempt(1, 0, "2026-11-22T07:40:35.693Z", 2.5, true)],
            true,
            &[],
        );
        let bad = result(
            "bad<b>&model",
            vec![
                attempt(1, 1, "2026-11-22T07:40:35.700Z", 1.0, false),
                attempt(2, 1, "2026-11-22T07:40:37.000Z", 1.5, false),
            ],
            false,
            &[
                "Traceback (most recent call last):",
                "<script>alert(1)</script>",
                "ValueError: bad <value>",
            ],
        );
        let mut events = vec![RunEvent::RunStarted {
            total: 2,
            jobs: 2,
            device: crate::config::Platform::Cpu,
            interpreter: "/venv/bin/python".into(),
        }];
        for i in 0..5 {
            events.push(RunEvent::Sample {
                id: "ok_model".into(),
                attempt: 1,
                elapsed_s: i as f64 * 0.5,
                rss_mb: 50.0 + i as f64 * 10.0,
                processes: 1,
            });
        }
        let m = metrics(&[ok.clone(), bad.clone()]);
        events.push(RunEvent::ScriptFinished {
            result: Box::new(bad),
        });
        events.push(RunEvent::ScriptFinished {
            result: Box::new(ok),
        });
        events.push(RunEvent::RunFinished {
            metrics: Box::new(m),
        });
        events
    }

    #[test]
    fn writes_the_report_with_every_script() {
        let (_d, html) = feed(&sample_events());
        assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100]);
        assert!(html.contains("ok_model"));
        // Ids are escaped wherever they appear.
        assert!(html.contains("bad&lt;b&gt;&amp;model"));
        assert!(!html.contains("bad<b>"));
        assert!(html.contains("0.10.2"));
        assert!(
            html.contains("/venv/bin/python") || html.contains("&#x2f;venv&#x2f;bin&#x2f;python")
        );
        assert!(html.contains("document.body.dataset.rendered"));
        assert!(html.contains("a &lt;warning&gt;"));
    }

    #[test]
    fn escapes_stderr_and_failure_details() {
        let (_d, html) = feed(&sample_events());
        assert!(!html.contains("<script>alert(1)"), "stderr must be escaped");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
        assert!(html.contains("ValueError: bad &lt;value&gt;"));
        assert!(html.contains("script_error"));
        // Exactly one inline <script> element: the page's own.
        assert_eq!(html.matches("<script").count(), 1);
    }

    #[test]
    fn one_timeline_rect_per_attempt() {
        let (_d, html) = feed(&sample_events());
        assert_eq!(html.matches("<rect class=\"attempt").count(), 3);
        assert_eq!(html.matches("class=\"attempt succeeded\"").count(), 1);
        assert_eq!(html.matches("class=\"attempt failed\"").count(), 2);
        assert!(html.contains("<title>ok_model · attempt 1 · succeeded · 2.50 s"));
        // Two slots, two rows.
        assert!(html.contains(">slot 0<") && html.contains(">slot 1<"));
    }

    #[test]
    fn memory_sparkline_from_samples() {
        let (_d, html) = feed(&sample_events());
        assert_eq!(
            html.matches("<polyline").count(),
            1,
            "only ok_model has samples"
        );
    }

    #[test]
    fn self_contained() {
        let (_d, html) = feed(&sample_events());
        assert!(!html.contains("http://"), "remote reference in the report");
        assert!(!html.contains("https://"), "remote reference in the report");
        assert!(!html.contains("src="), "no external scripts or images");
        assert!(!html.contains("<link"), "no external stylesheets");
    }

    #[test]
    fn samples_stay_bounded_and_even() {
        let mut s = Samples::default();
        for i in 0..100_000u32 {
            s.push(1 + i / 50_000, i as f64, i as f64);
        }
        assert!(s.points.len() < MAX_POINTS);
        assert!(s.points.len() >= MAX_POINTS / 2);
        let gaps: Vec<f32> = s.points.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert!(gaps.iter().all(|g| *g == gaps[0]), "evenly spaced");
        let spark = sparkline("x", Some(&s)).unwrap();
        assert_eq!(spark.lines.len(), 2, "one line per attempt");
    }

    #[test]
    fn a_write_failure_is_an_error_not_a_panic() {
        let mut r = HtmlReporter::new(PathBuf::from("/proc/no/such/place"));
        let events = sample_events();
        let err = events
            .iter()
            .map(|e| r.handle(e))
            .find_map(Result::err)
            .expect("writing under /proc fails");
        assert!(err.to_string().contains("report.html"), "{err}");
    }

    #[test]
    fn bad_timestamps_are_skipped_not_fatal() {
        let odd = result(
            "odd",
            vec![attempt(1, 0, "not a time", 1.0, true)],
            true,
            &[],
        );
        let m = metrics(std::slice::from_ref(&odd));
        let (_d, html) = feed(&[
            RunEvent::ScriptFinished {
                result: Box::new(odd),
            },
            RunEvent::RunFinished {
                metrics: Box::new(m),
            },
        ]);
        assert_eq!(html.matches("<rect class=\"attempt").count(), 0);
        assert!(html.contains("odd"));
    }

    #[test]
    fn the_started_event_names_the_slot() {
        let r = result(
            "late",
            vec![attempt(1, 0, "2026-11-22T07:40:36.000Z", 1.0, true)],
            true,
            &[],
        );
        let m = metrics(std::slice::from_ref(&r));
        let (_d, html) = feed(&[
            RunEvent::ScriptStarted {
                id: "late".into(),
                attempt: 1,
                device: crate::config::Platform::Cpu,
                path: "m/jax/late.py".into(),
                slot: 1,
            },
            RunEvent::ScriptFinished {
                result: Box::new(r),
            },
            RunEvent::RunFinished {
                metrics: Box::new(m),
            },
        ]);
        // Row 1 starts at 4 + 24; the bar is centred in it.
        let y = 4.0 + TL_ROW_H + (TL_ROW_H - TL_BAR_H) / 2.0;
        assert!(html.contains(&format!("y=\"{y:.1}\"")), "{html}");
    }

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(tick_step(10.0, 10.0), 1.0);
        assert_eq!(tick_step(95.0, 10.0), 10.0);
        assert_eq!(tick_step(3.0, 10.0), 0.5);
        assert_eq!(tick_step(400.0, 10.0), 50.0);
    }
}
