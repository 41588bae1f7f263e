//! The processes of a network namespace, found and ended by PID (through pidfds, so a
//! PID taken over meanwhile by a process elsewhere is never hit): how a test's own
//! servers (`slurm.rs`'s cluster) are stopped without a broad name.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

/// How long a process has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// Whether `pid` is a live process in network namespace `netns` (a zombie has no
/// namespaces left: it is gone in every way that matters).
pub fn in_netns(pid: u32, netns: &Path) -> bool {
    fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|ns| ns == netns)
}

/// Whether `pid` has exited: a zombie, or reaped.
pub fn exited(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map_or("X", |(_, rest)| rest);
    state.starts_with(['Z', 'X'])
}

/// The PIDs of the live processes in the network namespace `netns` (a `/proc/*/ns/net`
/// link's target, as `TestSlurm::netns` gives it).
pub fn processes_in_netns(netns: &Path) -> Vec<u32> {
    let pids = fs::read_dir("/proc").unwrap().flatten();
    let pids = pids.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|&pid| in_netns(pid, netns)).collect()
}

/// Whether `done` came true within `within`, asked every 100 ms.
pub fn poll(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// SIGTERM to `pids`, [`GRACE`] for them to go, then SIGKILL. Each is signalled
/// through a pidfd opened while it was still in namespace `netns`, so a PID that a
/// process elsewhere took over meanwhile is never hit.
pub fn end_in_netns(pids: &[u32], netns: &Path) {
    let pidfd = |&pid: &u32| pidfd_open(Pid::from_raw(pid as i32)?, PidfdFlags::empty()).ok();
    let ours: Vec<_> = pids
        .iter()
        .filter_map(|pid| Some((pidfd(pid)?, *pid)))
        .filter(|(_, pid)| in_netns(*pid, netns))
        .collect();
    for (fd, _) in &ours {
        let _ = pidfd_send_signal(fd, Signal::TERM);
    }
    poll(GRACE, || !ours.iter().any(|(_, pid)| in_netns(*pid, netns)));
    for (fd, _) in &ours {
        let _ = pidfd_send_signal(fd, Signal::KILL);
    }
}
