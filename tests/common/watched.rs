//! A run of the built binary watched from outside: reaped with `wait4`, its own
//! memory sampled from `/proc`, killed when it hangs or grows without bound, so a
//! test of hostile leftovers fails instead of hanging or taking the machine down.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::python;

/// The runner's own memory stays under this, whatever a script leaves behind.
pub const PEAK_LIMIT_MIB: f64 = 400.0;
/// Past this the test kills the runner at once: unbounded growth (reading /dev/zero)
/// must fail the test, not the machine.
const GUARD_KIB: u64 = 1 << 20;
/// A run still going after this is hung.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// How a watched run ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The runner's own peak RSS, MiB: its `VmHWM`, sampled every 10 ms. (Neither
    /// `wait4`'s `ru_maxrss` nor the runner's `getrusage(RUSAGE_SELF)` will do: both
    /// start from the RSS of the process that spawned it, this test binary, because
    /// the kernel carries the high-water mark across `exec`.)
    pub peak_mib: f64,
    /// `ru_maxrss` from `wait4`, MiB, for the record (see `peak_mib`).
    pub maxrss_mib: f64,
    /// Why the test stopped the runner, when it had to.
    pub stopped: Option<String>,
    pub stderr: String,
}

impl Ran {
    /// Fails unless the run ended by itself, with `code`, and stayed small.
    pub fn assert_ended(&self, code: i32) {
        assert_eq!(self.stopped, None, "{self:?}");
        assert_eq!(
            self.code,
            Some(code),
            "signal {:?}: {}",
            self.signal,
            self.stderr
        );
        assert!(
            self.peak_mib < PEAK_LIMIT_MIB,
            "the runner peaked at {:.0} MiB",
            self.peak_mib
        );
    }
}

/// `jax-runner --output-dir DIR` (CPU, cold starts, no cache) with its stderr in `log`.
pub fn spawn(out_dir: &Path, args: &[&str], log: &Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
        .arg("--output-dir")
        .arg(out_dir)
        .arg("--python")
        .arg(python())
        .args(["--compilation-cache", "off", "--device", "cpu"])
        .args(["--warm-start", "off", "--no-preflight"])
        .args(args)
        .env_remove("JAX_PLATFORM_NAME")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// A `kB` line of `/proc/<pid>/status`.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Watches the runner until it ends (reaped with `wait4`, for its `ru_maxrss`),
/// sampling its memory; kills it when it hangs past [`RUN_LIMIT`] or grows past
/// [`GUARD_KIB`]. `during` sees the runner's PID and the time so far at each sample.
pub fn watch(child: std::process::Child, log: &Path, mut during: impl FnMut(u32, Duration)) -> Ran {
    let pid = child.id();
    let started = Instant::now();
    let (mut hwm_kib, mut stopped) = (0u64, None);
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: wait4 fills the status and the rusage we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid as i32 {
            break (status, usage);
        }
        hwm_kib = hwm_kib.max(status_kib(pid, "VmHWM:").unwrap_or(0));
        let why = if status_kib(pid, "VmRSS:").unwrap_or(0) > GUARD_KIB {
            Some(format!("grew past {} MiB", GUARD_KIB >> 10))
        } else if started.elapsed() > RUN_LIMIT {
            Some(format!("still running after {RUN_LIMIT:?}"))
        } else {
            None
        };
        if stopped.is_none() && why.is_some() {
            stopped = why;
            // SAFETY: a signal to the runner this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        during(pid, started.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(child);
    Ran {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        peak_mib: hwm_kib as f64 / 1024.0,
        maxrss_mib: usage.ru_maxrss as f64 / 1024.0,
        stopped,
        stderr: std::fs::read_to_string(log).unwrap_or_default(),
    }
}

/// Runs the runner on `out_dir` to its end.
pub fn run(out_dir: &Path, args: &[&str]) -> Ran {
    let log = out_dir.join(".runner.stderr.txt");
    let ran = watch(spawn(out_dir, args, &log), &log, |_, _| {});
    eprintln!(
        "runner peak {:.1} MiB (wait4 ru_maxrss {:.1} MiB), {:?}",
        ran.peak_mib, ran.maxrss_mib, ran.stopped
    );
    ran
}
