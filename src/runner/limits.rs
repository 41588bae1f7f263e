//! `--max-procs` and `--memory-limit` enforced by the kernel: a pids cgroup per worker
//! slot, reused by its warm attempts (see `homes.rs`), or a cgroup per attempt
//! where the host lets the runner make one (cgroup v2, or v1's `pids` and `memory`
//! hierarchies), so a fork past the limit is refused and a memory spike between two
//! samples cannot pass it. Where no cgroup can be made, the sampling watchdog in
//! `child.rs` enforces both.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod slot;

/// One attempt's cgroup folders (one per hierarchy); removed on drop.
#[derive(Debug)]
pub struct AttemptCgroup {
    dirs: Vec<PathBuf>,
    procs: Vec<CString>,
    /// The folder holding `pids.*`, when the process limit is the kernel's.
    pids: Option<PathBuf>,
    /// The folder holding the memory files, and whether it is cgroup v1.
    memory: Option<(PathBuf, bool)>,
    /// A slot's cgroup, reused attempt after attempt: the slot's zygote, which lives
    /// here and is no attempt's process (see [`AttemptCgroup::for_slot`]).
    resident: std::sync::OnceLock<i32>,
    /// `pids.events`' refused forks when the current attempt began.
    refused_before: std::sync::atomic::AtomicU64,
}

/// Where this process sits in the hierarchy that has `controller`, and whether that
/// hierarchy is v1.
fn parent_dir(controller: &str) -> Option<(PathBuf, bool)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        let (base, v1) = if controllers.split(',').any(|c| c == controller) {
            (PathBuf::from("/sys/fs/cgroup").join(controller), true)
        } else if controllers.is_empty() {
            let unified = Path::new("/sys/fs/cgroup/cgroup.controllers");
            let available = std::fs::read_to_string(unified).unwrap_or_default();
            if !available.split_whitespace().any(|c| c == controller) {
                continue;
            }
            (PathBuf::from("/sys/fs/cgroup"), false)
        } else {
            continue;
        };
        let dir = base.join(rel);
        if dir.join("cgroup.procs").exists() {
            return Some((dir, v1));
        }
    }
    None
}

/// The PIDs `dir`'s `cgroup.procs` lists; `None` where it cannot be read.
fn procs_in(dir: &Path) -> Option<Vec<i32>> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

/// Creates `parent/jax-runner-<name>` (once) and writes `limits` into it; `None`
/// (and nothing left behind) when the host refuses.
fn limited(
    dirs: &mut Vec<PathBuf>,
    parent: &Path,
    name: &str,
    limits: &[(&str, String)],
) -> Option<PathBuf> {
    let dir = parent.join(format!("jax-runner-{name}"));
    let fresh = !dirs.contains(&dir);
    if fresh && std::fs::create_dir(&dir).is_err() {
        return None;
    }
    let Some((first, rest)) = limits.split_first() else {
        if fresh {
            dirs.push(dir.clone());
        }
        return Some(dir);
    };
    if std::fs::write(dir.join(first.0), &first.1).is_err() {
        if fresh {
            let _ = std::fs::remove_dir(&dir);
        }
        return None;
    }
    // Best effort: swap would let memory past the limit.
    for (file, value) in rest {
        let _ = std::fs::write(dir.join(file), value);
    }
    if fresh {
        dirs.push(dir.clone());
    }
    Some(dir)
}

impl AttemptCgroup {
    /// A cgroup for one attempt: always a pids cgroup (with `pids.max = max_procs` when
    /// asked), and a memory limit of `memory` bytes when asked, each where the host
    /// allows; `None` when none could be made (no controller, read-only cgroupfs, not
    /// delegated).
    pub fn create(
        name: &str,
        max_procs: Option<u32>,
        memory: Option<u64>,
    ) -> Option<AttemptCgroup> {
        let mut dirs = Vec::new();
        // Every attempt gets a pids cgroup where the host allows one, limit or not: what
        // the script leaves behind is found there and killed, whatever it did to its
        // environment, session or parent (see `members`), and the sentinel kills it if
        // the runner dies first.
        let limit: Vec<(&str, String)> = max_procs
            .map(|max| vec![("pids.max", max.to_string())])
            .unwrap_or_default();
        let pids = parent_dir("pids")
            .and_then(|(parent, _)| limited(&mut dirs, &parent, name, &limit))
            .filter(|_| max_procs.is_some());
        let memory = memory.and_then(|bytes| {
            let (parent, v1) = parent_dir("memory")?;
            let files: &[(&str, String)] = if v1 {
                &[
                    ("memory.limit_in_bytes", bytes.to_string()),
                    ("memory.memsw.limit_in_bytes", bytes.to_string()),
                ]
            } else {
                &[
                    ("memory.max", bytes.to_string()),
                    ("memory.swap.max", "0".into()),
                ]
            };
            limited(&mut dirs, &parent, name, files).map(|d| (d, v1))
        });
        if dirs.is_empty() {
            return None;
        }
        let procs = dirs
            .iter()
            .filter_map(|d| CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).ok())
            .collect();
        Some(AttemptCgroup {
            dirs,
            procs,
            pids,
            memory,
            resident: std::sync::OnceLock::new(),
            refused_before: Default::default(),
        })
    }

    /// An attempt begins in this (reused) cgroup: its refused forks count from now.
    pub fn begin_attempt(&self) {
        let now = self.refused_total();
        self.refused_before
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the kernel refuses forks past `--max-procs`.
    pub fn enforces_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Whether the kernel holds the attempt to `--memory-limit`.
    pub fn enforces_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// In the child between fork and exec: join every folder, so everything it starts
    /// is counted from its first instruction. Async-signal-safe: no allocation.
    pub fn join_from_child(&self) -> std::io::Result<()> {
        let mut buf = [0u8; 24];
        // SAFETY: getpid, open, write and close are async-signal-safe; buf is local.
        unsafe {
            let mut pid = libc::getpid() as u64;
            let mut i = buf.len();
            loop {
                i -= 1;
                buf[i] = b'0' + (pid % 10) as u8;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            for procs in &self.procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
                libc::close(fd);
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// Moves `pid` into every folder, from the runner (for a process that cannot
    /// reach the cgroup files itself, inside the sandbox).
    pub fn join(&self, pid: libc::pid_t) -> std::io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// Every process in the attempt's cgroups now.
    pub fn members(&self) -> Vec<i32> {
        let mut out: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| procs_in(d))
            .flatten()
            .collect();
        out.sort_unstable();
        out.dedup();
        if let Some(resident) = self.resident.get() {
            out.retain(|p| p != resident);
        }
        out
    }

    /// The `cgroup.procs` files, for a process that joins by writing its own PID.
    pub fn procs_paths(&self) -> Vec<String> {
        self.dirs
            .iter()
            .map(|d| d.join("cgroup.procs").to_string_lossy().into_owned())
            .collect()
    }

    /// How many forks the limit refused in this attempt (`pids.events`: `max N`).
    pub fn refused_forks(&self) -> u64 {
        let before = self
            .refused_before
            .load(std::sync::atomic::Ordering::Relaxed);
        self.refused_total().saturating_sub(before)
    }

    /// How many forks the limit refused since the cgroup was made.
    fn refused_total(&self) -> u64 {
        self.pids
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.join("pids.events")).ok())
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// What the cgroup is charged now (`memory.usage_in_bytes` on v1, `memory.current`
    /// on v2): the kernel's own count of the attempt's memory, pages shared between its
    /// processes once, tmpfs pages included. `None` without a memory controller.
    pub fn memory_current(&self) -> Option<u64> {
        let (dir, v1) = self.memory.as_ref()?;
        let file = match v1 {
            true => "memory.usage_in_bytes",
            false => "memory.current",
        };
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The most memory the cgroup was ever charged (`memory.max_usage_in_bytes` on v1,
    /// `memory.peak` on v2, where the kernel has it), tmpfs pages included.
    pub fn memory_peak(&self) -> Option<u64> {
        let (dir, v1) = self.memory.as_ref()?;
        let file = if *v1 {
            "memory.max_usage_in_bytes"
        } else {
            "memory.peak"
        };
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether the kernel's OOM killer fired inside this cgroup (the memory limit).
    pub fn oom_killed(&self) -> bool {
        let Some((dir, v1)) = &self.memory else {
            return false;
        };
        let file = if *v1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
            })
            .is_some_and(|n| n > 0)
    }
}

impl Drop for AttemptCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            empty_and_remove(dir);
        }
    }
}

/// Kills every process in the cgroup `dir` until it is empty, then removes it. A
/// process forking as it is killed is caught on the next pass.
pub fn empty_and_remove(dir: &Path) {
    for _ in 0..50 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() && std::fs::remove_dir(dir).is_ok() {
            return;
        }
        for pid in pids {
            super::sys::kill_pid(pid, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir(dir);
}

/// Whether this runner may make pids cgroups, so its worker slots will have homes of
/// their own (see `homes.rs`): the pids controller's folder it lives in is writable to
/// it. Asked before the first slot is made, to tell the zygote where the MLIR context
/// will be made; a slot refused later still works, its scripts forked by the run's
/// zygote.
pub fn slot_homes_possible() -> bool {
    parent_dir("pids").is_some_and(|(dir, _)| {
        rustix::fs::access(
            &dir,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        )
        .is_ok()
    })
}

/// The folders this runner's attempt cgroups are made in (for the sentinel).
pub fn parent_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["pids", "memory"]
        .iter()
        .filter_map(|c| parent_dir(c).map(|(d, _)| d))
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests;
