//! What `report.html`'s template sees: ready strings and numbers only, made by
//! `page.rs` and its helpers from the run's records.

use serde::Serialize;

use super::{links, split};

#[derive(Debug, Serialize)]
pub(super) struct Page {
    pub(super) title: String,
    /// The header's provenance line: run id and jax-runner version.
    pub(super) provenance: String,
    /// The table's scripts by final status: each script in exactly one card, so the
    /// cards add up to `total`.
    pub(super) status_cards: Vec<Card>,
    /// Table rows, the number the status cards add up to.
    pub(super) total: usize,
    /// Counts that overlap the statuses (fallbacks, leaks, …).
    pub(super) other_cards: Vec<Card>,
    /// Whether any script has memory samples: the memory column is left out otherwise.
    pub(super) has_spark: bool,
    /// Whether the GPU memory column shows (some script has a GPU figure).
    pub(super) gpu: bool,
    /// Whether any script has GPU memory samples (else no GPU sparkline column).
    pub(super) has_gpu_spark: bool,
    /// Per table row, what its detail view adds to the row (attempts, reason), as
    /// JSON safe inside a `<script>` element.
    pub(super) script_data: String,
    /// The page's script and the policy that lets only it run.
    pub(super) script: &'static str,
    pub(super) csp: String,
    pub(super) run_info: Vec<(&'static str, String)>,
    pub(super) by_class: Vec<(String, usize)>,
    /// Given to the template one at a time (see `lazy.rs`), not with the rest.
    #[serde(skip)]
    pub(super) rows: Vec<Row>,
    pub(super) timeline: Timeline,
    /// Scripts this run ran (or meant to run) that did not succeed: the cards of
    /// the failed, timed-out, interrupted and skipped ones, in table order.
    #[serde(skip)]
    pub(super) failures: Vec<Failure>,
    /// Those counted by status in the counts' words (`1 failed, 5 skipped`).
    pub(super) failures_counts: String,
    pub(super) warnings: Vec<String>,
    pub(super) missing: Vec<String>,
    /// Models step 11 failed to render (`source: message`), shown first.
    pub(super) render_failures: Vec<String>,
    pub(super) refused: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct Card {
    pub(super) label: &'static str,
    pub(super) value: usize,
    /// CSS modifier: `good`, `bad`, `warn` or empty.
    pub(super) tone: &'static str,
    /// The status a status card counts (`failed`); empty for other cards.
    pub(super) status: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct Row {
    pub(super) index: usize,
    pub(super) id: String,
    pub(super) path: String,
    pub(super) status: crate::model::Status,
    pub(super) class: &'static str,
    pub(super) device_requested: String,
    pub(super) device_used: String,
    pub(super) wall_s: f64,
    pub(super) wall: String,
    pub(super) peak_mb: f64,
    pub(super) peak: String,
    /// Peak GPU memory, MiB; -1 for none, so those sort first.
    pub(super) gpu_peak_mb: f64,
    pub(super) gpu_peak: String,
    pub(super) gpu_spark: Option<Sparkline>,
    /// Empty when the script reported no jax telemetry.
    pub(super) compile_sort: String,
    pub(super) compile: String,
    /// Where the time went: start-up, import, backend, compile, script.
    pub(super) split: Option<split::TimeBar>,
    pub(super) attempts: usize,
    pub(super) spark: Option<Sparkline>,
    /// The final attempt's exit code, or the signal that killed it; `—` for neither.
    pub(super) exit: String,
    /// Its logs and data folder, relative to the report.
    pub(super) links: Vec<links::Link>,
}

#[derive(Debug, Serialize)]
pub(super) struct Sparkline {
    pub(super) width: f64,
    pub(super) height: f64,
    /// One polyline per attempt; the last is drawn strongest.
    pub(super) lines: Vec<SparkLine>,
    pub(super) title: String,
}

#[derive(Debug, Serialize)]
pub(super) struct SparkLine {
    pub(super) points: String,
    pub(super) last: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct Timeline {
    pub(super) width: f64,
    pub(super) height: f64,
    pub(super) plot_top: f64,
    pub(super) plot_bottom: f64,
    pub(super) gutter: f64,
    pub(super) row_h: f64,
    pub(super) plot_w: f64,
    pub(super) rows: Vec<TimelineRow>,
    pub(super) ticks: Vec<Tick>,
    pub(super) bars: Vec<Bar>,
    /// Some attempt waited in a cluster's queue (the legend then names it).
    pub(super) queued: bool,
    /// Attempts left out because their start time did not parse.
    pub(super) skipped: usize,
    pub(super) span: String,
}

#[derive(Debug, Serialize)]
pub(super) struct TimelineRow {
    pub(super) label: String,
    pub(super) y: f64,
    pub(super) text_y: f64,
    pub(super) stripe: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct Tick {
    pub(super) x: f64,
    pub(super) label: String,
}

#[derive(Debug, Serialize)]
pub(super) struct Bar {
    pub(super) x: f64,
    pub(super) y: f64,
    pub(super) w: f64,
    pub(super) h: f64,
    pub(super) status: &'static str,
    pub(super) title: String,
    /// The table row of its script.
    pub(super) i: usize,
    /// The id drawn inside the bar when it is wide enough for all of it.
    pub(super) label: Option<String>,
    pub(super) text_x: f64,
    pub(super) text_y: f64,
    /// SVG path of the mark above a failed attempt, so no failure is too small to see.
    pub(super) mark: Option<String>,
    /// Where its Slurm job waited in the queue, drawn apart before the bar: x, width.
    pub(super) queue: Option<(f64, f64)>,
}

#[derive(Debug, Serialize)]
pub(super) struct Failure {
    /// The table row of its script.
    pub(super) i: usize,
    /// Shown unfolded: the first few are.
    pub(super) open: bool,
    pub(super) id: String,
    pub(super) path: String,
    pub(super) status: crate::model::Status,
    pub(super) class: &'static str,
    /// How it ended, in every report's words (`exit code 3`).
    pub(super) reason: String,
    pub(super) matched_line: Option<String>,
    pub(super) exception: Option<String>,
    /// The last lines of `tail_stream`.
    pub(super) tail: String,
    pub(super) tail_lines: usize,
    /// `stderr`, or `stdout` when stderr was empty.
    pub(super) tail_stream: &'static str,
    pub(super) links: Vec<links::Link>,
    /// A carried record still failing: the run that wrote it.
    pub(super) since: Option<String>,
}
