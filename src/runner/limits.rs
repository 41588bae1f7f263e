//! `--max-procs`: a pids cgroup per attempt where the host lets the runner make one
//! (the kernel then refuses the fork), with a sampling watchdog as the fallback.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A pids cgroup holding one attempt's processes; removed on drop.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    procs: CString,
}

/// Where this process sits in the pids hierarchy (cgroup v2 unified or v1 `pids`).
fn parent_dir() -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        let base = if controllers.split(',').any(|c| c == "pids") {
            PathBuf::from("/sys/fs/cgroup/pids")
        } else if controllers.is_empty() {
            let unified = Path::new("/sys/fs/cgroup/cgroup.controllers");
            let controllers = std::fs::read_to_string(unified).unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "pids") {
                continue;
            }
            PathBuf::from("/sys/fs/cgroup")
        } else {
            continue;
        };
        let dir = base.join(rel);
        if dir.join("cgroup.procs").exists() {
            return Some(dir);
        }
    }
    None
}

impl PidsCgroup {
    /// Creates `jax-runner-<name>` with `pids.max = max`, or `None` where the host
    /// does not let us (no pids controller, read-only cgroupfs, not delegated).
    pub fn create(name: &str, max: u32) -> Option<PidsCgroup> {
        let dir = parent_dir()?.join(format!("jax-runner-{name}"));
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(dir.join("pids.max"), max.to_string()).is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).ok()?;
        Some(PidsCgroup { dir, procs })
    }

    /// In the child between fork and exec: join the cgroup, so everything it starts is
    /// counted from its first instruction. Async-signal-safe: no allocation.
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
            let fd = libc::open(self.procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
            libc::close(fd);
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` file, for a process that joins by writing its own PID.
    pub fn procs_path(&self) -> String {
        self.dir.join("cgroup.procs").to_string_lossy().into_owned()
    }

    /// How many forks the limit refused (`pids.events`: `max N`).
    pub fn refused_forks(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("pids.events"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // A cgroup can be removed only when empty: kill whatever is left first.
        for _ in 0..50 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.is_empty() && std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            for pid in pids {
                super::sys::kill_pid(pid, libc::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
