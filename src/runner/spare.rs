//! A spare worker slot for runs of very short scripts. Between two of its scripts a
//! slot waits on a chain of hand-offs: the script's exit and the kernel's teardown of
//! it, the answer of the zygote that forked it, the runner's bookkeeping, the next
//! request and its fork. A script of a few milliseconds spends about as long in that
//! chain as it runs, and with one slot per core a core idles while its slot waits:
//! 1,000 `print(i)` scripts on 2 cores left them 12% idle (`perf`), and ran 17% faster
//! on 3 slots than on 2 (six runs of each in turn). Scripts of 60 ms gained nothing,
//! and the generated POMDP scripts (0.3 s and more) lost 4% on 3 slots: the spare
//! opens only once the scripts that ended show that the run's scripts are that short.
//!
//! Only where the plan allows it ([`crate::plan::Plan::spare`]: a local CPU run whose
//! `--jobs` was not given, with memory for it; one spare for every four cores). It is
//! judged on windows of ended scripts, opens once and stays open: a longer script after
//! it opened shares the cores one way more, as it would beside any other process.

use std::time::Duration;

/// The median wall time at or below which a window of scripts is short enough.
pub const SHORT: Duration = Duration::from_millis(25);

/// Scripts in a window, per planned slot: enough that one slow start does not decide.
const WINDOW_PER_SLOT: usize = 4;

/// The decision, fed with each ended script.
#[derive(Debug)]
pub struct Spare {
    /// Slots it may open (0: none, ever).
    may: usize,
    /// How many ended scripts make a window.
    window: usize,
    /// The current window's wall times, seconds.
    ended: Vec<f64>,
    /// Slots opened so far (0 or `may`).
    opened: usize,
}

/// Slots to open now, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Opening {
    pub slots: usize,
    /// The window's median wall time, seconds.
    pub median_s: f64,
}

impl Spare {
    /// For a run of `jobs` planned slots that may open `may` more.
    pub fn new(jobs: usize, may: usize) -> Spare {
        Spare {
            may,
            window: WINDOW_PER_SLOT * jobs.max(1),
            ended: Vec::new(),
            opened: 0,
        }
    }

    /// A script ended after `wall_s` seconds, with `waiting` scripts still to start:
    /// the slots to open now, if this ends a window of short scripts and enough are
    /// left to use them (at least a window's worth).
    pub fn ended(&mut self, wall_s: f64, waiting: usize) -> Option<Opening> {
        if self.may == 0 || self.opened > 0 {
            return None;
        }
        self.ended.push(wall_s);
        if self.ended.len() < self.window {
            return None;
        }
        let median_s = median(&mut self.ended);
        self.ended.clear();
        if median_s > SHORT.as_secs_f64() || waiting < self.window {
            return None;
        }
        self.opened = self.may;
        Some(Opening {
            slots: self.may,
            median_s,
        })
    }

    /// Slots opened so far.
    pub fn opened(&self) -> usize {
        self.opened
    }
}

/// The median of `values` (the mean of the middle two of an even count); sorts them.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: f64 = 0.010;
    const SLOW: f64 = 0.300;

    #[test]
    fn a_window_of_short_scripts_opens_the_spare_once() {
        let mut s = Spare::new(2, 1);
        for _ in 0..7 {
            assert_eq!(s.ended(FAST, 100), None, "not before the window is full");
        }
        let opened = s
            .ended(FAST, 100)
            .expect("the eighth script ends the window");
        assert_eq!(opened.slots, 1);
        assert!((opened.median_s - FAST).abs() < 1e-9);
        assert_eq!(s.opened(), 1);
        for _ in 0..20 {
            assert_eq!(s.ended(FAST, 100), None, "opened once only");
        }
    }

    #[test]
    fn long_scripts_never_open_it_and_a_later_short_window_does() {
        let mut s = Spare::new(2, 1);
        for _ in 0..16 {
            assert_eq!(s.ended(SLOW, 100), None);
        }
        // The median decides: three slow ones in a window of eight short ones do not.
        let mut last = None;
        for i in 0..8 {
            last = s.ended(if i % 3 == 0 { SLOW } else { FAST }, 100);
        }
        assert!(last.is_some(), "a window whose median is short opens it");
        // Just above the line, nothing opens.
        let mut s = Spare::new(1, 1);
        let above = SHORT.as_secs_f64() + 0.001;
        assert!((0..40).all(|_| s.ended(above, 100).is_none()));
    }

    #[test]
    fn no_spare_without_leave_or_without_scripts_left_to_use_it() {
        let mut none = Spare::new(2, 0);
        assert!((0..40).all(|_| none.ended(FAST, 100).is_none()));
        let mut ending = Spare::new(2, 1);
        // Fewer scripts waiting than a window: the run is nearly over.
        assert!((0..40).all(|_| ending.ended(FAST, 7).is_none()));
        assert_eq!(ending.opened(), 0);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    }
}
