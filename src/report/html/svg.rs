//! The inline SVG pieces of the report: memory sparklines and the timeline of
//! attempts per worker slot, computed here so the template only places them.

use super::*;
use crate::model::Status;
use crate::report::export::RunRecord;
use crate::report::record::{AttemptRecord, ScriptRecord};

pub(super) fn sparkline(id: &str, samples: Option<&Samples>) -> Option<Sparkline> {
    series_sparkline(id, "resident memory", samples)
}

/// A sparkline of one series: `what` names it in the title.
pub(super) fn series_sparkline(
    id: &str,
    what: &str,
    samples: Option<&Samples>,
) -> Option<Sparkline> {
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

    let stride = points.len().div_ceil(SPARK_MAX_DRAWN).max(1);
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
            // A point per pixel or two is all a sparkline shows: each chunk of
            // `stride` samples draws as its highest, so peaks survive.
            seg.chunks(stride)
                .filter_map(|c| c.iter().max_by(|a, b| a.2.total_cmp(&b.2)))
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
            "{id}: {what} over {}, {} samples shown, highest {max_m:.1} MiB",
            fmt_secs(max_t),
            points.len()
        ),
        lines,
    })
}

/// Seconds from `origin` to `t`, negative when `t` is earlier.
pub(super) fn secs_between(origin: SystemTime, t: SystemTime) -> f64 {
    match t.duration_since(origin) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A round step for about `target` ticks over `span` seconds.
pub(super) fn tick_step(span: f64, target: f64) -> f64 {
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

pub(super) fn fmt_tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0} s")
    } else if step >= 0.1 {
        format!("{v:.1} s")
    } else {
        format!("{v:.2} s")
    }
}

/// The scripts this run ran: a carried script's attempts are an earlier run's.
fn ran(records: &[ScriptRecord]) -> impl Iterator<Item = &ScriptRecord> {
    records.iter().filter(|f| f.carried.is_none())
}

/// The origin of the timeline: the run's start, moved back to the earliest attempt
/// when one is stamped earlier (clock skew), so nothing is drawn off the left.
pub(super) fn origin(run_start: Option<SystemTime>, records: &[ScriptRecord]) -> SystemTime {
    let earliest = ran(records)
        .flat_map(|f| &f.attempts)
        .filter_map(|a| a.started_at)
        .min();
    match (run_start, earliest) {
        (Some(r), Some(e)) => r.min(e),
        (Some(r), None) => r,
        (None, Some(e)) => e,
        (None, None) => SystemTime::UNIX_EPOCH,
    }
}

/// The timeline: one lane per worker slot, one bar per attempt. `row_of` maps a
/// script id to its table row, which a click on its bars opens.
pub(super) fn timeline(
    run: &RunRecord,
    records: &[ScriptRecord],
    row_of: &HashMap<&str, usize>,
) -> Timeline {
    let metrics = run.metrics;
    let mut placed = Vec::new();
    let mut skipped = 0;
    for f in ran(records) {
        for a in &f.attempts {
            match a.started_at {
                Some(t) => placed.push((f, a, t)),
                None => skipped += 1,
            }
        }
    }
    let origin = origin(run.started_at, records);
    let shift = run.started_at.map_or(0.0, |r| secs_between(origin, r));
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
                text_y: y + TL_BAR_Y + TL_BAR_H / 2.0 + 4.0,
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

    let mut bars: Vec<Bar> = placed
        .iter()
        .map(|(f, a, t)| {
            let start = secs_between(origin, *t).max(0.0);
            let lane = plot_top + a.slot as f64 * TL_ROW_H;
            bar(f, a, start, x_of(start), lane, span, row_of)
        })
        .collect();
    // Failures are drawn last: a neighbour's minimum width never covers them.
    bars.sort_by_key(|b| b.mark.is_some());
    let queued = bars.iter().any(|b| b.queue.is_some());

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
        queued,
        skipped,
        span: fmt_secs(span),
    }
}

/// One attempt's bar in its lane: `start` seconds after the origin, at `x`.
fn bar(
    f: &ScriptRecord,
    a: &AttemptRecord,
    start: f64,
    x: f64,
    lane: f64,
    span: f64,
    row_of: &HashMap<&str, usize>,
) -> Bar {
    let failed = a.status != Status::Succeeded;
    let min_w = if failed { FAIL_MIN_W } else { 1.5 };
    let w = ((a.duration_s.max(0.0) / span) * TL_PLOT_W).max(min_w);
    let y = lane + TL_BAR_Y;
    // The whole id or nothing: cut ids of one pipeline share their first letters, so
    // "model…" on every bar tells nothing. The tooltip always has it.
    let needed = f.id.chars().count() as f64 * LABEL_CHAR_W + 2.0 * LABEL_PAD;
    let label = (w >= needed).then(|| f.id.clone());
    // A failure gets a mark above its bar, in the lane's top margin.
    let mark = failed.then(|| {
        let cx = x + w / 2.0;
        format!("M{:.1} {:.1}h8l-4 6z", cx - 4.0, lane + 1.0)
    });
    // The queue ends where the run on the node starts.
    let queued = a.queued_s.filter(|q| *q > 0.0);
    let queue = queued.map(|q| {
        let qw = (q / span) * TL_PLOT_W;
        let qx = (x - qw).max(TL_GUTTER);
        (round1(qx), round1(x - qx))
    });
    Bar {
        i: row_of.get(f.id.as_str()).copied().unwrap_or(usize::MAX),
        x: round1(x),
        y: round1(y),
        w: round1(w),
        h: TL_BAR_H,
        status: a.status.as_str(),
        title: format!(
            "{} · attempt {} · {} · {} · slot {} · from {} to {}{}",
            f.id,
            a.number,
            a.class.as_str(),
            fmt_secs(a.duration_s),
            a.slot,
            fmt_secs(start),
            fmt_secs(start + a.duration_s.max(0.0)),
            a.words
                .as_ref()
                .map(|w| format!(" · {w}"))
                .unwrap_or_default(),
        ) + &queued
            .map(|q| format!(" · queued {} before", fmt_secs(q)))
            .unwrap_or_default(),
        label,
        text_x: round1(x + LABEL_PAD),
        text_y: round1(y + TL_BAR_H / 2.0 + 4.0),
        mark,
        queue,
    }
}
