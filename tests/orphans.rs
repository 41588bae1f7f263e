//! No orphans (issue 31): every process a script starts is found and ended when the
//! script ends, times out, is interrupted (Ctrl-C), or the runner is SIGKILLed,
//! however it detaches (a double fork, setsid, closed descriptors, never an exec),
//! and the result names what was ended. Through the binary, as the ordinary test user
//! with bwrap hidden (the built-in layer alone: no PID namespace to end them), warm
//! and cold; as the same user on a machine without user namespaces (bwrap on PATH but
//! unable to work), warm and cold; as root with bwrap, warm; and as root with bwrap
//! hidden (the runner's own namespaces: a PID namespace warm, none cold), warm and
//! cold. The modes live in `common/modes.rs`.
//!
//! The fixtures' processes write a marker of the test's into their own command line,
//! so they are found in `/proc` whatever started them; the test kills only those PIDs,
//! and only to clean up after a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::modes::*;
use common::user::*;
use common::*;
use serde_json::Value;

/// How many children `setsid_swarm.py` starts.
const SWARM: usize = 300;

/// A marker no other case shares.
fn new_mark() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("jr-orphan-{:x}-{n}-{nanos:x}", std::process::id())
}

/// The fixture's processes, by their marker. Dropped, it SIGKILLs any still alive (by
/// PID, each checked to carry the marker), so a failed case leaves nothing behind.
struct Marked(String);

impl Marked {
    fn alive(&self) -> Vec<u32> {
        processes_mentioning(&self.0)
    }

    /// Waits up to `limit` for every marked process to be gone; returns those left.
    fn gone_within(&self, limit: Duration) -> Vec<u32> {
        let deadline = Instant::now() + limit;
        loop {
            let left = self.alive();
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        for pid in self.alive() {
            // SAFETY: a plain kill of a PID just seen carrying our marker.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// [`setup`], the marker in the scripts' environment.
fn marked_setup(account: &Account, how: How, fixture: &str, mark: &Marked) -> (Tree, Command) {
    let (tree, mut cmd) = setup(account, how, fixture);
    cmd.arg("--env").arg(format!("ORPHAN_MARK={}", mark.0));
    (tree, cmd)
}

/// Every file under `dir` and their total size.
fn folder_state(dir: &Path) -> (usize, u64) {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .fold((0, 0), |(n, size), e| {
            (n + 1, size + e.metadata().map(|m| m.len()).unwrap_or(0))
        })
}

fn data_dir(r: &Value) -> PathBuf {
    PathBuf::from(r["data_dir"].as_str().unwrap())
}

// --- a double-forked daemon that writes into the data folder -------------------------

/// A daemon's run: the tree, the script's result, the case's name and the marker in
/// the daemon's command line.
type DaemonRun = (Tree, Value, String, String);

/// Runs `fixture` (a script that leaves a daemon and exits 0) in `how`, with `env` in
/// the scripts' environment, and checks that it succeeded, started as `how` starts,
/// and that no daemon outlived the run. `None` where this machine cannot give `how`.
fn daemon_run(
    account: &Account,
    how: How,
    what: &str,
    fixture: &str,
    env: &[&str],
) -> Option<DaemonRun> {
    let case = format!("{what} {}", describe(account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return None;
    }
    let mark = Marked(new_mark());
    let (tree, mut cmd) = marked_setup(account, how, &format!("{fixture}.py"), &mark);
    for var in env {
        cmd.args(["--env", var]);
    }
    let out = output(account, how, cmd);
    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
    let r = tree.result(fixture);
    assert_eq!(r["status"], "succeeded", "{case}: {}", r["stderr_tail"]);
    check_start(&r, how, account, &case);
    let left = mark.gone_within(Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{case}: the daemon outlived the run: {left:?}"
    );
    Some((tree, r, case, mark.0.clone()))
}

/// The PID the fixture wrote into its data folder.
fn daemon_pid(r: &Value) -> u64 {
    std::fs::read_to_string(data_dir(r).join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn daemon_case(account: Account, how: How) {
    let Some((_tree, r, case, _)) = daemon_run(&account, how, "daemon", "orphan_daemon", &[])
    else {
        return;
    };
    let data = data_dir(&r);
    let leaks = r["leaks"].as_array().unwrap();
    if !namespaced(how, &account) {
        let pid = daemon_pid(&r);
        assert!(
            leaks.iter().any(|l| l["pid"] == pid),
            "{case}: the daemon {pid} is not among the leaks: {leaks:?}"
        );
    }
    // The record is final: nothing writes into the folder after it was listed.
    let listed = r["data_files"].as_array().unwrap().len();
    let before = folder_state(&data);
    std::thread::sleep(Duration::from_secs(2));
    let after = folder_state(&data);
    assert_eq!(
        before, after,
        "{case}: the data folder changed after the run"
    );
    assert_eq!(
        listed, after.0,
        "{case}: the result lists {listed} files, the folder holds {}",
        after.0
    );
}

// --- a daemon that also overwrote its environment block ------------------------------

/// The built-in layer alone as an ordinary user holds no PID namespace and no cgroup,
/// and the daemon's environment no longer carries the token: no attempt's sweep can
/// trace it, and the run ends it once its last script is over, saying so.
fn wiped_case(account: Account, how: How) {
    let Some((tree, r, case, _)) = daemon_run(&account, how, "wiped daemon", "orphan_wiped", &[])
    else {
        return;
    };
    let pid = daemon_pid(&r);
    let warnings = tree.metrics()["warnings"].to_string();
    let leaks = r["leaks"].as_array().unwrap();
    let traced = leaks.iter().any(|l| l["pid"].as_u64() == Some(pid));
    assert!(
        traced || warnings.contains(&format!("{pid} (")),
        "{case}: the daemon {pid} is neither a leak nor in the warnings: {warnings}"
    );
}

// --- a daemon whose main thread exited ----------------------------------------------

/// The daemon lives on in a second thread while `/proc/<pid>` shows its main thread's
/// remains: a zombie with no environment and no command line. It is still a live
/// process: the attempt's sweep finds its token through the live thread and names it
/// by its command line; `wiped`, no token is left, and where no PID namespace ended
/// it, the run's end (or the attempt's cgroup) names it, by its command line too.
fn headless_case(account: Account, how: How, wiped: bool) {
    let env: &[&str] = if wiped { &["ORPHAN_WIPE=1"] } else { &[] };
    let what = if wiped {
        "headless wiped daemon"
    } else {
        "headless daemon"
    };
    let Some((tree, r, case, mark)) = daemon_run(&account, how, what, "orphan_headless", env)
    else {
        return;
    };
    let pid = daemon_pid(&r);
    let leaks = r["leaks"].as_array().unwrap();
    let named = |l: &&Value| l["pid"].as_u64() == Some(pid);
    match leaks.iter().find(named) {
        Some(leak) => assert_eq!(leak["command"], mark, "{case}: {leaks:?}"),
        // Ended with its PID namespace, the kernel's doing: nothing to name.
        None if namespaced(how, &account) => {}
        None => {
            let warnings = tree.metrics()["warnings"].to_string();
            assert!(
                wiped && warnings.contains(&format!("{pid} ({mark})")),
                "{case}: the daemon {pid} is neither a leak nor in the warnings: \
                 {leaks:?} {warnings}"
            );
        }
    }
}

#[test]
fn as_user_warm_without_bwrap_a_daemon_whose_main_thread_exited_is_ended() {
    headless_case(Account::user(), WARM, false);
}

#[test]
fn as_user_cold_without_bwrap_a_daemon_whose_main_thread_exited_is_ended() {
    headless_case(Account::user(), COLD, false);
}

#[test]
fn as_user_warm_without_bwrap_a_wiped_daemon_whose_main_thread_exited_is_ended() {
    headless_case(Account::user(), WARM, true);
}

#[test]
fn as_user_cold_without_bwrap_a_wiped_daemon_whose_main_thread_exited_is_ended() {
    headless_case(Account::user(), COLD, true);
}

#[test]
fn as_root_cold_without_bwrap_a_wiped_daemon_whose_main_thread_exited_is_named() {
    if let Some(root) = Account::root("headless wiped daemon as root, cold, bwrap hidden") {
        headless_case(root, COLD, true);
    }
}

#[test]
fn as_root_warm_with_bwrap_a_daemon_whose_main_thread_exited_is_ended() {
    if let Some(root) = Account::root("headless daemon as root, warm, bwrap on PATH") {
        headless_case(root, WARM_BWRAP, false);
    }
}

#[test]
fn as_user_warm_without_bwrap_a_daemon_that_wiped_its_environment_is_ended() {
    wiped_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_daemon_that_wiped_its_environment_is_ended() {
    wiped_case(Account::user(), COLD);
}

#[test]
fn as_user_warm_without_bwrap_a_double_forked_daemon_is_ended() {
    daemon_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_double_forked_daemon_is_ended() {
    daemon_case(Account::user(), COLD);
}

#[test]
fn as_user_warm_without_user_namespaces_a_double_forked_daemon_is_ended() {
    daemon_case(Account::user(), WARM_NO_USERNS);
}

#[test]
fn as_user_cold_without_user_namespaces_a_double_forked_daemon_is_ended() {
    daemon_case(Account::user(), COLD_NO_USERNS);
}

#[test]
fn as_root_warm_with_bwrap_a_double_forked_daemon_is_ended() {
    if let Some(root) = Account::root("orphan daemon as root, warm, bwrap on PATH") {
        daemon_case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_warm_without_bwrap_a_double_forked_daemon_is_ended() {
    if let Some(root) = Account::root("orphan daemon as root, warm, bwrap hidden") {
        daemon_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_a_double_forked_daemon_is_ended() {
    if let Some(root) = Account::root("orphan daemon as root, cold, bwrap hidden") {
        daemon_case(root, COLD);
    }
}

// --- 300 setsid children of a script that times out ----------------------------------

fn swarm_timeout_case(account: Account, how: How) {
    let case = format!("swarm timed out {}", describe(&account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    let mark = Marked(new_mark());
    let (tree, mut cmd) = marked_setup(&account, how, "setsid_swarm.py", &mark);
    cmd.args(["--timeout", "3s", "--grace", "1s"]);
    let out = output(&account, how, cmd);
    assert_eq!(code(&out), 1, "{case}: {}", stderr(&out));
    let r = tree.result("setsid_swarm");
    check_start(&r, how, &account, &case);
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.last().unwrap()["class"],
        "timed_out",
        "{case}: {r}"
    );
    // On a busy machine the timeout may come before all are started: what was started
    // must be ended and named.
    let started: usize = std::fs::read_to_string(data_dir(&r).join("swarm.started"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    eprintln!("{case}: {started} of {SWARM} children started before the timeout");
    assert!(
        started >= 25,
        "{case}: {started} children started: {}",
        r["stderr_tail"]
    );
    let left = mark.gone_within(Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{case}: {} children outlived the run",
        left.len()
    );
    let leaks = r["leaks"].as_array().unwrap().len();
    if !namespaced(how, &account) {
        assert!(
            leaks >= started,
            "{case}: {leaks} leaks named, not {started}"
        );
        assert!(
            tree.metrics()["totals"]["leaks"].as_u64() >= Some(started as u64),
            "{case}: {}",
            tree.metrics()["totals"]
        );
    }
}

#[test]
fn as_user_warm_without_bwrap_a_timed_out_swarm_is_ended() {
    swarm_timeout_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_timed_out_swarm_is_ended() {
    swarm_timeout_case(Account::user(), COLD);
}

#[test]
fn as_user_warm_without_user_namespaces_a_timed_out_swarm_is_ended() {
    swarm_timeout_case(Account::user(), WARM_NO_USERNS);
}

#[test]
fn as_user_cold_without_user_namespaces_a_timed_out_swarm_is_ended() {
    swarm_timeout_case(Account::user(), COLD_NO_USERNS);
}

#[test]
fn as_root_warm_with_bwrap_a_timed_out_swarm_is_ended() {
    if let Some(root) = Account::root("swarm timed out as root, warm, bwrap on PATH") {
        swarm_timeout_case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_warm_without_bwrap_a_timed_out_swarm_is_ended() {
    if let Some(root) = Account::root("swarm timed out as root, warm, bwrap hidden") {
        swarm_timeout_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_a_timed_out_swarm_is_ended() {
    if let Some(root) = Account::root("swarm timed out as root, cold, bwrap hidden") {
        swarm_timeout_case(root, COLD);
    }
}

// --- the same swarm, the runner stopped mid-run: Ctrl-C, or SIGKILL and the sentinel --

/// Starts the swarm under a runner, waits until every child is up, and sends the
/// runner `signal`: SIGINT (Ctrl-C: the runner ends the script and sweeps what
/// escaped its group, then exits 130 with the result written) or SIGKILL (the
/// runner's sentinel ends them). Either way no child outlives it.
fn swarm_stopped_case(account: Account, how: How, signal: i32) {
    let by = match signal {
        libc::SIGINT => "Ctrl-C",
        _ => "runner killed",
    };
    let case = format!("swarm, {by}, {}", describe(&account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    let mark = Marked(new_mark());
    let (tree, mut cmd) = marked_setup(&account, how, "setsid_swarm.py", &mark);
    cmd.args(["--timeout", "300s", "--grace", "1s", "-q"]);
    let mut runner = spawn(&account, how, cmd);
    let deadline = Instant::now() + Duration::from_secs(120);
    while mark.alive().len() < SWARM {
        if Instant::now() > deadline || runner.try_wait().unwrap().is_some() {
            let _ = runner.kill();
            let _ = runner.wait();
            panic!("{case}: {} of {SWARM} children started", mark.alive().len());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Our own child, by its PID: the runner itself, the shells and `setpriv` having
    // exec'd it in their place where there are no user namespaces.
    let exe = std::fs::read_link(format!("/proc/{}/exe", runner.id()));
    assert_eq!(
        exe.as_ref().ok().and_then(|e| e.file_name()),
        account.bin.file_name(),
        "{case}: the child {} is {exe:?}, not the runner",
        runner.id()
    );
    // SAFETY: a plain signal to our own child, by its PID.
    unsafe { libc::kill(runner.id() as i32, signal) };
    let status = runner.wait().unwrap();
    let left = mark.gone_within(Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "{case}: {} children outlived the runner by 10 s",
        left.len()
    );
    if signal != libc::SIGINT {
        return;
    }
    assert_eq!(status.code(), Some(130), "{case}: {status:?}");
    let r = tree.result("setsid_swarm");
    assert_eq!(r["status"], "interrupted", "{case}: {r}");
    if !namespaced(how, &account) {
        let leaks = r["leaks"].as_array().unwrap().len();
        assert!(leaks >= SWARM, "{case}: {leaks} leaks named, not {SWARM}");
    }
}

/// The headless daemon of `orphan_headless.py` (its token kept), and the runner
/// SIGKILLed while the script still runs: the sentinel finds the daemon by the token
/// it reads through the thread that lives, and ends it.
fn headless_runner_killed_case(account: Account, how: How) {
    let case = format!(
        "headless daemon, runner killed, {}",
        describe(&account, how)
    );
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    let mark = Marked(new_mark());
    let (_tree, mut cmd) = marked_setup(&account, how, "orphan_headless.py", &mark);
    cmd.args(["--env", "ORPHAN_WAIT=1", "-q"]);
    let mut runner = spawn(&account, how, cmd);
    let deadline = Instant::now() + Duration::from_secs(120);
    let headless = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    };
    while !mark.alive().iter().any(headless) {
        if Instant::now() > deadline || runner.try_wait().unwrap().is_some() {
            let _ = runner.kill();
            let _ = runner.wait();
            panic!("{case}: the daemon never went headless");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: a plain signal to our own child, by its PID.
    unsafe { libc::kill(runner.id() as i32, libc::SIGKILL) };
    runner.wait().unwrap();
    let left = mark.gone_within(Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "{case}: the daemon outlived the runner: {left:?}"
    );
}

#[test]
fn as_user_warm_without_bwrap_the_sentinel_ends_a_daemon_whose_main_thread_exited() {
    headless_runner_killed_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_the_sentinel_ends_a_daemon_whose_main_thread_exited() {
    headless_runner_killed_case(Account::user(), COLD);
}

fn swarm_runner_killed_case(account: Account, how: How) {
    swarm_stopped_case(account, how, libc::SIGKILL);
}

fn swarm_interrupted_case(account: Account, how: How) {
    swarm_stopped_case(account, how, libc::SIGINT);
}

#[test]
fn as_user_warm_without_bwrap_ctrl_c_ends_a_swarm() {
    swarm_interrupted_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_ctrl_c_ends_a_swarm() {
    swarm_interrupted_case(Account::user(), COLD);
}

#[test]
fn as_user_warm_without_user_namespaces_ctrl_c_ends_a_swarm() {
    swarm_interrupted_case(Account::user(), WARM_NO_USERNS);
}

#[test]
fn as_user_cold_without_user_namespaces_ctrl_c_ends_a_swarm() {
    swarm_interrupted_case(Account::user(), COLD_NO_USERNS);
}

#[test]
fn as_root_warm_with_bwrap_ctrl_c_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, Ctrl-C, as root, warm, bwrap on PATH") {
        swarm_interrupted_case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_warm_without_bwrap_ctrl_c_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, Ctrl-C, as root, warm, bwrap hidden") {
        swarm_interrupted_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_ctrl_c_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, Ctrl-C, as root, cold, bwrap hidden") {
        swarm_interrupted_case(root, COLD);
    }
}

#[test]
fn as_user_warm_without_bwrap_the_sentinel_ends_a_swarm() {
    swarm_runner_killed_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_the_sentinel_ends_a_swarm() {
    swarm_runner_killed_case(Account::user(), COLD);
}

#[test]
fn as_user_warm_without_user_namespaces_the_sentinel_ends_a_swarm() {
    swarm_runner_killed_case(Account::user(), WARM_NO_USERNS);
}

#[test]
fn as_user_cold_without_user_namespaces_the_sentinel_ends_a_swarm() {
    swarm_runner_killed_case(Account::user(), COLD_NO_USERNS);
}

#[test]
fn as_root_warm_with_bwrap_the_sentinel_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, runner killed, as root, warm, bwrap on PATH") {
        swarm_runner_killed_case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_warm_without_bwrap_the_sentinel_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, runner killed, as root, warm, bwrap hidden") {
        swarm_runner_killed_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_the_sentinel_ends_a_swarm() {
    if let Some(root) = Account::root("swarm, runner killed, as root, cold, bwrap hidden") {
        swarm_runner_killed_case(root, COLD);
    }
}
