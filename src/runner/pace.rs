//! When a script's proportional set sizes are read again. Reading them walks every
//! page table entry of the tree's processes: 1 ms for a fresh fork of the zygote, 4 to
//! 8 ms of the runner's CPU for a jax script holding 200 to 300 MiB (measured), 4 to
//! 8% of a core at one read a tick, for as long as the script runs.
//!
//! For its first [`EVERY_TICK_FOR`] a script is read every tick: a short script's
//! figure is its own. A generated POMDP script copies the zygote's pages on write
//! and sees its siblings end (its share of what they held grows) without any rise in
//! its resident size; read less often, its figure fell by up to a quarter (measured).
//! After that, resident sizes (`statm`, 14 µs) are read every tick and the walk comes
//! again only where it can find what they cannot show: a rise past every resident
//! size read so far, a tree of several processes (whose steady rule needs reads in a
//! row), a resident size past the watchdog's limit, or, for what a resident size
//! cannot see, once a pause 50 times the last read's own CPU time has passed (2% of
//! a core, at most a second).

use std::time::{Duration, Instant};

/// How long after its start a script is read every tick.
pub const EVERY_TICK_FOR: Duration = Duration::from_secs(3);

/// The pause after a read, as a multiple of that read's CPU time.
const PAUSE_PER_READ: u32 = 50;

/// The longest pause: a copy-on-write rise shows within a second however costly the
/// read.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

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
}

/// What the tree looks like at this tick, for [`Pace::due`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub now: Instant,
    /// The tree's resident sizes summed (the runner's plumbing left out), bytes.
    pub resident: u64,
    /// Its processes (the plumbing left out).
    pub processes: usize,
    /// How long the attempt has run.
    pub age: Duration,
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
        tick.age < EVERY_TICK_FOR
            || tick.processes > 1
            || tick.over_limit
            || tick.resident > self.resident_high
            || tick.now.saturating_duration_since(last) >= self.pause
    }

    /// Notes a read taken at `tick` that cost `cpu` of the runner's time.
    pub fn read(&mut self, tick: Tick, cpu: Duration) {
        self.last = Some(tick.now);
        self.pause = (cpu * PAUSE_PER_READ).min(LONGEST_PAUSE);
        self.resident_high = self.resident_high.max(tick.resident);
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
            age: EVERY_TICK_FOR + Duration::from_millis(ms),
            over_limit: false,
        }
    }

    /// A young script is read every tick, whatever its resident size does.
    #[test]
    fn a_script_is_read_every_tick_for_its_first_seconds() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        let young = |ms| Tick {
            age: Duration::from_millis(ms),
            ..tick(t0, ms, 100)
        };
        pace.read(young(100), Duration::from_millis(20));
        for ms in (200..EVERY_TICK_FOR.as_millis() as u64).step_by(100) {
            assert!(pace.due(young(ms)), "at {ms} ms");
            pace.read(young(ms), Duration::from_millis(20));
        }
        assert!(!pace.due(tick(t0, EVERY_TICK_FOR.as_millis() as u64, 100)));
    }

    /// The first tick reads; then a flat tree waits out a pause 50 times the read's
    /// CPU time, and one that grows past every resident size seen reads at once.
    #[test]
    fn a_flat_tree_waits_out_the_pause_and_a_growing_one_reads_at_once() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert!(pace.due(tick(t0, 0, 200)));
        pace.read(tick(t0, 0, 200), Duration::from_millis(4)); // pause 200 ms
        assert!(!pace.due(tick(t0, 100, 200)));
        assert!(!pace.due(tick(t0, 199, 200)));
        assert!(pace.due(tick(t0, 200, 200)));
        assert!(pace.due(tick(t0, 100, 201)), "a rise past 200 MiB reads");
        pace.read(tick(t0, 100, 201), Duration::from_millis(4));
        // Down and back up to where it was: no rise.
        assert!(!pace.due(tick(t0, 200, 150)));
        assert!(!pace.due(tick(t0, 250, 201)));
    }

    /// A costly read pauses at most a second; a cheap one not at all past a tick.
    #[test]
    fn the_pause_follows_the_reads_cost_up_to_a_second() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0, 100), Duration::from_millis(100));
        assert!(!pace.due(tick(t0, 999, 100)));
        assert!(pace.due(tick(t0, 1000, 100)));
        pace.read(tick(t0, 1000, 100), Duration::from_micros(500)); // pause 25 ms
        assert!(pace.due(tick(t0, 1100, 100)));
    }

    /// A tree of several processes reads every tick (its steady rule needs reads in
    /// a row), and so does one past the watchdog's limit.
    #[test]
    fn several_processes_or_a_limit_passed_read_every_tick() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0, 500), Duration::from_millis(20));
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
