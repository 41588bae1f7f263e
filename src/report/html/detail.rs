//! The data of the per-script view: what a click on a row or a timeline bar shows
//! beyond the row itself (each attempt, the reason). The page reads the row's own
//! cells for the rest, so nothing is written twice.

use serde::Serialize;

use super::svg::secs_between;
use super::{fmt_secs, Row};
use crate::report::escape;
use crate::report::record::ScriptRecord;

/// One attempt as the detail view lists it: number, slot, status, start after the
/// run's start, duration, and how it ended when it failed. An array, not an object:
/// a thousand scripts' worth of key names is weight the page need not carry.
type AttemptRow = (u32, usize, &'static str, String, String, Option<String>);

/// One table row's detail, in the order of the rows.
#[derive(Debug, Serialize)]
pub(super) struct Detail {
    /// The one-line reason (`exit code 3: ValueError: bad`); absent on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Each attempt, in order.
    attempts: Vec<AttemptRow>,
}

/// The detail of every row, by row index.
pub(super) fn details(
    rows: &[Row],
    by_id: &std::collections::HashMap<&str, &ScriptRecord>,
    origin: std::time::SystemTime,
) -> Vec<Detail> {
    rows.iter()
        .map(|r| match by_id.get(r.id.as_str()) {
            Some(f) => Detail {
                reason: f
                    .reason_line()
                    .or_else(|| f.carried.as_ref().map(|c| c.line()))
                    .map(|r| escape::line(&r).into_owned()),
                // A carried script's attempts are an earlier run's, not on this run's clock.
                attempts: f
                    .attempts
                    .iter()
                    .filter(|_| f.carried.is_none())
                    .map(|a| {
                        let start = a
                            .started_at
                            .map(|t| fmt_secs(secs_between(origin, t).max(0.0)))
                            .unwrap_or_else(|| "—".into());
                        (
                            a.number,
                            a.slot,
                            a.status.as_str(),
                            start,
                            fmt_secs(a.duration_s),
                            a.words.as_deref().map(|w| escape::line(w).into_owned()),
                        )
                    })
                    .collect(),
            },
            None => Detail {
                reason: None,
                attempts: Vec::new(),
            },
        })
        .collect()
}
