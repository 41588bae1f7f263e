//! When a script's proportional set sizes are read again. Reading them walks every
//! page table entry of the tree's processes: 1 ms for a fresh fork of the zygote, 4 to
//! 8 ms of the runner's CPU for a jax script holding 200 to 300 MiB (measured), and
//! while it walks, the script's own changes to its mappings wait. On two cores busy
//! with warm scripts a read every tick cost the scripts 5 to 8% of a run's wall time
//! (measured: `bench/README.md`, seventeenth pass).
//!
//! Resident sizes (`statm`, 14 µs) are read every tick; the walk comes only where it
//! can find what they cannot show:
//! - the first tick a script's memory is read (its baseline);
//! - a rise of the resident size past the highest seen at a read by more than
//!   [`RISE_SHARE`] of the last figure (a new page counts in both sizes alike, so the
//!   figure cannot have grown by more than that unseen);
//! - a tree of several processes (whose steady rule needs reads in a row);
//! - a resident size past the watchdog's limit;
//! - otherwise once a pause [`PAUSE_PER_READ`] times the last read's own CPU time has
//!   passed (2% of a core), at least half a second and at most a second: what a
//!   resident size cannot see, the zygote's pages a script copies on write and its
//!   share of what a sibling that ended held.
//!
//! What the pause leaves unread at the end of a script, its own process reads as it
//! exits: the telemetry shim puts its `Pss` in its report (`exit_pss_kb`), and
//! [`super::tree::TreeSampler::count_exit`] takes it into the peak. Read only at
//! ticks, a short warm script's figure fell by up to a quarter (measured); with its
//! exit's reading it is as high as at one read a tick, or higher.

use std::time::{Duration, Instant};

/// The share of the last figure by which the resident size must rise past its
/// highest at a read before it is read again at once: an eighth.
const RISE_SHARE: u64 = 8;

/// The pause after a read, as a multiple of that read's CPU time.
const PAUSE_PER_READ: u32 = 50;

/// The longest pause: a copy-on-write rise shows within a second however costly the
/// read.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The shortest: a cheap read (a young fork's) does not bring back a read every tick,
/// which is what the scripts' wall time pays for, more than the runner's CPU.
const SHORTEST_PAUSE: Duration = Duration::from_millis(500);

/// What decides the next proportional read of one attempt's tree.
#[derive(Debug, Default)]
pub struct Pace {
    /// When the last read was taken.
    last: Option<Instant>,
    /// How long after it the next one is due whatever else happens.
    pause: Duration,
    /// The highest resident size (summed over the tree) seen at a read: one that
    /// falls and rises again to it is no rise.
    resident_high: u64,
    /// The rise past `resident_high` that reads at once: [`RISE_SHARE`] of the last
    /// figure read.
    rise: u64,
}

/// What the tree looks like at this tick, for [`Pace::due`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub now: Instant,
    /// The tree's resident sizes summed (the runner's plumbing left out), bytes.
    pub resident: u64,
    /// Its processes (the plumbing left out).
    pub processes: usize,
    /// Whether the runner's watchdog holds the tree to a limit that the resident
    /// size plus the scratch, or the last read plus the scratch, passes.
    pub over_limit: bool,
}

impl Pace {
    /// Whether the proportional sizes are to be read at `tick`.
    pub fn due(&self, tick: Tick) -> bool {
        let Some(last) = self.last else {
            return true;
        };
        tick.processes > 1
            || tick.over_limit
            || tick.resident > self.resident_high.saturating_add(self.rise)
            || tick.now.saturating_duration_since(last) >= self.pause
    }

    /// Notes a read taken at `tick` that found `figure` bytes and cost `cpu` of the
    /// runner's time.
    pub fn read(&mut self, tick: Tick, figure: u64, cpu: Duration) {
        self.last = Some(tick.now);
        self.pause = (cpu * PAUSE_PER_READ).clamp(SHORTEST_PAUSE, LONGEST_PAUSE);
        self.resident_high = self.resident_high.max(tick.resident);
        self.rise = figure / RISE_SHARE;
    }
}

/// The CPU time this thread has used: a read's own cost, whatever else runs.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn tick(at: Instant, ms: u64, resident_mib: u64) -> Tick {
        Tick {
            now: at + Duration::from_millis(ms),
            resident: resident_mib * MIB,
            processes: 1,
            over_limit: false,
        }
    }

    /// The first tick reads; then a flat tree waits out a pause 50 times the read's
    /// CPU time, and one whose resident size rises past the highest seen at a read by
    /// more than an eighth of the figure reads at once; by that eighth or less, not.
    #[test]
    fn a_flat_tree_waits_out_the_pause_and_a_growing_one_reads_at_once() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert!(pace.due(tick(t0, 0, 200)));
        // 200 MiB resident, a figure of 80 MiB: a rise of 10 MiB is the boundary.
        pace.read(tick(t0, 0, 200), 80 * MIB, Duration::from_millis(14)); // pause 700 ms
        assert!(!pace.due(tick(t0, 100, 200)));
        assert!(!pace.due(tick(t0, 699, 200)));
        assert!(pace.due(tick(t0, 700, 200)));
        assert!(!pace.due(tick(t0, 100, 210)), "a rise of an eighth waits");
        assert!(pace.due(tick(t0, 100, 211)), "a rise past an eighth reads");
        pace.read(tick(t0, 100, 211), 88 * MIB, Duration::from_millis(4));
        // Down and back up to where it was: no rise.
        assert!(!pace.due(tick(t0, 200, 150)));
        assert!(!pace.due(tick(t0, 250, 211)));
        assert!(pace.due(tick(t0, 250, 223)), "11 MiB is the new eighth");
    }

    /// A cheap read (a young fork's) still pauses half a second: the ticks between
    /// that show no rise past the eighth are left unread.
    #[test]
    fn a_cheap_read_pauses_half_a_second() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 100, 150), 50 * MIB, Duration::from_millis(1));
        for ms in [200, 300, 400, 599] {
            assert!(!pace.due(tick(t0, ms, 156)), "at {ms} ms");
        }
        assert!(pace.due(tick(t0, 600, 156)));
    }

    /// A costly read pauses at most a second.
    #[test]
    fn the_pause_follows_the_reads_cost_up_to_a_second() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0, 100), 40 * MIB, Duration::from_millis(100));
        assert!(!pace.due(tick(t0, 999, 100)));
        assert!(pace.due(tick(t0, 1000, 100)));
        pace.read(tick(t0, 1000, 100), 40 * MIB, Duration::from_millis(16)); // 800 ms
        assert!(!pace.due(tick(t0, 1799, 100)));
        assert!(pace.due(tick(t0, 1800, 100)));
    }

    /// A tree of several processes reads every tick (its steady rule needs reads in
    /// a row), and so does one past the watchdog's limit.
    #[test]
    fn several_processes_or_a_limit_passed_read_every_tick() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0, 500), 100 * MIB, Duration::from_millis(20));
        let several = Tick {
            processes: 3,
            ..tick(t0, 100, 500)
        };
        assert!(pace.due(several));
        let over = Tick {
            over_limit: true,
            ..tick(t0, 100, 500)
        };
        assert!(pace.due(over));
        assert!(!pace.due(tick(t0, 100, 500)));
    }

    /// Busy for 50 ms of wall time: this thread's CPU time moves, by no more than
    /// the wall time (a clock that did not move, or counted the process, would fail;
    /// the loop ends whatever the clock does).
    #[test]
    fn this_threads_cpu_time_moves_with_work() {
        let (before, wall) = (thread_cpu(), Instant::now());
        let mut x = 0u64;
        while wall.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let used = thread_cpu().saturating_sub(before);
        assert!(x > 0 && used > Duration::ZERO, "{used:?}");
        assert!(
            used <= wall.elapsed() + Duration::from_millis(5),
            "{used:?}"
        );
    }
}
