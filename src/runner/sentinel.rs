//! The sentinel: a small process of the runner's own, started with each local run, that
//! outlives it only to clean up. It waits on a pipe whose only writer is the runner;
//! when the pipe ends (the runner exited, however: SIGKILL included), it kills every
//! process in this run's attempt cgroups and every process carrying the run's token,
//! so no script's child survives the runner, even one that left its process group and
//! session or cleared its environment. `PR_SET_PDEATHSIG` covers only each script's
//! own process; this covers the rest.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The hidden first argument that makes the binary a sentinel.
pub const ARG: &str = "__jax-runner-sentinel";

/// The runner's end of the sentinel's pipe: dropping it (or dying) sets it off.
#[derive(Debug)]
pub struct Sentinel {
    _pipe: OwnedFd,
}

/// Starts the sentinel for this run: its attempt cgroups are named
/// `jax-runner-<runner pid>-…` under `parents`, its processes carry `token_prefix` in
/// `JAX_RUNNER_TOKEN`. `None` when the binary cannot be started again (the run still
/// has its own sweeps).
pub fn start(token_prefix: &str, parents: &[PathBuf]) -> Option<Sentinel> {
    remove_stale(parents);
    let exe = std::env::current_exe().ok()?;
    let (read, write) = super::sys::pipe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.arg(ARG)
        .arg(std::process::id().to_string())
        .arg(token_prefix)
        .args(parents)
        .current_dir("/")
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own session: a Ctrl-C or hang-up for the runner is not for the sentinel.
        .process_group(0);
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn().ok()?;
    let _ = PID.set(child.id());
    // Not waited for: it ends on its own once the pipe ends, and is then reaped by
    // whoever is the runner's reaper (the runner itself, a subreaper, reaps children
    // that exit while it runs; its sweeps take no notice of this one).
    drop(child);
    Some(Sentinel { _pipe: write })
}

/// The sentinel started for this run, if any: the one child the runner keeps after
/// its last script ([`super::reaper::strays`] passes over it).
static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The sentinel's process, once started.
pub fn pid() -> Option<u32> {
    PID.get().copied()
}

/// The sentinel's life, from `main` when the first argument is [`ARG`]: wait for the
/// runner to go, clean up, exit 0.
pub fn run(args: &[String]) -> i32 {
    let (Some(runner), Some(token)) = (args.first(), args.get(1)) else {
        return 2;
    };
    // SAFETY: ignoring terminal signals only changes this process's dispositions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    let parents: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
    clean_up(runner, token, &parents);
    0
}

/// Kills what the run `runner` left: its attempt cgroups under `parents` (emptied and
/// removed), then any process whose environment carries the run's token.
pub fn clean_up(runner: &str, token_prefix: &str, parents: &[PathBuf]) {
    let prefix = format!("jax-runner-{runner}-");
    for parent in parents {
        for dir in attempt_cgroups(parent, &prefix) {
            super::limits::empty_and_remove(&dir);
        }
    }
    super::reaper::kill_tokened(token_prefix);
}

/// Empties and removes attempt cgroups of runners that are gone (a runner killed with
/// its sentinel leaves them behind).
fn remove_stale(parents: &[PathBuf]) {
    for parent in parents {
        for dir in attempt_cgroups(parent, "jax-runner-") {
            let name = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let runner = name["jax-runner-".len()..].split('-').next().unwrap_or("");
            if runner.parse::<u32>().is_ok() && !Path::new("/proc").join(runner).exists() {
                super::limits::empty_and_remove(&dir);
            }
        }
    }
}

fn attempt_cgroups(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cgroups_of_runners_that_are_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        // Beyond any pid_max: no such process.
        let dead = tmp.path().join("jax-runner-4294967-a-1");
        let live = tmp
            .path()
            .join(format!("jax-runner-{}-b-1", std::process::id()));
        let other = tmp.path().join("not-ours");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
        }
        remove_stale(&[tmp.path().to_path_buf()]);
        assert!(!dead.exists(), "a dead runner's cgroup goes");
        assert!(live.exists() && other.exists(), "the rest stays");
    }
}
