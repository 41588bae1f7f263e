//! The process tree of a running script and its memory as the kernel counts it (the
//! attempt's cgroup where it has one, else its processes' proportional set sizes), and
//! what its scratch holds (see `scratch.rs`). Only the tree's own PIDs are read, so
//! sampling costs the same on a busy host as on an idle one.

use std::sync::Arc;

use super::limits::AttemptCgroup;
use super::pace::{thread_cpu, Pace, Tick};
use super::scratch::{Held, ScratchGauge};
use crate::model::MemorySource;
use proc::{
    cpu_ticks, proc_dir, process_memory, resident_pages, resident_size, statm_sizes, threads,
};

/// A cap on the tree walked, so a fork bomb cannot make sampling itself expensive.
const MAX_TREE: usize = 4096;

/// PIDs of `root` and its live descendants, read from `/proc/<pid>/task/*/children`.
pub fn tree_pids(root: u32) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() && out.len() < MAX_TREE {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out.truncate(MAX_TREE);
    out
}

/// Samples a tree's memory and its scratch, and keeps the peak.
pub struct TreeSampler {
    /// The sample with the highest total (memory and scratch).
    pub peak: Held,
    /// What the peak sample's memory counts.
    pub peak_source: MemorySource,
    /// The last samples as read (up to [`STEADY`] before this one), for the next
    /// one's steadiness.
    previous: std::collections::VecDeque<Held>,
    /// The attempt's cgroup: where it has a memory controller, its charge is the
    /// figure.
    pub cgroup: Option<Arc<AttemptCgroup>>,
    /// The script's scratch, when it has one to measure.
    pub scratch: Option<ScratchGauge>,
    /// Every PID seen in the tree (bounded), for finding leftovers after exit.
    pub seen: Vec<u32>,
    /// Processes in the tree at the last sample.
    pub last_count: usize,
    /// Their threads, all told (a process whose `stat` could not be read counts as
    /// one): what a pids cgroup counts, and so what the `--max-procs` watchdog holds
    /// to where there is none.
    pub last_tasks: usize,
    /// Their PIDs.
    pub last_pids: Vec<u32>,
    /// Those of them whose main thread alone has exited, with a thread that lives: the
    /// process's memory and files are read through it (`/proc/<pid>` reads as a
    /// zombie's, nothing held, nothing open).
    headless: Vec<(u32, u32)>,
    /// Whether any process of the tree was seen holding a GPU device open, and
    /// whether anyone looked (see [`TreeSampler::look_for_gpu`]).
    pub gpu_opened: bool,
    pub gpu_looked: bool,
    /// A process of the runner's own in the tree (a warm sandbox's namespace init, a
    /// fork of the zygote): its pages are the zygote's, not the script's memory.
    pub plumbing: Option<u32>,
    /// Whether any sample read the tree's memory.
    pub measured: bool,
    /// Last (utime, stime) clock ticks seen per PID: a floor for CPU time where
    /// `wait4` cannot see the tree (inside a sandbox it only sees bwrap).
    cpu_ticks: std::collections::HashMap<u32, (u64, u64)>,
    /// When the proportional sizes are read again (see `pace.rs`), and what the
    /// last read found.
    pace: Pace,
    last_read: (u64, MemorySource),
    /// The memory limit the runner's watchdog holds the tree to, if any: a resident
    /// size past it has the proportional sizes read at once.
    pub watch_limit: Option<u64>,
    /// The resident sizes of the last sample's processes (the plumbing left out),
    /// summed, bytes: read with their `stat` lines, as `statm` gives them.
    last_resident: u64,
    /// The anonymous pages at the last proportional read: what the tree added since
    /// counts on top of that read's figure (see `pace.rs`).
    anonymous_at_read: u64,
    /// The processes that read counted (the plumbing left out).
    read_pids: Vec<u32>,
    /// The highest such sum seen: a proportional size is never above it.
    resident_high: u64,
    /// Run right after each walk: a test's stand-in for the runner's thread being
    /// put off the CPU there while the script goes on.
    #[cfg(test)]
    after_walk: Option<Box<dyn FnMut() + Send>>,
}

impl Default for TreeSampler {
    fn default() -> Self {
        TreeSampler {
            peak: Held::default(),
            peak_source: MemorySource::Pss,
            previous: std::collections::VecDeque::new(),
            cgroup: None,
            scratch: None,
            seen: Vec::new(),
            last_count: 0,
            last_tasks: 0,
            last_pids: Vec::new(),
            headless: Vec::new(),
            plumbing: None,
            measured: false,
            gpu_opened: false,
            gpu_looked: false,
            cpu_ticks: std::collections::HashMap::new(),
            pace: Pace::default(),
            last_read: (0, MemorySource::Pss),
            watch_limit: None,
            last_resident: 0,
            anonymous_at_read: 0,
            read_pids: Vec::new(),
            resident_high: 0,
            #[cfg(test)]
            after_walk: None,
        }
    }
}

impl TreeSampler {
    /// Reads the tree under `root` and returns its memory and what its scratch holds,
    /// in bytes.
    pub fn sample(&mut self, root: u32) -> Held {
        self.observe(root);
        self.measured = true;
        self.memory()
    }

    /// Reads the tree under `root` (its processes and their CPU time) without its
    /// memory: a script just forked from the zygote holds only the zygote's pages.
    pub fn observe(&mut self, root: u32) {
        let raw = tree_pids(root);
        self.last_count = raw.len();
        self.last_tasks = 0;
        self.headless.clear();
        let mut resident = 0;
        for pid in &raw {
            let Some(fields) = super::sys::stat_fields(*pid) else {
                self.last_tasks += 1;
                continue;
            };
            self.last_tasks += threads(&fields);
            if let Some(t) = cpu_ticks(&fields) {
                if self.cpu_ticks.len() < MAX_TREE || self.cpu_ticks.contains_key(pid) {
                    self.cpu_ticks.insert(*pid, t);
                }
            }
            let headless = (fields.first().is_some_and(|state| state == "Z"))
                .then(|| super::sys::live_thread(*pid))
                .flatten();
            if let Some(tid) = headless {
                self.headless.push((*pid, tid));
            }
            if Some(*pid) != self.plumbing {
                resident += match headless {
                    // A zombie leader's `stat` shows nothing resident; its live
                    // thread's `statm` shows what the process holds.
                    Some(tid) => resident_size(&format!("/proc/{pid}/task/{tid}")).unwrap_or(0),
                    None => resident_pages(&fields) * rustix::param::page_size() as u64,
                };
            }
        }
        self.last_resident = resident;
        self.resident_high = self.resident_high.max(resident);
        for pid in &raw {
            if self.seen.len() < MAX_TREE && !self.seen.contains(pid) {
                self.seen.push(*pid);
            }
        }
        self.last_pids = raw;
    }

    /// The memory and scratch of the tree [`TreeSampler::observe`] last read.
    fn memory(&mut self) -> Held {
        let scratch = match self.scratch.as_mut() {
            Some(g) => {
                let headless = &self.headless;
                g.measure(&self.last_pids, |pid| proc_dir(headless, pid))
            }
            None => 0,
        };
        let charged = self.cgroup.as_ref().and_then(|c| c.memory_current());
        let (memory, source) = match charged {
            // A scratch mounted in the script's view is charged to the cgroup too:
            // counted once, as the scratch.
            Some(bytes) => {
                let in_charge =
                    (self.scratch.as_ref()).is_some_and(|g| g.place().charged_to_cgroup());
                let memory = match in_charge {
                    true => bytes.saturating_sub(scratch),
                    false => bytes,
                };
                (memory, MemorySource::Cgroup)
            }
            None => self.paced_processes_memory(scratch),
        };
        let now = Held {
            rss: memory,
            scratch,
        };
        // Proportional sizes are read one process after another: while the tree's
        // processes map the same pages (children of a fork touching a shared block),
        // those read first count a page at a share the later ones already split, and
        // the sum runs over what the tree holds. Where several processes were read,
        // the figure kept (the peak, the watchdog's) is the lowest of three samples
        // in a row, so a count that rides on that skew while the pages are being
        // mapped is not taken for memory held. One process has no one to skew with:
        // its figure stands as read (a short script's growth is not cut off).
        let counted = self.own_pids().count();
        let held = match source {
            MemorySource::Cgroup => now,
            _ if counted <= 1 => now,
            _ => steady(&self.previous, now),
        };
        if self.previous.len() == STEADY - 1 {
            self.previous.pop_front();
        }
        self.previous.push_back(now);
        if held.total() > self.peak.total() {
            self.peak = held;
            self.peak_source = source;
        }
        held
    }

    /// The last sample's processes, the runner's plumbing left out.
    fn own_pids(&self) -> impl Iterator<Item = u32> + '_ {
        (self.last_pids.iter().copied()).filter(|p| Some(*p) != self.plumbing)
    }

    /// See [`proc_dir`].
    fn proc_dir(&self, pid: u32) -> String {
        proc_dir(&self.headless, pid)
    }

    /// [`TreeSampler::processes_memory`] where [`Pace`] says a read is due, else
    /// what the last read found plus the anonymous pages added since: a page a lone
    /// process faults in anonymously is its own and counts whole in its proportional
    /// size, so the sum is the figure less only what a walk alone sees (see
    /// `pace.rs`).
    fn paced_processes_memory(&mut self, scratch: u64) -> (u64, MemorySource) {
        let resident = self.last_resident;
        let tick = Tick {
            now: std::time::Instant::now(),
            processes: self.own_pids().count(),
            changed: !self.own_pids().eq(self.read_pids.iter().copied()),
            // Past the limit by what the tree holds now, or by the figure the watchdog
            // would otherwise be given (the last read, which a process gone since
            // still counts in): either way the watchdog decides on a fresh read.
            over_limit: (self.watch_limit)
                .is_some_and(|l| resident.max(self.last_read.0).saturating_add(scratch) > l),
        };
        if !self.pace.due(tick) {
            // Read only here, where the tree is one process: one `statm` a tick.
            let added = self.anonymous_now().saturating_sub(self.anonymous_at_read);
            return (self.last_read.0.saturating_add(added), self.last_read.1);
        }
        let before = thread_cpu();
        let (memory, source, anonymous) = self.processes_memory();
        let cpu = thread_cpu().saturating_sub(before);
        #[cfg(test)]
        if let Some(hook) = self.after_walk.as_mut() {
            hook();
        }
        self.last_read = (memory, source);
        // The reference is the walk's own count of anonymous pages, not one taken after
        // it: the pages the walk found are in its figure whatever the process did
        // since, so pages faulted in while it ran count once, and so does a block let
        // go and taken again before the runner looks again (its thread put off the
        // CPU: a count from `statm` after the walk counted such a block twice).
        self.anonymous_at_read = anonymous;
        self.read_pids = self.own_pids().collect();
        self.pace.read(tick, cpu);
        self.last_read
    }

    /// The anonymous pages of the last sample's processes now (the plumbing left out),
    /// bytes, from their `statm` (resident less shared).
    fn anonymous_now(&self) -> u64 {
        (self.own_pids())
            .filter_map(|p| statm_sizes(&self.proc_dir(p)))
            .map(|(_, anonymous)| anonymous)
            .sum()
    }

    /// Takes the script's own proportional size as it exited (`pss`, bytes, from its
    /// telemetry report: see `pace.rs`) into the peak, with what the scratch held at
    /// the last sample, where the kernel's own count (a memory cgroup) is not the
    /// figure. The report is the script's to write: a figure above every resident
    /// size the kernel showed for the tree, plus `added` (the kernel's peak resident
    /// size for the script, less what it was forked with), is no proportional size
    /// and is not taken.
    pub fn count_exit(&mut self, pss: u64, added: u64) {
        if self.cgroup.as_ref().is_some_and(|c| c.enforces_memory())
            || pss == 0
            || pss > self.resident_high.saturating_add(added)
        {
            return;
        }
        let held = Held {
            rss: pss,
            scratch: self.previous.back().map_or(0, |h| h.scratch),
        };
        self.measured = true;
        if held.total() > self.peak.total() {
            self.peak = held;
            self.peak_source = MemorySource::Pss;
        }
    }

    /// The last sample's processes' memory summed (the runner's plumbing left out):
    /// proportional set sizes, or resident sizes where one could not be read; with
    /// their anonymous pages as the same reads found them.
    fn processes_memory(&self) -> (u64, MemorySource, u64) {
        let mut all_proportional = true;
        let (mut total, mut anonymous) = (0, 0);
        for read in self
            .own_pids()
            .filter_map(|p| process_memory(&self.proc_dir(p)))
        {
            all_proportional &= read.proportional;
            total += read.bytes;
            anonymous += read.anonymous;
        }
        match all_proportional {
            true => (total, MemorySource::Pss, anonymous),
            false => (total, MemorySource::Rss, anonymous),
        }
    }
}

/// Samples in a row a rise must show in to count (at 100 ms apart).
const STEADY: usize = 3;

/// The figure kept of `now`: no more than the lowest of the samples before it (the
/// last `STEADY - 1`), so a rise counts once that many samples in a row show it.
fn steady(before: &std::collections::VecDeque<Held>, now: Held) -> Held {
    match before.iter().min_by_key(|b| b.total()) {
        Some(b) if b.total() < now.total() => Held {
            rss: b.rss.min(now.rss),
            scratch: b.scratch.min(now.scratch),
        },
        _ => now,
    }
}

impl TreeSampler {
    /// CPU seconds (user, system) summed over every process sampled.
    pub fn cpu_seconds(&self) -> (f64, f64) {
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        let (u, s) = self
            .cpu_ticks
            .values()
            .fold((0u64, 0u64), |(u, s), (a, b)| (u + a, s + b));
        (u as f64 / hz, s as f64 / hz)
    }
}

mod gpu;
mod proc;
#[cfg(test)]
mod tests;
