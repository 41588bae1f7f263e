//! Thin, safe wrappers over the Unix calls the runner needs: wait4 with the kernel's
//! resource accounting, and signals to whole process groups.

use std::os::fd::OwnedFd;
use std::time::Duration;

/// How a process ended and what it cost, from `wait4`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exit {
    /// Exit code when it exited.
    pub code: Option<i32>,
    /// Signal when a signal killed it.
    pub signal: Option<i32>,
    pub user_cpu: Duration,
    pub system_cpu: Duration,
    /// Peak RSS of the process (and of descendants it waited for), bytes; for a
    /// script a slot's zygote forked, less what it held at its fork (the zygote's).
    pub max_rss_bytes: u64,
}

/// Blocks until `pid` exits and reaps it. Call from a blocking thread.
pub fn wait4(pid: libc::pid_t) -> std::io::Result<Exit> {
    let mut status: libc::c_int = 0;
    let usage = loop {
        // SAFETY: rusage is plain data (all zeroes is valid) that the kernel fills in;
        // the pointers are to live locals; pid is our own child. rustix has no wait4,
        // and only wait4 gives a child's resource usage as it is reaped.
        let (rc, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            (libc::wait4(pid, &mut status, 0, &mut usage), usage)
        };
        if rc == pid {
            break usage;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    Ok(Exit {
        code,
        signal,
        user_cpu: tv(usage.ru_utime),
        system_cpu: tv(usage.ru_stime),
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
    })
}

/// Whether our child `pid` has already exited (it waits to be reaped): `waitid` with
/// `WNOWAIT` looks without reaping, so [`wait4`]'s thread still collects it.
pub fn has_exited(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data (all zeroes is valid) that the kernel fills in
    // when a child has exited; the pointer is to a live local; nothing is reaped.
    let (rc, exited) = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        let rc = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags);
        (rc, rc == 0 && info.si_pid() != 0)
    };
    // Not the runner's child (a script a slot's zygote forked): a zombie, or gone.
    if rc != 0 {
        return ended(pid as u32);
    }
    exited
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces
/// and parentheses: they start after the last `)`), from the state on; `None` once the
/// process is gone.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The state letter of `pid` in `/proc/<pid>/stat` (`R`, `S`, `Z`, …); `None` once
/// it is gone.
pub fn state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// When `pid` started, in clock ticks after boot (the stat's 22nd field): with the
/// PID, it names one process for good.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether `pid` has ended: gone, or a zombie (or dead) waiting to be reaped.
pub fn ended(pid: u32) -> bool {
    !matches!(state(pid), Some(c) if c != 'Z' && c != 'X')
}

/// Sends `signal` to every process in group `pgid`; a group already gone is fine.
pub fn kill_group(pgid: libc::pid_t, signal: libc::c_int) {
    if pgid <= 1 {
        return; // never signal init or "every process"
    }
    if let (Some(pgid), Some(signal)) = (pid_of(pgid), signal_of(signal)) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// Sends `signal` to one process.
pub fn kill_pid(pid: libc::pid_t, signal: libc::c_int) {
    if pid <= 1 {
        return;
    }
    if let (Some(pid), Some(signal)) = (pid_of(pid), signal_of(signal)) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

fn pid_of(pid: libc::pid_t) -> Option<rustix::process::Pid> {
    rustix::process::Pid::from_raw(pid)
}

/// The runner only sends named signals (TERM, KILL, …); a number without a name is
/// not sent.
fn signal_of(signal: libc::c_int) -> Option<rustix::process::Signal> {
    rustix::process::Signal::from_named_raw(signal)
}

/// The conventional name of a signal number (one list, in the model: the reports
/// use the same words).
pub use crate::model::reason::signal_name;

/// A pipe whose ends close on exec: (read end, write end).
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// The descriptors marked close-on-exec: with the code that applies the confinement
/// (`crates/confine`, `process.rs`).
pub use jax_runner_confine::process::{cloexec_from, cloexec_range};

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn a_process_is_named_by_its_pid_and_start() {
        let me = std::process::id();
        assert!(start_ticks(me).is_some_and(|t| t > 0));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        // Reaped: that process is gone, whatever may take its PID later.
        let now = start_ticks(pid);
        assert!(now.is_none() || now > start_ticks(me), "{now:?}");
    }

    // The children are reaped by wait4, which clippy cannot see.
    #[test]
    #[allow(clippy::zombie_processes)]
    fn wait4_reports_exit_code_and_cpu() {
        let child = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let exit = wait4(child.id() as i32).unwrap();
        assert_eq!((exit.code, exit.signal), (Some(7), None));
        assert!(exit.max_rss_bytes > 0);
    }

    /// A running child has not exited; one that has is seen so without being reaped,
    /// and its exit code still comes to wait4.
    #[test]
    #[allow(clippy::zombie_processes)]
    fn an_exit_is_seen_before_it_is_reaped() {
        let running = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!has_exited(running.id() as i32));
        kill_pid(running.id() as i32, libc::SIGKILL);
        wait4(running.id() as i32).unwrap();
        let child = Command::new("sh").args(["-c", "exit 5"]).spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !has_exited(pid) {
            assert!(std::time::Instant::now() < deadline, "no exit seen");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(has_exited(pid), "looking does not reap");
        assert_eq!(wait4(pid).unwrap().code, Some(5));
    }

    #[test]
    #[allow(clippy::zombie_processes)]
    fn kill_group_reaches_the_whole_group() {
        let child = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(100));
        kill_group(pid, libc::SIGKILL);
        let exit = wait4(pid).unwrap();
        assert_eq!(exit.signal, Some(libc::SIGKILL));
        assert_eq!(signal_name(9), "SIGKILL");
    }
}
