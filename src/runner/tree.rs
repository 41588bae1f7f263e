//! The process tree of a running script and its memory: resident, and what its scratch
//! holds (see `scratch.rs`). Only the tree's own PIDs are refreshed, so sampling costs
//! the same on a busy host as on an idle one.

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::scratch::{Held, ScratchGauge};

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

/// Samples a tree's total RSS and its scratch, and keeps the peak.
pub struct TreeSampler {
    system: System,
    /// The sample with the highest total (RSS and scratch).
    pub peak: Held,
    /// The script's scratch, when it has one to measure.
    pub scratch: Option<ScratchGauge>,
    /// Every PID seen in the tree (bounded), for finding leftovers after exit.
    pub seen: Vec<u32>,
    /// Processes in the tree at the last sample.
    pub last_count: usize,
    /// Their PIDs.
    pub last_pids: Vec<u32>,
    /// Whether any process of the tree was seen holding a GPU device open, and
    /// whether anyone looked (see [`TreeSampler::look_for_gpu`]).
    pub gpu_opened: bool,
    pub gpu_looked: bool,
    /// A process of the runner's own in the tree (a warm sandbox's namespace init, a
    /// fork of the zygote): its pages are the zygote's, not the script's memory.
    pub plumbing: Option<u32>,
    /// Last (utime, stime) clock ticks seen per PID: a floor for CPU time where
    /// `wait4` cannot see the tree (inside a sandbox it only sees bwrap).
    cpu_ticks: std::collections::HashMap<u32, (u64, u64)>,
}

impl Default for TreeSampler {
    fn default() -> Self {
        TreeSampler {
            system: System::new(),
            peak: Held::default(),
            scratch: None,
            seen: Vec::new(),
            last_count: 0,
            last_pids: Vec::new(),
            plumbing: None,
            gpu_opened: false,
            gpu_looked: false,
            cpu_ticks: std::collections::HashMap::new(),
        }
    }
}

impl TreeSampler {
    /// Refreshes the tree under `root` and returns its total RSS and what its scratch
    /// holds, in bytes.
    pub fn sample(&mut self, root: u32) -> Held {
        let raw = tree_pids(root);
        self.last_count = raw.len();
        for pid in &raw {
            if let Some(t) = cpu_ticks(*pid) {
                if self.cpu_ticks.len() < MAX_TREE || self.cpu_ticks.contains_key(pid) {
                    self.cpu_ticks.insert(*pid, t);
                }
            }
        }
        for pid in &raw {
            if self.seen.len() < MAX_TREE && !self.seen.contains(pid) {
                self.seen.push(*pid);
            }
        }
        let pids: Vec<Pid> = raw.iter().copied().map(Pid::from_u32).collect();
        self.last_pids = raw;
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&pids),
            true,
            ProcessRefreshKind::nothing().with_memory(),
        );
        let total: u64 = pids
            .iter()
            .filter(|p| Some(p.as_u32()) != self.plumbing)
            .filter_map(|p| self.system.process(*p))
            .map(|p| p.memory())
            .sum();
        let scratch = match self.scratch.as_mut() {
            Some(g) => g.measure(&self.last_pids),
            None => 0,
        };
        let held = Held {
            rss: total,
            scratch,
        };
        if held.total() > self.peak.total() {
            self.peak = held;
        }
        held
    }
}

impl TreeSampler {
    /// Looks through the open files of the tree's processes (the last sample's) for a
    /// GPU device node: the runner's own evidence that the script used a GPU, whatever
    /// its telemetry file says. Stops looking once one is seen.
    pub fn look_for_gpu(&mut self) {
        if self.gpu_opened || self.last_pids.is_empty() {
            return;
        }
        self.gpu_looked = true;
        self.gpu_opened = self.last_pids.iter().any(|p| holds_gpu_device(*p));
    }

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

/// NVIDIA's device nodes, and ROCm's.
const GPU_DEVICES: &[&str] = &["/dev/nvidia", "/dev/kfd", "/dev/dri/"];

fn holds_gpu_device(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let t = target.to_string_lossy();
            GPU_DEVICES.iter().any(|d| t.starts_with(d))
        })
    })
}

/// utime and stime of a process, in clock ticks, from `/proc/<pid>/stat`.
fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_grandchildren_and_sums_their_memory() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5 & wait"])
            .spawn()
            .unwrap();
        // Until the shell has started both sleeps, however loaded the machine.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut pids = tree_pids(child.id());
        while pids.len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            pids = tree_pids(child.id());
        }
        assert_eq!(pids.len(), 3, "{pids:?}");
        let mut sampler = TreeSampler::default();
        let held = sampler.sample(child.id());
        assert!(held.rss > 0 && held.scratch == 0 && sampler.peak == held);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
