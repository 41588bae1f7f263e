//! Live progress on a terminal: an overall bar (done/total, failures, ETA) and one
//! line per running script (name, device, elapsed, RSS). Off a terminal the log lines
//! are the progress, and nothing here is used.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;

/// The display, shared with the log writer so log lines print above the bars.
static DISPLAY: OnceLock<MultiProgress> = OnceLock::new();

/// Prints a log line above the bars when they are showing; false when they are not.
pub fn print_above_bars(line: &str) -> bool {
    match DISPLAY.get() {
        Some(mp) => {
            let _ = mp.println(line.trim_end());
            true
        }
        None => false,
    }
}

/// Wipes the bars from the terminal, at a stop: the `^C` the terminal echoes moves
/// the cursor under the display, which would otherwise leave its last frame frozen
/// above what follows. Bars still running are drawn again at their next tick.
pub fn clear_display() {
    if let Some(mp) = DISPLAY.get() {
        let _ = mp.clear();
    }
}

/// The live display.
pub struct ProgressReporter {
    mp: MultiProgress,
    overall: ProgressBar,
    running: HashMap<String, ProgressBar>,
    /// Final statuses so far, for the bar's message.
    outcomes: crate::model::Outcomes,
    /// When the run started, for the estimate of what is left.
    started: std::time::Instant,
    /// The run's expected wall seconds from the history, if it knew.
    expected_s: Option<f64>,
    /// Scripts whose Slurm job waits in the queue (`--backend slurm`).
    queued: std::collections::HashSet<String>,
}

impl ProgressReporter {
    /// Draws to stderr; call only when stderr is a terminal.
    pub fn new() -> Self {
        let mp = DISPLAY
            .get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8)))
            .clone();
        // Not drawn until the run says how many scripts it has: no full `0/0` bar.
        let overall = ProgressBar::hidden();
        overall.set_style(
            ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} scripts  {msg}")
                .expect("valid template")
                .progress_chars("█▉░"),
        );
        ProgressReporter {
            mp,
            overall,
            running: HashMap::new(),
            outcomes: Default::default(),
            started: std::time::Instant::now(),
            expected_s: None,
            queued: Default::default(),
        }
    }

    /// The bar's message: problems so far, the queue (a cluster's), the estimate.
    fn overall_message(&self) -> String {
        let eta = eta(
            self.started.elapsed(),
            self.overall.position(),
            self.overall.length().unwrap_or(0),
            self.expected_s,
        );
        let queue = queue_counts(self.queued.len(), self.running.len());
        [self.outcomes.problems(), queue, format!("ETA {eta}")]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("  ")
    }
}

/// `2 queued, 3 running` while a cluster's jobs wait; nothing when none does.
fn queue_counts(queued: usize, started: usize) -> String {
    match queued {
        0 => String::new(),
        q => format!("{q} queued, {} running", started.saturating_sub(q)),
    }
}

/// What is left: at the pace so far once a script has finished; before that, what the
/// history expects less the time gone, or unknown (`—`), never the `0s` a rate of
/// zero would give.
fn eta(elapsed: Duration, done: u64, total: u64, expected_s: Option<f64>) -> String {
    let left = match (done, expected_s) {
        (0, Some(expected)) => (expected - elapsed.as_secs_f64()).max(1.0),
        (0, None) => return "—".into(),
        _ => elapsed.as_secs_f64() / done as f64 * total.saturating_sub(done) as f64,
    };
    match left.round() as u64 {
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

impl Default for ProgressReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl Reporter for ProgressReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::RunStarted {
                total, expected_s, ..
            } => {
                self.expected_s = *expected_s;
                self.overall.set_length(*total as u64);
                self.overall
                    .set_message(format!("ETA {}", eta(Duration::ZERO, 0, 1, *expected_s)));
                self.overall = self.mp.add(self.overall.clone());
                self.overall.enable_steady_tick(Duration::from_millis(250));
                self.started = std::time::Instant::now();
            }
            RunEvent::ScriptStarted {
                id,
                device,
                attempt,
                ..
            } => {
                let bar = self.running.remove(id).unwrap_or_else(|| {
                    self.mp
                        .insert_before(&self.overall, ProgressBar::new_spinner())
                });
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix:<28} {elapsed:>4}  {msg}")
                        .expect("valid template"),
                );
                bar.set_prefix(format!(
                    "{id} ({}{})",
                    device.as_str(),
                    if *attempt > 1 {
                        format!(", try {attempt}")
                    } else {
                        String::new()
                    }
                ));
                bar.enable_steady_tick(Duration::from_millis(200));
                self.running.insert(id.clone(), bar);
            }
            RunEvent::JobQueued { id, job_id, .. } => {
                self.queued.insert(id.clone());
                if let Some(bar) = self.running.get(id) {
                    bar.set_message(format!("queued (Slurm job {job_id})"));
                }
                self.overall.set_message(self.overall_message());
            }
            RunEvent::JobRunning { id, .. } => {
                self.queued.remove(id);
                if let Some(bar) = self.running.get(id) {
                    bar.set_message("running");
                }
                self.overall.set_message(self.overall_message());
            }
            RunEvent::Sample { id, rss_mb, .. } => {
                if let Some(bar) = self.running.get(id) {
                    bar.set_message(format!("{rss_mb:.0} MiB"));
                }
            }
            // A kept success did not run: the bar counts what this run starts.
            RunEvent::ScriptFinished { result } if result.resumed_from.is_some() => {}
            RunEvent::ScriptFinished { result } => {
                if let Some(bar) = self.running.remove(&result.id) {
                    bar.finish_and_clear();
                    self.mp.remove(&bar);
                }
                self.queued.remove(&result.id);
                self.outcomes.add(result.status);
                self.overall.inc(1);
                self.overall.set_message(self.overall_message());
            }
            RunEvent::RunFinished { .. } => {
                for (_, bar) in self.running.drain() {
                    bar.finish_and_clear();
                }
                self.overall.finish_and_clear();
                let _ = self.mp.clear();
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_history_the_estimate_is_unknown_until_a_script_finishes() {
        assert_eq!(eta(Duration::from_secs(5), 0, 10, None), "—");
        assert_eq!(eta(Duration::from_secs(10), 2, 10, None), "40s");
        assert_eq!(eta(Duration::from_secs(60), 1, 3, None), "2m00s");
        assert_eq!(eta(Duration::from_secs(10), 10, 10, None), "0s");
    }

    #[test]
    fn a_clusters_queue_is_counted_apart_from_what_runs() {
        assert_eq!(queue_counts(0, 4), "");
        assert_eq!(queue_counts(3, 5), "3 queued, 2 running");
        assert_eq!(queue_counts(2, 2), "2 queued, 0 running");
    }

    #[test]
    fn before_the_first_script_ends_the_history_gives_the_estimate() {
        assert_eq!(eta(Duration::from_secs(20), 0, 10, Some(100.0)), "1m20s");
        // Past the expectation: still running, never "0s".
        assert_eq!(eta(Duration::from_secs(200), 0, 10, Some(100.0)), "1s");
        // Once a script has finished, the pace seen wins.
        assert_eq!(eta(Duration::from_secs(10), 5, 10, Some(1000.0)), "10s");
    }
}
