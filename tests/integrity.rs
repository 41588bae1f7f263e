//! The runner killed hard: no script survives it, and no JSON file it leaves is torn.

mod common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

fn sigkill(child: &mut Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

#[test]
fn sigkill_of_the_runner_leaves_no_script_running() {
    let t = Tree::new();
    t.fixture("hang.py", "a/jax/hang.py");
    t.fixture("ignore_sigterm.py", "b/jax/stubborn.py");
    let mut runner = t.spawn(&["--jobs", "2"]);
    wait_for_output(&t.results_dir().join("logs/hang.stdout.log"));
    wait_for_output(&t.results_dir().join("logs/stubborn.stdout.log"));
    let scripts = [
        t.root().join("a/jax/hang.py"),
        t.root().join("b/jax/stubborn.py"),
    ];
    let running = || -> Vec<u32> {
        scripts
            .iter()
            .flat_map(|s| processes_in(s.parent().unwrap()))
            .collect()
    };
    // Each script shows up as a process working in its folder (warm or cold).
    for s in &scripts {
        assert!(
            !processes_in(s.parent().unwrap()).is_empty(),
            "{} runs",
            s.display()
        );
    }
    sigkill(&mut runner);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = running();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "scripts outlived the runner: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A small deterministic generator: the kill moments vary, the test does not flake
/// on one unlucky seed.
fn delays(n: usize) -> Vec<Duration> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_millis(100 + x % 2500)
        })
        .collect()
}

/// Waits until a results file written after `since` exists; fails after a minute, or
/// when the runner ends without one.
fn first_result_since(t: &Tree, runner: &mut Child, since: std::time::SystemTime) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Whether it ended, asked before looking: a runner that ended has written
        // every result it was going to.
        let ended = runner.try_wait().unwrap();
        if Instant::now() > deadline {
            sigkill(runner);
            panic!(
                "no result in {} within a minute of the runner's start",
                t.results_dir().display()
            );
        }
        let fresh = std::fs::read_dir(t.results_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with("_results.json"))
            .filter_map(|e| e.metadata().ok()?.modified().ok())
            .any(|m| m >= since);
        if fresh {
            return;
        }
        if let Some(status) = ended {
            panic!("the runner ended ({status}) without writing a result");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn json_files_are_never_torn_when_the_runner_is_killed_at_random_moments() {
    let t = Tree::new();
    for i in 0..6 {
        t.fixture("ok_plain.py", &format!("m{i}/jax/plain.py"));
        t.fixture("ok_jax.py", &format!("m{i}/jax/jaxy.py"));
    }
    let mut checked = 0;
    for delay in delays(8) {
        let round = std::time::SystemTime::now();
        let mut runner = t.spawn(&["--jobs", "2"]);
        // The random moment counts from this run's first finished script, so the kills
        // land while results are being written however slow the machine starts them.
        first_result_since(&t, &mut runner, round);
        std::thread::sleep(delay);
        sigkill(&mut runner);
        // The scripts' own data folders hold what the scripts wrote (this fixture writes
        // with a plain `open(..., "w")`): a script killed mid-write tears its own file,
        // which is the script's to guard, and the next round's run keeps that folder
        // in its history (`history/<run>/data`). Every file the runner writes must be
        // whole.
        let runner_files = walkdir::WalkDir::new(t.results_dir())
            .into_iter()
            .filter_entry(|e| !(e.file_type().is_dir() && e.file_name() == "data"));
        for entry in runner_files {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy();
            if entry.file_type().is_file() && name.ends_with(".json") && !name.starts_with('.') {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                    panic!(
                        "{} is torn after a kill at {delay:?}: {e}",
                        entry.path().display()
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 10, "the kills left files to check ({checked})");
    // The lock died with the runner: a new run takes the folder and completes.
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Whether the runner can make cgroups here (root on a writable cgroupfs, as in CI):
/// the promises below rest on them. Without them the test fails, unless
/// `JAX_RUNNER_TEST_SKIP` names what is missing (see `common::prereq`).
fn cgroups_usable(case: &str) -> bool {
    use prereq::Prereq;
    if !prereq::require(Prereq::Root, prereq::root(), case) {
        return false;
    }
    let fs = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .any(|d| std::path::Path::new(d).join("cgroup.procs").exists());
    let present = if fs {
        Ok(())
    } else {
        Err("no cgroup.procs under /sys/fs/cgroup".to_string())
    };
    prereq::require(Prereq::Cgroups, present, case)
}

fn pid_in(file: &std::path::Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", file.display());
}

fn gone_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        // Gone, or a zombie waiting for whoever inherited it; not a process whose main
        // thread alone has exited (its stat says Z while its other threads run on).
        if jax_runner::runner::sys::ended(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Unsandboxed, a child that left the script's group and session and dropped the
/// run's token from its environment is still found (in the attempt's cgroup), killed
/// and reported.
#[test]
fn a_child_that_hides_its_token_and_session_is_found_and_reported() {
    if !cgroups_usable("a child that hides its token and session") {
        return;
    }
    let t = Tree::new();
    t.fixture("escapee.py", "m/jax/escapee.py");
    let out = t.run(&["--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("escapee");
    let data = std::path::PathBuf::from(r["data_dir"].as_str().unwrap());
    let pid = pid_in(&data.join("escapee.pid"));
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "the escapee {pid} lives on"
    );
    let leaks = r["leaks"].as_array().unwrap();
    assert!(
        leaks.iter().any(|l| l["pid"] == pid),
        "the escapee is reported: {r}"
    );
}

/// SIGKILL of the runner while an unsandboxed script runs: the script dies with it
/// (its death signal) and so does the child it hid, which the sentinel kills.
#[test]
fn sigkill_of_the_runner_takes_a_hidden_child_with_it() {
    if !cgroups_usable("SIGKILL of the runner with a hidden child") {
        return;
    }
    let t = Tree::new();
    t.fixture("escapee.py", "m/jax/escapee.py");
    let mut runner = t.spawn(&["--sandbox", "off", "--env", "ESCAPEE_WAIT=1"]);
    let pid = pid_in(&t.results_dir().join("data/escapee/escapee.pid"));
    sigkill(&mut runner);
    assert!(
        gone_within(pid, Duration::from_secs(10)),
        "the hidden child {pid} outlived the runner"
    );
}
