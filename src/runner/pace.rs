//! When a script's proportional set sizes are read again. Reading them walks every
//! page table entry of the tree's processes: 1 ms for a fresh fork of the zygote, 4 to
//! 8 ms of the runner's CPU for a jax script holding 200 to 300 MiB (measured), and
//! while it walks, the script's own changes to its mappings wait. On two cores busy
//! with warm scripts a read every tick cost the scripts 5 to 8% of a run's wall time
//! (measured: `bench/README.md`, seventeenth pass), and the reads a rise brought on
//! at once still 1 to 3% (eighteenth pass).
//!
//! The walk comes only where nothing cheaper can stand for it:
//! - the first tick a script's memory is read (its baseline), and any tick whose
//!   processes are not those of the last read (a fork's pages are its parent's,
//!   shared, not pages it added: a warm sandbox's script appears under its
//!   namespace's init after the first read);
//! - a tree of several processes (whose steady rule needs reads in a row, and whose
//!   processes may share what any of them adds);
//! - a resident size past the watchdog's limit;
//! - otherwise once a pause [`PAUSE_PER_READ`] times the last read's own CPU time has
//!   passed (2% of a core), at least half a second and at most a second.
//!
//! Between reads the figure is the last read plus the anonymous pages the process
//! added since: `statm` (14 µs; resident less shared) read at each tick between
//! walks, less the walk's own count of them (`smaps_rollup`'s `Anonymous`, see
//! [`super::tree::TreeSampler`]). A page a lone process faults in anonymously is its
//! own, and counts whole in its proportional size, so a rise shows at the next tick,
//! to the page, without a walk. What that leaves out (file pages, which count a share;
//! the zygote's pages a script copies on write; the share of a sibling's pages that
//! grows as the sibling ends; pages given back, still counted as the last walk found
//! them) the next walk counts.
//!
//! What the pause leaves unread at the end of a script, its own process reads as it
//! exits: the telemetry shim puts its `Pss` in its report (`exit_pss_kb`), and
//! [`super::tree::TreeSampler::count_exit`] takes it into the peak.

use std::time::{Duration, Instant};

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
}

/// What the tree looks like at this tick, for [`Pace::due`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub now: Instant,
    /// Its processes (the plumbing left out).
    pub processes: usize,
    /// Whether they are other processes than at the last read.
    pub changed: bool,
    /// Whether the runner's watchdog holds the tree to a limit that the resident
    /// size plus the scratch, or the last figure plus the scratch, passes.
    pub over_limit: bool,
}

impl Pace {
    /// Whether the proportional sizes are to be read at `tick`.
    pub fn due(&self, tick: Tick) -> bool {
        let Some(last) = self.last else {
            return true;
        };
        tick.processes > 1
            || tick.changed
            || tick.over_limit
            || tick.now.saturating_duration_since(last) >= self.pause
    }

    /// Notes a read taken at `tick` that cost `cpu` of the runner's time.
    pub fn read(&mut self, tick: Tick, cpu: Duration) {
        self.last = Some(tick.now);
        self.pause = (cpu * PAUSE_PER_READ).clamp(SHORTEST_PAUSE, LONGEST_PAUSE);
    }

    /// Holds the next read off for `pause` whatever the last one cost: a test's
    /// samples then fall between reads however slow the machine.
    #[cfg(test)]
    pub fn hold_for(&mut self, pause: Duration) {
        self.pause = pause;
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

    fn tick(at: Instant, ms: u64) -> Tick {
        Tick {
            now: at + Duration::from_millis(ms),
            processes: 1,
            changed: false,
            over_limit: false,
        }
    }

    /// The first tick reads; then a lone process waits out a pause 50 times the
    /// read's CPU time, whatever its resident size does meanwhile (the anonymous
    /// pages it adds are counted without a walk: see tree.rs).
    #[test]
    fn a_lone_process_waits_out_the_pause() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert!(pace.due(tick(t0, 0)));
        pace.read(tick(t0, 0), Duration::from_millis(14)); // pause 700 ms
        assert!(!pace.due(tick(t0, 100)));
        assert!(!pace.due(tick(t0, 699)));
        assert!(pace.due(tick(t0, 700)));
    }

    /// A cheap read (a young fork's) still pauses half a second.
    #[test]
    fn a_cheap_read_pauses_half_a_second() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 100), Duration::from_millis(1));
        for ms in [200, 300, 400, 599] {
            assert!(!pace.due(tick(t0, ms)), "at {ms} ms");
        }
        assert!(pace.due(tick(t0, 600)));
    }

    /// A costly read pauses at most a second.
    #[test]
    fn the_pause_follows_the_reads_cost_up_to_a_second() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0), Duration::from_millis(100));
        assert!(!pace.due(tick(t0, 999)));
        assert!(pace.due(tick(t0, 1000)));
        pace.read(tick(t0, 1000), Duration::from_millis(16)); // 800 ms
        assert!(!pace.due(tick(t0, 1799)));
        assert!(pace.due(tick(t0, 1800)));
    }

    /// A tree of several processes reads every tick (its steady rule needs reads in
    /// a row), and so do one past the watchdog's limit and one whose process is not
    /// the one read last.
    #[test]
    fn several_processes_or_a_limit_passed_read_every_tick() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.read(tick(t0, 0), Duration::from_millis(20));
        let several = Tick {
            processes: 3,
            ..tick(t0, 100)
        };
        assert!(pace.due(several));
        let over = Tick {
            over_limit: true,
            ..tick(t0, 100)
        };
        assert!(pace.due(over));
        let another = Tick {
            changed: true,
            ..tick(t0, 100)
        };
        assert!(pace.due(another));
        assert!(!pace.due(tick(t0, 100)));
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
