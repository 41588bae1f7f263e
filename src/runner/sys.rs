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
    fields_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn fields_of(stat: &str) -> Option<Vec<String>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The state letter of `pid` in `/proc/<pid>/stat` (`R`, `S`, `Z`, …); `None` once
/// it is gone.
pub fn state(pid: u32) -> Option<char> {
    first_char(stat_fields(pid))
}

/// When `pid` started, in clock ticks after boot (the stat's 22nd field): with the
/// PID, it names one process for good.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether `pid` has ended: gone, or a zombie (or dead) waiting to be reaped. A
/// process whose main thread alone has exited lives on in its other threads, though
/// `/proc/<pid>` shows a zombie: it has not ended.
pub fn ended(pid: u32) -> bool {
    live_thread(pid).is_none()
}

/// A thread of process `pid` that has not exited, for what `/proc` reads from the
/// process's memory (`environ`, `cmdline`) and its state: once the main thread alone
/// has exited (the raw `exit` system call), `/proc/<pid>/…` reads empty and says
/// zombie while the process runs on in its other threads. `None` once every thread has
/// exited.
pub fn live_thread(pid: u32) -> Option<u32> {
    let alive =
        |stat: Option<Vec<String>>| matches!(first_char(stat), Some(c) if c != 'Z' && c != 'X');
    if alive(stat_fields(pid)) {
        return Some(pid);
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .find(|tid| *tid != pid && alive(task_stat_fields(pid, *tid)))
}

fn first_char(fields: Option<Vec<String>>) -> Option<char> {
    fields?.first()?.chars().next()
}

/// [`stat_fields`] of one thread of `pid`.
fn task_stat_fields(pid: u32, tid: u32) -> Option<Vec<String>> {
    fields_of(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?)
}

/// A file of `/proc/<pid>/task/<tid>/` read from a live thread of `pid` (see
/// [`live_thread`]); `None` once the process has ended or the file cannot be read.
pub fn read_live(pid: u32, file: &str) -> Option<Vec<u8>> {
    let tid = live_thread(pid)?;
    std::fs::read(format!("/proc/{pid}/task/{tid}/{file}")).ok()
}

/// Whether process `pid` is already on its way out, by the kernel's own account: its
/// live thread has begun to exit (`PF_EXITING` in the stat's flags) or has a SIGKILL
/// pending, which nothing can block or outlast. An ended process is too.
pub fn exiting(pid: u32) -> bool {
    let Some(tid) = live_thread(pid) else {
        return true;
    };
    let flags = task_stat_fields(pid, tid)
        .and_then(|f| f.get(6)?.parse::<u64>().ok())
        .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"));
    exiting_in(flags, &status.unwrap_or_default())
}

/// [`exiting`] from a thread's stat flags and its `status` text.
fn exiting_in(flags: u64, status: &str) -> bool {
    /// The kernel's `PF_EXITING`: set as a thread starts to exit.
    const PF_EXITING: u64 = 0x4;
    flags & PF_EXITING != 0 || signal_pending_in(status, libc::SIGKILL)
}

/// A hexadecimal mask of a `/proc/<pid>/status` text: `SigCgt:`, `CapEff:`, …
pub fn status_mask(status: &str, field: &str) -> Option<u64> {
    let mask = status.lines().find_map(|l| l.strip_prefix(field))?;
    u64::from_str_radix(mask.trim(), 16).ok()
}

/// Whether `signal` is in `field`'s mask of a status text (bit N-1 for signal N).
pub fn status_has_signal(status: &str, field: &str, signal: libc::c_int) -> bool {
    status_mask(status, field).is_some_and(|m| m & (1u64 << (signal - 1)) != 0)
}

/// Whether `signal` waits, undelivered, in a status text: for the thread (`SigPnd`) or
/// for its whole process (`ShdPnd`).
pub fn signal_pending_in(status: &str, signal: libc::c_int) -> bool {
    ["SigPnd:", "ShdPnd:"]
        .iter()
        .any(|f| status_has_signal(status, f, signal))
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

/// Sends a signal rustix has no name for (a real-time one: the runner's request for a
/// script's stacks); true when it was sent.
pub fn signal_raw(pid: libc::pid_t, signal: libc::c_int) -> bool {
    if pid <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a PID above 1
    // names one process, never a group or every process.
    unsafe { libc::kill(pid, signal) == 0 }
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

/// A program for a child's standard input: a sealed memory file, not a pipe. A pipe
/// holds 64 KiB, and only 4 KiB once the user's pipes pass the kernel's soft limit
/// (`fs.pipe-user-pages-soft`, a busy login node): writing a program longer than that
/// before the child reads would block the runner for good, and a child that dies
/// before reading would leave it blocked. A file is read at the child's pace, whole,
/// whatever its length.
pub fn program_stdin(program: &[u8]) -> std::io::Result<OwnedFd> {
    jax_runner_confine::process::sealed_memfd(c"jax-runner-program", program)
}

/// The descriptors marked close-on-exec: with the code that applies the confinement
/// (`crates/confine`, `process.rs`).
pub use jax_runner_confine::process::{cloexec_from, cloexec_range};

/// Starts `python3 -c` running `before` (Python lines), then a thread that sleeps on
/// while the main thread ends alone (the raw `exit` system call), `arg` on its command
/// line; returns once `/proc/<pid>` shows the main thread's remains, a zombie.
#[cfg(test)]
pub fn spawn_headless(before: &str, arg: &str) -> std::process::Child {
    let program = format!(
        "import ctypes, platform, sys, threading, time\n{before}\n\
         threading.Thread(target=lambda: time.sleep(600), daemon=True).start()\n\
         sys.stdout.write('ready\\n'); sys.stdout.flush()\n\
         ctypes.CDLL(None).syscall({{'x86_64': 60, 'aarch64': 93}}[platform.machine()], 0)\n"
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &program, arg])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while state(child.id()) != Some('Z') {
        assert!(
            std::time::Instant::now() < deadline,
            "the main thread lives"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// The boundary: a program sixteen times a pipe's buffer is handed over without
    /// a reader, then read back whole by a child that starts later, as the zygote's
    /// loader reads its own.
    #[test]
    fn a_program_of_any_length_is_handed_to_a_child_without_blocking() {
        let program: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect();
        let stdin = program_stdin(&program).unwrap();
        let out = Command::new("sh")
            .args(["-c", "wc -c; exit 0"])
            .stdin(std::process::Stdio::from(stdin))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1048576");
    }

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

    /// A process whose main thread alone has exited: `/proc/<pid>` says zombie and
    /// reads no command line, but it lives on in its other thread, which is read
    /// instead; it has ended only once that thread has too.
    #[test]
    fn a_process_lives_on_after_its_main_thread_exits() {
        let mut child = spawn_headless("", "headless-marker");
        let pid = child.id();
        let main_thread = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(main_thread.is_empty(), "{main_thread:?}");
        assert!(!ended(pid) && !exiting(pid));
        assert!(live_thread(pid).is_some_and(|tid| tid != pid));
        let cmdline = read_live(pid, "cmdline").unwrap();
        assert!(String::from_utf8_lossy(&cmdline).contains("headless-marker"));
        kill_pid(pid as i32, libc::SIGKILL);
        child.wait().unwrap();
        assert!(ended(pid) && exiting(pid) && read_live(pid, "cmdline").is_none());
    }

    /// Exiting is the kernel's `PF_EXITING` or a pending SIGKILL, thread's or shared;
    /// other flags and signals are not.
    #[test]
    fn exiting_is_a_thread_leaving_or_a_sigkill_pending() {
        let status =
            |own: &str, shared: &str| format!("Name:\tx\nSigPnd:\t{own}\nShdPnd:\t{shared}\n");
        let none = "0000000000000000";
        // Captured from a zygote's process as the runner dropped it.
        assert!(exiting_in(4195596, &status(none, "0000000000000100")));
        assert!(exiting_in(0x4, &status(none, none)));
        assert!(exiting_in(0, &status("0000000000000100", none)));
        assert!(!exiting_in(
            0x400100,
            &status("0000000000004002", "0000000000000200")
        ));
        assert!(!exiting_in(0, ""));
        assert!(!exiting(std::process::id()));
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
