//! Keeping the process tree accountable: the runner is a child subreaper, so orphans
//! of a script are reparented to it rather than to init; each child dies with the
//! runner; and after a script exits, whatever it left running is found, killed,
//! reaped and reported as a leak.

use std::path::PathBuf;

use crate::model::Leak;

use super::sys;

mod round;

pub use round::Victim;
use round::{wait_gone, Round, GONE_WAIT};

/// The variable that marks every process a script starts (children inherit it), so a
/// leftover can be traced to its script even after it left the process group.
pub const TOKEN_VAR: &str = "JAX_RUNNER_TOKEN";

/// Makes this process the subreaper of its descendants. Call once, early.
pub fn become_subreaper() -> std::io::Result<()> {
    Ok(rustix::process::set_child_subreaper(
        rustix::process::Pid::from_raw(1),
    )?)
}

/// Dying with the parent lives with the code that applies the confinement
/// (`crates/confine`, `process.rs`).
pub use jax_runner_confine::process::die_with_parent;

/// Our own direct children, from `/proc/self/task/*/children`.
fn own_children() -> Vec<u32> {
    children_of("self")
}

/// The children of process `pid` (a number, or `self`), of every thread of its.
fn children_of(pid: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

fn environ_has(pid: u32, entry: &[u8]) -> bool {
    environ_any(pid, |e| e == entry)
}

/// Whether one of `pid`'s environment entries (as the process started) passes `test`.
/// Read through a live thread: a process whose main thread alone has exited keeps
/// its environment (see [`sys::live_thread`]).
fn environ_any(pid: u32, test: impl Fn(&[u8]) -> bool) -> bool {
    sys::read_live(pid, "environ").is_some_and(|env| env.split(|b| *b == 0).any(test))
}

fn command_line(pid: u32) -> String {
    sys::read_live(pid, "cmdline")
        .map(|c| {
            String::from_utf8_lossy(&c)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Finds every live process carrying `token` among `seen` (PIDs sampled from the
/// script's tree) and, where `adopted` (the script's orphans may be reparented to the
/// runner, a subreaper), the runner's own children, kills each with
/// its descendants, waits until it is gone, reaps those that were reparented to us,
/// and reports them. Repeats, because a killed leftover's own children are
/// reparented to us in turn. A warm script's processes carry the token too: the
/// zygote's child writes it into the environment block they inherit (see
/// `zygote::TOKEN_SLOT`).
/// The sandbox's own init (bwrap as PID 1 of the namespace, whose command starts with
/// `sandbox_init`) may outlive the script by a moment: it is killed and reaped like
/// the rest, but it is no leak of the script's. Nor is a process the kernel already
/// has on its way out ([`sys::exiting`]: the script's own, killed with its group at a
/// timeout, or one its PID namespace's end is killing): it is waited for, and named
/// only if it is still there after that.
///
/// When it returns, every process it killed has exited: nothing it found can still
/// write into the script's data folder, which is listed only afterwards.
pub fn sweep(token: &str, seen: &[u32], adopted: bool, sandbox_init: Option<&str>) -> Vec<Leak> {
    let entry = format!("{TOKEN_VAR}={token}").into_bytes();
    let mut killed: Vec<Leak> = Vec::new();
    let mut waited: Vec<u32> = Vec::new();
    for _round in 0..8 {
        // Read only where an orphan could be there: listing the runner's threads'
        // children and reading each child's environment is most of what a trivial
        // script's end costs the runner.
        let mut candidates: Vec<u32> = if adopted { own_children() } else { Vec::new() };
        candidates.extend_from_slice(seen);
        candidates.sort_unstable();
        candidates.dedup();
        let mut round = Round::default();
        for pid in candidates {
            if killed.iter().any(|l| l.pid == pid) || waited.contains(&pid) {
                continue;
            }
            // The handle first, then the checks: what they looked at is what is killed,
            // even if the PID is reused meanwhile.
            let victim = Victim::open(pid);
            // Read through a live thread: an ended process has no environment left.
            if environ_has(pid, &entry) {
                round.add(victim);
            }
        }
        if !round.end(&mut killed, &mut waited) {
            break;
        }
    }
    reap_orphans(&killed);
    killed.retain(|l| !sandbox_init.is_some_and(|init| l.command.starts_with(init)));
    killed
}

/// Processes still in the attempt's cgroup after the script exited and the sweep ran,
/// beyond those already `found`: each is reported, then the cgroup is emptied.
pub fn cgroup_leftovers(
    cg: &super::limits::AttemptCgroup,
    found: &[Leak],
    sandbox_init: Option<&str>,
) -> Vec<Leak> {
    let mut out = Vec::new();
    // What was killed with the script's group, or dies with its namespace, takes a
    // moment to go: only what is still there after that stayed behind.
    for _ in 0..10 {
        if cg.members().is_empty() {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _round in 0..8 {
        let members = cg.members();
        if members.is_empty() {
            break;
        }
        for pid in members {
            let pid_u = pid as u32;
            // One already on its way out was ended with the script (its group, its
            // namespace), not left behind.
            let known = found.iter().chain(&out).any(|l: &Leak| l.pid == pid_u);
            if !known && !sys::exiting(pid_u) {
                out.push(Leak {
                    pid: pid_u,
                    command: command_line(pid_u),
                });
            }
            sys::kill_pid(pid, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        reap_orphans(&out);
    }
    reap_orphans(&out);
    out.retain(|l| !sandbox_init.is_some_and(|init| l.command.starts_with(init)));
    out
}

/// After the run's last script: every process still reparented to the runner (the
/// subreaper) but the sentinel is a leftover of the scripts that no attempt's sweep
/// could trace, because it left its group and session and overwrote its environment
/// block, and no PID namespace or cgroup held it (the built-in layer alone, as an
/// ordinary user). Each is killed with its group, waited for and reaped, round after
/// round, and reported; the ended are reaped. One already on its way out by the
/// kernel's account ([`sys::exiting`]: a helper of the runner's own that is being
/// ended) is waited for and reaped, and reported only if it has not ended by then.
pub fn strays(keep: Option<u32>) -> Vec<Leak> {
    let mut killed: Vec<Leak> = Vec::new();
    let mut waited: Vec<u32> = Vec::new();
    for _round in 0..8 {
        let mut round = Round::default();
        for pid in own_children() {
            if keep == Some(pid) || killed.iter().any(|l| l.pid == pid) || waited.contains(&pid) {
                continue;
            }
            let victim = Victim::open(pid);
            match sys::ended(pid) {
                true => reap(&[pid]),
                false => round.add(victim),
            }
        }
        if !round.end(&mut killed, &mut waited) {
            break;
        }
    }
    killed
}

/// Ends `root` and every process below it (SIGKILL through pidfds: no process that
/// took a PID meanwhile is signalled), waits until each has exited and reaps those
/// that are the runner's. For the runner's own helpers: a zygote under bubblewrap
/// serves from bwrap's child, which bwrap's death signal reaches only as bwrap dies;
/// the kernel then hands it, still exiting, to the runner. Their groups are not
/// signalled: a slot's zygote shares the run's zygote's group and ends with its own
/// owner.
pub fn end_tree(root: u32) {
    let mut tree = kill_tree(root);
    let pids: Vec<u32> = tree.iter().map(|v| v.pid).collect();
    wait_gone(&mut tree, GONE_WAIT);
    reap(&pids);
}

/// Sends SIGKILL to `root` and every process below it, as [`end_tree`] does, and
/// returns at once: a caller ending several helpers kills them all first, so the
/// kernel tears their address spaces down side by side (10 to 15 ms each for a
/// zygote that imported jax, measured) before [`end_tree`] waits for each.
pub fn kill_tree(root: u32) -> Vec<Victim> {
    let mut tree = vec![Victim::open(root)];
    let mut next = 0;
    // Bounded: a helper's tree is a few processes.
    while next < tree.len() && tree.len() < 1024 {
        for child in children_of(&tree[next].pid.to_string()) {
            if !tree.iter().any(|v| v.pid == child) {
                tree.push(Victim::open(child));
            }
        }
        next += 1;
    }
    tree.iter().for_each(Victim::kill_alone);
    tree
}

/// Kills every process whose environment carries a token starting with `prefix` (a
/// run's token; see [`TOKEN_VAR`]), with its group. For the sentinel, after the runner
/// is gone.
pub fn kill_tokened(prefix: &str) {
    let entry = format!("{TOKEN_VAR}={prefix}").into_bytes();
    for _round in 0..4 {
        let found: Vec<u32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| environ_any(*pid, |e| e.starts_with(&entry)))
            .collect();
        if found.is_empty() {
            return;
        }
        for pid in found {
            sys::kill_group(pid as i32, libc::SIGKILL);
            sys::kill_pid(pid as i32, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Reaps leftovers that were reparented to the runner (others are not ours to reap).
fn reap_orphans(leaks: &[Leak]) {
    reap(&leaks.iter().map(|l| l.pid).collect::<Vec<_>>());
}

/// Reaps those of `pids` that are the runner's children and have exited.
fn reap(pids: &[u32]) {
    if pids.is_empty() {
        return; // the common end of a script: nothing left, nothing to list
    }
    let mine = own_children();
    for pid in pids.iter().filter(|p| mine.contains(p)) {
        let pid = rustix::process::Pid::from_raw(*pid as i32);
        let _ = rustix::process::waitpid(pid, rustix::process::WaitOptions::NOHANG);
    }
}

/// The kernel's OOM-kill counter for the runner's cgroup (cgroup v2), which children
/// share: a SIGKILL while it rose is the OOM killer's doing.
pub fn oom_kill_count() -> Option<u64> {
    // The runner's cgroup does not change: find its events file once, not per attempt.
    static EVENTS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let path = EVENTS.get_or_init(|| {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
        let path = PathBuf::from("/sys/fs/cgroup")
            .join(rel.trim_start_matches('/'))
            .join("memory.events");
        path.is_file().then_some(path)
    });
    let events = std::fs::read_to_string(path.as_ref()?).ok()?;
    events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests;
