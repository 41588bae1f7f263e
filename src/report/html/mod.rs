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
mod view;

use view::*;

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
