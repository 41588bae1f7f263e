//! `report.html`: one self-contained page (inline CSS, inline JS, inline SVG, no
//! remote assets) rendered from `templates/report.html.j2` when the run ends.
//!
//! An exporter of the run's one aggregate (`super::export`): beyond the script records
//! every end-of-run report shares, it keeps only a decimated series of memory samples
//! per script while the run goes on. All geometry (timeline rectangles, sparkline points,
//! axis ticks) is computed here; the template only lays it out. Its script
//! (`templates/report.js`) sorts and filters the table and opens a script's detail;
//! a Content-Security-Policy lets only that script run, whatever a script's output
//! holds. Every value the template writes passes [`escape::excerpt`] before HTML
//! escaping (the per-script data in the page's JSON passes [`escape::line`]), so no
//! NUL, ESC or bidirectional override from a script reaches the page.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

use super::escape;
use super::export::{Exporter, RunRecord};
use super::record::ScriptRecord;
use super::write_atomic_stream;
use crate::error::ReportError;
use crate::events::RunEvent;

/// Name of the page inside the results folder.
pub const HTML_FILE: &str = "report.html";

mod detail;
mod inline;
mod lazy;
mod links;
mod page;
mod split;
mod svg;

const TEMPLATE_NAME: &str = "report.html.j2";
const TEMPLATE: &str = include_str!("../../../templates/report.html.j2");
/// The page's one script, inlined; the CSP allows it by its hash.
const SCRIPT: &str = include_str!("../../../templates/report.js");

/// Most memory samples kept per script; beyond it every other point is dropped and
/// only every second sample is taken from then on.
const MAX_POINTS: usize = 240;

/// Timeline geometry, in SVG user units. A lane is `TL_ROW_H` high; its bar starts
/// `TL_BAR_Y` down, leaving room above it for a failure's mark.
const TL_GUTTER: f64 = 64.0;
const TL_PLOT_W: f64 = 1040.0;
const TL_ROW_H: f64 = 28.0;
const TL_BAR_Y: f64 = 8.0;
const TL_BAR_H: f64 = 18.0;
const TL_AXIS_H: f64 = 22.0;
/// A failed attempt is never narrower than this, however short.
const FAIL_MIN_W: f64 = 4.0;
/// Bar labels are 11px monospace: 0.6 em a character, and a little spare for fonts
/// whose advance is wider.
const LABEL_CHAR_W: f64 = 6.9;
/// Space left between a bar's edge and its label.
const LABEL_PAD: f64 = 4.0;
/// Failure cards shown open; later ones start folded.
const OPEN_FAILURES: usize = 5;

/// Sparkline size, in SVG user units.
const SPARK_W: f64 = 100.0;
/// No taller than a line of the table, so every row stays one line high.
const SPARK_H: f64 = 20.0;
const SPARK_PAD: f64 = 2.0;
/// Most points drawn in one sparkline: about one per two units of width.
const SPARK_MAX_DRAWN: usize = 70;

/// Writes `report.html` when the run ends.
#[derive(Debug)]
pub struct HtmlExporter {
    results_dir: PathBuf,
    /// From `RunStarted`: used when the final metrics lack the interpreter.
    interpreter: Option<String>,
    /// Per script id, a bounded series of samples.
    samples: HashMap<String, Samples>,
    /// Per script id, its GPU memory samples (GPU attempts only).
    gpu_samples: HashMap<String, Samples>,
}

impl HtmlExporter {
    pub fn new(results_dir: PathBuf) -> Self {
        HtmlExporter {
            results_dir,
            interpreter: None,
            samples: HashMap::new(),
            gpu_samples: HashMap::new(),
        }
    }

    fn path(&self) -> PathBuf {
        self.results_dir.join(HTML_FILE)
    }

    /// Renders the page of the finished run into `out`, as it goes: the page of a run
    /// of thousands of scripts is megabytes, never held whole.
    fn render(
        &self,
        run: &RunRecord,
        out: &mut dyn std::io::Write,
    ) -> Result<(), minijinja::Error> {
        let mut page = page::build_page(run, &self.samples, &self.interpreter, &self.results_dir);
        page::with_gpu(&mut page, &self.gpu_samples);
        page.script = SCRIPT;
        page.csp = inline::content_security_policy(SCRIPT);
        let mut env = minijinja::Environment::new();
        // Explicit, although the default callback also picks HTML for `.html.j2`.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.set_formatter(
            |out, state, value| match value.as_str().map(escape::excerpt) {
                Some(std::borrow::Cow::Owned(text)) => {
                    let text = match value.is_safe() {
                        true => minijinja::Value::from_safe_string(text),
                        false => minijinja::Value::from(text),
                    };
                    minijinja::escape_formatter(out, state, &text)
                }
                _ => minijinja::escape_formatter(out, state, value),
            },
        );
        env.add_template(TEMPLATE_NAME, TEMPLATE)?;
        // The per-script lists go to the template one item at a time, the rest as is.
        let context = minijinja::context! {
            rows => lazy::one_at_a_time(std::mem::take(&mut page.rows)),
            failures => lazy::one_at_a_time(std::mem::take(&mut page.failures)),
            ..minijinja::Value::from_serialize(&page)
        };
        env.get_template(TEMPLATE_NAME)?
            .render_captured_to(context, out)?;
        Ok(())
    }
}

impl Exporter for HtmlExporter {
    fn observe(
        &mut self,
        event: &RunEvent,
        _record: Option<&ScriptRecord>,
    ) -> Result<(), ReportError> {
        match event {
            RunEvent::RunStarted { interpreter, .. } => {
                self.interpreter = Some(interpreter.clone());
            }
            RunEvent::Sample {
                id,
                attempt,
                elapsed_s,
                rss_mb,
                gpu_memory_mb,
                ..
            } => {
                self.samples
                    .entry(id.clone())
                    .or_default()
                    .push(*attempt, *elapsed_s, *rss_mb);
                if let Some(gpu) = gpu_memory_mb {
                    self.gpu_samples
                        .entry(id.clone())
                        .or_default()
                        .push(*attempt, *elapsed_s, *gpu);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn export(&mut self, run: &RunRecord) -> Result<(), ReportError> {
        // The file is buffered by write_atomic_stream.
        write_atomic_stream(&self.path(), true, |file| {
            self.render(run, file).map_err(|e| render_error(&e))
        })
    }
}

/// A failed render, as the write's error: the page is never half-written (the
/// temporary file is dropped).
fn render_error(e: &minijinja::Error) -> std::io::Error {
    // The writer's own failure (a full disk) is what the user needs to see.
    if let Some(io) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>())
    {
        return std::io::Error::new(io.kind(), io.to_string());
    }
    let mut message = format!("failed to render {TEMPLATE_NAME}: {e}");
    if let Some(detail) = e.detail() {
        message.push_str(&format!(" ({detail})"));
    }
    std::io::Error::other(message)
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

// ---------------------------------------------------------------------------------
// What the template sees: ready strings and numbers only.

#[derive(Debug, Serialize)]
struct Page {
    title: String,
    /// The header's provenance line: run id and jax-runner version.
    provenance: String,
    /// The table's scripts by final status: each script in exactly one card, so the
    /// cards add up to `total`.
    status_cards: Vec<Card>,
    /// Table rows, the number the status cards add up to.
    total: usize,
    /// Counts that overlap the statuses (fallbacks, leaks, …).
    other_cards: Vec<Card>,
    /// Whether any script has memory samples: the memory column is left out otherwise.
    has_spark: bool,
    /// Whether the GPU memory column shows (some script has a GPU figure).
    gpu: bool,
    /// Whether any script has GPU memory samples (else no GPU sparkline column).
    has_gpu_spark: bool,
    /// Per table row, what its detail view adds to the row (attempts, reason), as
    /// JSON safe inside a `<script>` element.
    script_data: String,
    /// The page's script and the policy that lets only it run.
    script: &'static str,
    csp: String,
    run_info: Vec<(&'static str, String)>,
    by_class: Vec<(String, usize)>,
    /// Given to the template one at a time (see `lazy.rs`), not with the rest.
    #[serde(skip)]
    rows: Vec<Row>,
    timeline: Timeline,
    /// Scripts this run ran (or meant to run) that did not succeed: the cards of
    /// the failed, timed-out, interrupted and skipped ones, in table order.
    #[serde(skip)]
    failures: Vec<Failure>,
    /// Those counted by status in the counts' words (`1 failed, 5 skipped`).
    failures_counts: String,
    warnings: Vec<String>,
    missing: Vec<String>,
    /// Models step 11 failed to render (`source: message`), shown first.
    render_failures: Vec<String>,
    refused: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Card {
    label: &'static str,
    value: usize,
    /// CSS modifier: `good`, `bad`, `warn` or empty.
    tone: &'static str,
    /// The status a status card counts (`failed`); empty for other cards.
    status: &'static str,
}

#[derive(Debug, Serialize)]
struct Row {
    index: usize,
    id: String,
    path: String,
    status: crate::model::Status,
    class: &'static str,
    device_requested: String,
    device_used: String,
    wall_s: f64,
    wall: String,
    peak_mb: f64,
    peak: String,
    /// Peak GPU memory, MiB; -1 for none, so those sort first.
    gpu_peak_mb: f64,
    gpu_peak: String,
    gpu_spark: Option<Sparkline>,
    /// Empty when the script reported no jax telemetry.
    compile_sort: String,
    compile: String,
    /// Where the time went: start-up, import, backend, compile, script.
    split: Option<split::TimeBar>,
    attempts: usize,
    spark: Option<Sparkline>,
    /// The final attempt's exit code, or the signal that killed it; `—` for neither.
    exit: String,
    /// Its logs and data folder, relative to the report.
    links: Vec<links::Link>,
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
    /// Some attempt waited in a cluster's queue (the legend then names it).
    queued: bool,
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
    /// The table row of its script.
    i: usize,
    /// The id drawn inside the bar when it is wide enough for all of it.
    label: Option<String>,
    text_x: f64,
    text_y: f64,
    /// SVG path of the mark above a failed attempt, so no failure is too small to see.
    mark: Option<String>,
    /// Where its Slurm job waited in the queue, drawn apart before the bar: x, width.
    queue: Option<(f64, f64)>,
}

#[derive(Debug, Serialize)]
struct Failure {
    /// The table row of its script.
    i: usize,
    /// Shown unfolded: the first few are.
    open: bool,
    id: String,
    path: String,
    status: crate::model::Status,
    class: &'static str,
    /// How it ended, in every report's words (`exit code 3`).
    reason: String,
    matched_line: Option<String>,
    exception: Option<String>,
    /// The last lines of `tail_stream`.
    tail: String,
    tail_lines: usize,
    /// `stderr`, or `stdout` when stderr was empty.
    tail_stream: &'static str,
    links: Vec<links::Link>,
    /// A carried record still failing: the run that wrote it.
    since: Option<String>,
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

#[cfg(test)]
mod tests;
