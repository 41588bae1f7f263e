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
use crate::model::Status;

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

/// The live display.
pub struct ProgressReporter {
    mp: MultiProgress,
    overall: ProgressBar,
    running: HashMap<String, ProgressBar>,
    failed: u64,
}

impl ProgressReporter {
    /// Draws to stderr; call only when stderr is a terminal.
    pub fn new() -> Self {
        let mp = DISPLAY
            .get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8)))
            .clone();
        let overall = mp.add(ProgressBar::new(0));
        overall.set_style(
            ProgressStyle::with_template(
                "{bar:30.cyan/blue} {pos}/{len} scripts  {msg}  ETA {eta}",
            )
            .expect("valid template")
            .progress_chars("█▉░"),
        );
        overall.enable_steady_tick(Duration::from_millis(250));
        ProgressReporter {
            mp,
            overall,
            running: HashMap::new(),
            failed: 0,
        }
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
            RunEvent::RunStarted { total, .. } => self.overall.set_length(*total as u64),
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
            RunEvent::Sample { id, rss_mb, .. } => {
                if let Some(bar) = self.running.get(id) {
                    bar.set_message(format!("{rss_mb:.0} MiB"));
                }
            }
            RunEvent::ScriptFinished { result } => {
                if let Some(bar) = self.running.remove(&result.id) {
                    bar.finish_and_clear();
                    self.mp.remove(&bar);
                }
                if result.status != Status::Succeeded {
                    self.failed += 1;
                }
                self.overall.inc(1);
                self.overall.set_message(format!("{} failed", self.failed));
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
