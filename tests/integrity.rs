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

/// Waits (up to a minute) until a results file written after `since` exists.
fn first_result_since(t: &Tree, since: std::time::SystemTime) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
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
        first_result_since(&t, round);
        std::thread::sleep(delay);
        sigkill(&mut runner);
        // The scripts' own data folders hold what the scripts wrote (this fixture writes
        // with a plain `open(..., "w")`): a script killed mid-write tears its own file,
        // which is the script's to guard. Every file the runner writes must be whole.
        let data = t.results_dir().join("data");
        let runner_files = walkdir::WalkDir::new(t.results_dir())
            .into_iter()
            .filter_entry(|e| e.path() != data);
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
