//! No orphans (issue 31): every process a script starts is found and ended when the
//! script ends, times out, or the runner is SIGKILLed, however it detaches (a double
//! fork, setsid, closed descriptors, never an exec), and the result names what was
//! ended. Through the binary, as the ordinary test user with bwrap hidden (the
//! built-in layer alone: no PID namespace to end them), warm and cold; as the same
//! user on a machine without user namespaces (bwrap on PATH but unable to work), warm
//! and cold; as root with bwrap, warm; and as root with bwrap hidden (the runner's
//! own namespaces: a PID namespace warm, none cold), warm and cold.
//!
//! The fixtures' processes write a marker of the test's into their own command line,
//! so they are found in `/proc` whatever started them; the test kills only those PIDs,
//! and only to clean up after a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::user::*;
use common::*;
use serde_json::Value;

/// How a case runs.
#[derive(Debug, Clone, Copy)]
struct How {
    warm: bool,
    /// bwrap on PATH, or hidden from it (`PATH=/nonexistent`: the built-in layer,
    /// and a root runner's own namespaces).
    bwrap: bool,
    /// The runner (an ordinary user's) in a user namespace whose
    /// `user.max_user_namespaces` is 0: a machine without user namespaces, where bwrap
    /// is on PATH but cannot work (see `Account::spawn_without_user_namespaces`).
    no_userns: bool,
}

const WARM: How = How {
    warm: true,
    bwrap: false,
    no_userns: false,
};
const COLD: How = How {
    warm: false,
    ..WARM
};
const WARM_BWRAP: How = How {
    bwrap: true,
    ..WARM
};
/// bwrap on PATH, on a machine that has no user namespaces for it.
const WARM_NO_USERNS: How = How {
    no_userns: true,
    ..WARM_BWRAP
};
const COLD_NO_USERNS: How = How {
    warm: false,
    ..WARM_NO_USERNS
};

/// The fixture's processes in a PID namespace die with it (the kernel's doing, not
/// the runner's sweep), so only without one must the result list each as a leak.
/// bwrap makes one where it works; a root runner's own namespaces make one for a
/// warm start's init, none for a cold start.
fn namespaced(how: How, account: &Account) -> bool {
    (how.bwrap && !how.no_userns) || (account.is_root() && how.warm)
}

/// Runs the case's runner to its end.
fn output(account: &Account, how: How, mut cmd: Command) -> Output {
    if !how.no_userns {
        return cmd.output().expect("the runner runs");
    }
    account
        .spawn_without_user_namespaces(&cmd, |_| {})
        .wait_with_output()
        .expect("the runner ends")
}

/// Starts the case's runner, stdio closed; the child's PID is the runner's (see
/// `Account::spawn_without_user_namespaces`).
fn spawn(account: &Account, how: How, mut cmd: Command) -> Child {
    if !how.no_userns {
        return cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the runner starts");
    }
    account.spawn_without_user_namespaces(&cmd, |outer| {
        outer.stdout(Stdio::null()).stderr(Stdio::null());
    })
}

/// Whether the case may run: the no-user-namespace cases need root to make the
/// namespace (see `common::prereq`).
fn root_here(how: How, case: &str) -> bool {
    !how.no_userns || prereq::require(prereq::Prereq::Root, prereq::root(), case)
}

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

/// A tree holding `fixture` (as `m/jax/<fixture>`), given to the account, and the
/// runner's command for the case, the marker in the scripts' environment.
fn setup(account: &Account, how: How, fixture: &str, mark: &Marked) -> (Tree, Command) {
    let tree = account.tree();
    tree.fixture(fixture, &format!("m/jax/{fixture}"));
    account.give(&tree.root());
    let mut cmd = account.runner(&tree);
    if !how.warm {
        cmd.args(["--warm-start", "off"]);
    }
    if !how.bwrap {
        cmd.env("PATH", "/nonexistent");
    }
    cmd.arg("--env").arg(format!("ORPHAN_MARK={}", mark.0));
    (tree, cmd)
}

fn describe(account: &Account, how: How) -> String {
    format!(
        "as {}, {}, bwrap {}",
        account.who.name(),
        if how.warm { "warm" } else { "cold" },
        match (how.bwrap, how.no_userns) {
            (_, true) => "on PATH, no user namespaces",
            (true, false) => "on PATH",
            (false, false) => "hidden",
        }
    )
}

/// The case ran as asked: sandboxed, warm or cold, without bwrap where there are no
/// user namespaces, and in a root runner's own namespaces where bwrap is hidden.
fn check_start(r: &Value, how: How, account: &Account, case: &str) {
    let start = &r["attempts"][0]["start"];
    let expected = if how.warm { "warm" } else { "cold" };
    assert_eq!(
        start, expected,
        "{case}: started {start}: {}",
        r["attempts"][0]["cold_start_reason"]
    );
    assert!(
        r["sandbox"]["layers"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{case}: ran unsandboxed: {}",
        r["sandbox"]
    );
    let has = |layer: &str| {
        r["sandbox"]["layers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == layer))
    };
    if how.no_userns {
        assert!(!has("bwrap"), "{case}: {}", r["sandbox"]);
    }
    if account.is_root() && !how.bwrap {
        assert!(has("namespaces"), "{case}: {}", r["sandbox"]);
    }
}

/// Whether bwrap is here when the case needs it (see `common::prereq`).
/// Without user namespaces bwrap cannot work, whether it is here or not.
fn bwrap_here(how: How, case: &str) -> bool {
    !how.bwrap || how.no_userns || prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), case)
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

fn daemon_case(account: Account, how: How) {
    let case = format!("daemon {}", describe(&account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    let mark = Marked(new_mark());
    let (tree, cmd) = setup(&account, how, "orphan_daemon.py", &mark);
    let out = output(&account, how, cmd);
    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
    let r = tree.result("orphan_daemon");
    assert_eq!(r["status"], "succeeded", "{case}: {}", r["stderr_tail"]);
    check_start(&r, how, &account, &case);
    let left = mark.gone_within(Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{case}: the daemon outlived the run: {left:?}"
    );
    let data = data_dir(&r);
    let leaks = r["leaks"].as_array().unwrap();
    if !namespaced(how, &account) {
        let pid: u64 = std::fs::read_to_string(data.join("daemon.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
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
    let (tree, mut cmd) = setup(&account, how, "setsid_swarm.py", &mark);
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

// --- the same swarm, the runner SIGKILLed mid-run: the sentinel ----------------------

fn swarm_runner_killed_case(account: Account, how: How) {
    let case = format!("swarm, runner killed, {}", describe(&account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    let mark = Marked(new_mark());
    let (_tree, mut cmd) = setup(&account, how, "setsid_swarm.py", &mark);
    cmd.args(["--timeout", "300s", "-q"]);
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
    // SAFETY: a plain kill of our own child, by its PID.
    unsafe { libc::kill(runner.id() as i32, libc::SIGKILL) };
    runner.wait().unwrap();
    let left = mark.gone_within(Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "{case}: {} children outlived the runner by 10 s",
        left.len()
    );
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
