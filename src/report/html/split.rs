//! The table's "where the time went" cell: a small stacked bar of an attempt's
//! start-up, `import jax`, backend initialisation, compilation and the script's own
//! work, each part as wide as its share, with the figures in its tooltip. One line
//! per row at any width, where the figures as text wrapped.

use serde::Serialize;

use super::fmt_secs;
use crate::model::TimeBreakdown;

/// The bar's width and height, in pixels.
const WIDTH: f64 = 100.0;
const HEIGHT: f64 = 10.0;

/// One cell's bar.
#[derive(Debug, Serialize)]
pub(super) struct TimeBar {
    pub width: f64,
    pub height: f64,
    /// The parts with any time, in the order it was spent.
    pub parts: Vec<Part>,
    /// Every part's figures: `start 0.10 s · import 0.80 s · …`.
    pub title: String,
}

/// One part of the bar.
#[derive(Debug, Serialize)]
pub(super) struct Part {
    /// `start`, `import`, `init`, `compile` or `script`: its colour.
    pub what: &'static str,
    pub x: f64,
    pub width: f64,
}

/// The bar of a breakdown.
pub(super) fn time_bar(b: &TimeBreakdown) -> TimeBar {
    let figures = [
        ("start", b.startup_s),
        ("import", b.jax_import_s),
        ("init", b.backend_init_s),
        ("compile", b.compile_s),
        ("script", b.script_s),
    ];
    let total: f64 = figures.iter().map(|(_, s)| s.max(0.0)).sum();
    let mut parts = Vec::new();
    let mut x = 0.0;
    for (what, s) in figures {
        let width = if total > 0.0 {
            s.max(0.0) / total * WIDTH
        } else {
            0.0
        };
        if width > 0.0 {
            parts.push(Part {
                what,
                x: round1(x),
                width: round1(width).max(0.5),
            });
        }
        x += width;
    }
    let title = figures
        .iter()
        .map(|(what, s)| format!("{what} {}", fmt_secs(*s)))
        .collect::<Vec<_>>()
        .join(" · ");
    TimeBar {
        width: WIDTH,
        height: HEIGHT,
        parts,
        title,
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_share_the_width_and_the_title_gives_the_figures() {
        let b = TimeBreakdown {
            startup_s: 0.0,
            jax_import_s: 1.0,
            backend_init_s: 0.0,
            compile_s: 1.0,
            script_s: 2.0,
        };
        let bar = time_bar(&b);
        let widths: Vec<(&str, f64, f64)> =
            bar.parts.iter().map(|p| (p.what, p.x, p.width)).collect();
        assert_eq!(
            widths,
            [
                ("import", 0.0, 25.0),
                ("compile", 25.0, 25.0),
                ("script", 50.0, 50.0)
            ]
        );
        assert_eq!(
            bar.title,
            "start 0.00 s · import 1.00 s · init 0.00 s · compile 1.00 s · script 2.00 s"
        );
    }

    #[test]
    fn no_time_draws_no_part() {
        assert!(time_bar(&TimeBreakdown::default()).parts.is_empty());
    }
}
