//! The results folder is a ledger (issue 25): a run changes only the records of the
//! scripts it ran; the rest (not selected, skipped by `--fail-fast`, not started
//! before Ctrl-C) keep their earlier record byte for byte and are reported as carried
//! from the run that made it. Each attempt starts in an empty data folder, and what a
//! record replaces is kept in `history/<run_id>/`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A script that writes `simulation_results.json` into its data folder and says so.
fn ok_script(name: &str) -> String {
    format!(
        "import json, os\n\
         out = os.environ['GNN_OUTPUT_DIR']\n\
         json.dump({{'model': '{name}'}}, open(os.path.join(out, 'simulation_results.json'), 'w'))\n\
         print('{name} done', flush=True)\n"
    )
}

/// A script that fails before writing anything.
const FAILS: &str = "raise SystemExit('deliberate failure')\n";

fn tree_of(scripts: &[(&str, &str)]) -> Tree {
    let t = Tree::new();
    for (name, body) in scripts {
        t.write(&format!("m/jax/{name}.py"), body);
    }
    t
}

fn run_id(t: &Tree) -> String {
    t.metrics()["run"]["run_id"].as_str().unwrap().to_string()
}

/// The metrics line of `id`.
fn line(t: &Tree, id: &str) -> Value {
    let m = t.metrics();
    let scripts = m["scripts"].as_array().unwrap();
    let found = scripts.iter().find(|s| s["id"] == id);
    found.unwrap_or_else(|| panic!("{id} not in {m:#}")).clone()
}

/// Every file under `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_path_buf();
                let bytes = std::fs::read(&path).unwrap_or_default();
                out.insert(rel, (bytes, meta.modified().unwrap()));
            }
        }
    }
    out
}

/// The files of one script's record: its result, logs and data folder.
fn record_of(t: &Tree, id: &str) -> BTreeMap<PathBuf, (Vec<u8>, std::time::SystemTime)> {
    let all = snapshot(&t.results_dir());
    let mine = |p: &Path| {
        let s = p.to_string_lossy();
        s == format!("{id}_results.json")
            || s.starts_with(&format!("logs/{id}."))
            || s.starts_with(&format!("data/{id}/"))
    };
    all.into_iter().filter(|(p, _)| mine(p)).collect()
}

/// The `planned` events of a dry run, as (id, action).
fn planned(t: &Tree, args: &[&str]) -> BTreeMap<String, String> {
    let events = t.root().join("plan.ndjson");
    let mut all = vec!["--dry-run", "--events", events.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = t.run(&all);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "planned")
        .map(|e| {
            let s = &e["script"];
            (
                s["id"].as_str().unwrap().into(),
                s["action"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn a_script_edited_to_fail_claims_no_data_of_the_run_before() {
    let t = tree_of(&[
        ("ok_alpha", &ok_script("ok_alpha")),
        ("ok_beta", &ok_script("ok_beta")),
    ]);
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let first = run_id(&t);
    let data = t.results_dir().join("data/ok_beta");
    assert!(data.join("simulation_results.json").is_file());
    let alpha_before = record_of(&t, "ok_alpha");

    t.write("m/jax/ok_beta.py", FAILS);
    let out = t.run(&["-k", "ok_beta"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let second = run_id(&t);
    let beta = t.result("ok_beta");
    assert_eq!(beta["status"], "failed");
    assert_eq!(beta["data_files"], serde_json::json!([]), "{beta:#}");
    assert!(
        !data.join("simulation_results.json").exists(),
        "the failed attempt's data folder holds the earlier run's file"
    );
    // The earlier record is kept, not lost: in this run's history folder.
    let history = t.results_dir().join("history").join(&second);
    assert!(history
        .join("data/ok_beta/simulation_results.json")
        .is_file());
    let kept = read_json(&history.join("ok_beta_results.json"));
    assert_eq!(kept["status"], "succeeded");
    assert_eq!(kept["run_id"], first.as_str());
    assert!(history.join("logs/ok_beta.stdout.log").is_file());
    // The script -k left out is carried, its record untouched.
    assert_eq!(record_of(&t, "ok_alpha"), alpha_before);
    let alpha = line(&t, "ok_alpha");
    assert_eq!(alpha["status"], "carried", "{alpha:#}");
    assert_eq!(alpha["carried_from"], first.as_str());
    assert_eq!(alpha["carried_status"], "succeeded");
}

#[test]
fn in_gnn_layout_the_earlier_data_moves_to_history_too() {
    let t = Tree::new();
    let render = "11_render_output";
    t.write(&format!("{render}/one/jax/One_jax.py"), &ok_script("one"));
    let out = t.run(&["-q"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sim = t.root().join("12_execute_output/one/jax/simulation_data");
    assert!(sim.join("simulation_results.json").is_file());

    t.write(&format!("{render}/one/jax/One_jax.py"), FAILS);
    let out = t.run(&["-q"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(!sim.join("simulation_results.json").exists());
    let history = t.results_dir().join("history").join(run_id(&t));
    let kept = history.join("12_execute_output/one/jax/simulation_data/simulation_results.json");
    assert!(kept.is_file(), "{} is missing", kept.display());
}

#[test]
fn a_selection_of_nothing_changes_nothing() {
    let t = tree_of(&[
        ("ok_alpha", &ok_script("ok_alpha")),
        ("ok_beta", &ok_script("ok_beta")),
        ("fail_one", FAILS),
    ]);
    assert_eq!(code(&t.run(&[])), 1);
    let before = snapshot(&t.results_dir());
    let out = t.run(&["-k", "nomatch"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("0 of 3 scripts"), "{}", stderr(&out));
    assert!(stderr(&out).contains("nomatch"), "{}", stderr(&out));
    let lock = Path::new(".jax-runner.lock");
    let strip = |mut s: BTreeMap<PathBuf, _>| {
        s.remove(lock);
        s
    };
    assert_eq!(strip(snapshot(&t.results_dir())), strip(before));
}

#[test]
fn rerun_failed_after_a_selection_runs_only_the_failures() {
    let t = tree_of(&[
        ("ok_alpha", &ok_script("ok_alpha")),
        ("ok_beta", &ok_script("ok_beta")),
        ("fail_one", FAILS),
        ("fail_two", FAILS),
    ]);
    assert_eq!(code(&t.run(&[])), 1);
    // What this run ran succeeded: carried failures are not this run's, and the
    // summary says they are carried, not failed.
    let out = t.run(&["-k", "ok_alpha"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("] 1 of 4 succeeded, 3 carried (2 still failing); "),
        "{said}"
    );
    // One line for the three, naming the two that stand failed (issue 32).
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("CARRIED")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("CARRIED 3 from earlier runs (")
            && lines[0].ends_with(", 2 of them failing: fail_one, fail_two"),
        "{}",
        lines[0]
    );
    assert_eq!(t.result("ok_alpha")["run_id"], run_id(&t).as_str());
    let m = t.metrics();
    assert_eq!(m["totals"]["carried"], 3, "{m:#}");
    // Counts of attempts are this run's alone: one script started (issue 32).
    let classes: u64 = m["totals"]["by_class"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(classes, 1, "{m:#}");
    assert!(m["totals"]["warm_starts"].as_u64().unwrap() <= 1, "{m:#}");
    let one = &m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "ok_alpha")
        .unwrap()["execution_time_s"];
    assert_eq!(&m["totals"]["total_execution_time"], one, "{m:#}");
    assert!(
        said.contains(" of 1 started warm"),
        "M is the scripts started: {said}"
    );
    let plan = planned(&t, &["--rerun-failed"]);
    let want: BTreeMap<String, String> = [
        ("fail_one", "run"),
        ("fail_two", "run"),
        ("ok_alpha", "keep"),
        ("ok_beta", "keep"),
    ]
    .into_iter()
    .map(|(a, b)| (a.into(), b.into()))
    .collect();
    assert_eq!(plan, want);
}

#[test]
fn ctrl_c_leaves_the_scripts_it_never_started_as_they_were() {
    let names = ["ok_a", "ok_b", "ok_c", "ok_d"];
    let t = Tree::new();
    for n in names {
        t.write(&format!("m/jax/{n}.py"), &ok_script(n));
    }
    assert_eq!(code(&t.run(&[])), 0);
    let first = run_id(&t);
    let before: Vec<_> = names.iter().map(|n| record_of(&t, n)).collect();
    // Without history of its own, a script is expected to take as long as its size
    // says: this one, large, runs first.
    let pad = format!("# {}\n", "pad ".repeat(5000));
    t.write(
        "m/jax/long.py",
        &format!("import time\nprint('long started', flush=True)\ntime.sleep(120)\n{pad}"),
    );
    let mut child = t.spawn(&["--jobs", "1", "--grace", "2s"]);
    wait_for_output(&t.results_dir().join("logs/long.stdout.log"));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));

    assert_eq!(t.result("long")["status"], "interrupted");
    for (n, before) in names.iter().zip(&before) {
        assert_eq!(&record_of(&t, n), before, "{n}'s record changed");
        let l = line(&t, n);
        assert_eq!(l["status"], "carried", "{l:#}");
        assert_eq!(l["carried_from"], first.as_str());
    }
    assert_eq!(t.metrics()["totals"]["carried"], 4);
    let plan = planned(&t, &["--resume"]);
    for n in names {
        assert_eq!(plan[n], "keep", "{plan:?}");
    }
    assert_eq!(plan["long"], "run");
}

#[test]
fn fail_fast_carries_the_scripts_it_skipped_and_junit_shows_no_old_output() {
    let t = tree_of(&[
        (
            "first",
            "import time\ntime.sleep(1.5)\nraise SystemExit('late failure')\n",
        ),
        ("ok_b", &ok_script("ok_b")),
        ("ok_c", &ok_script("ok_c")),
    ]);
    assert_eq!(code(&t.run(&["-j", "1"])), 1);
    let first = run_id(&t);
    let before = [record_of(&t, "ok_b"), record_of(&t, "ok_c")];
    // Longest first: `first` runs, fails, and stops the run.
    let out = t.run(&["-j", "1", "--retries", "0", "--fail-fast"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(t.result("first")["attempts"].as_array().unwrap().len(), 1);
    for (n, before) in ["ok_b", "ok_c"].iter().zip(&before) {
        assert_eq!(&record_of(&t, n), before, "{n}'s record changed");
        let l = line(&t, n);
        assert_eq!(l["status"], "carried", "{l:#}");
        assert_eq!(l["carried_from"], first.as_str());
    }
    let junit = std::fs::read_to_string(t.results_dir().join("junit.xml")).unwrap();
    for n in ["ok_b", "ok_c"] {
        assert!(
            !junit.contains(&format!("{n} done")),
            "junit.xml shows the earlier run's output of {n} as this run's: {junit}"
        );
    }
}

#[test]
fn each_attempt_starts_in_an_empty_data_folder() {
    // Attempt 1 leaves a marker and fails; attempt 2 fails if it finds the marker.
    let body = "import os, sys\n\
        out = os.environ['GNN_OUTPUT_DIR']\n\
        attempt = os.environ.get('JAX_RUNNER_ATTEMPT', '1')\n\
        if os.path.exists(os.path.join(out, 'attempt1.txt')):\n    sys.exit('saw the first attempt\\'s file')\n\
        open(os.path.join(out, 'attempt%s.txt' % attempt), 'w').write(attempt)\n\
        sys.exit(1 if attempt == '1' else 0)\n";
    let t = tree_of(&[("retried", body)]);
    let args = [
        "--retry-on",
        "script_error",
        "--retries",
        "1",
        "--retry-delay",
        "0s",
    ];
    let out = t.run(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("retried");
    assert_eq!(r["attempts"].as_array().unwrap().len(), 2, "{r:#}");
    assert_eq!(
        r["data_files"],
        serde_json::json!(["attempt2.txt"]),
        "{r:#}"
    );
    let kept = t
        .results_dir()
        .join("history")
        .join(run_id(&t))
        .join("attempts/retried/attempt1/attempt1.txt");
    assert!(kept.is_file(), "{} is missing", kept.display());
}

/// History has a bound a user sets (issue 32): a script writing 2 MB per run under
/// `--history-size 3M` keeps one earlier run's copy, and the run says what it removed.
#[test]
fn history_stays_within_its_size_and_says_when_it_prunes() {
    let t = tree_of(&[(
        "writer",
        "import os\nd = os.environ['GNN_OUTPUT_DIR']\nopen(os.path.join(d, 'big.bin'), 'wb').write(os.urandom(2 * 1024 * 1024))\n",
    )]);
    let mut said = String::new();
    for _ in 0..4 {
        let out = t.run(&["--history-size", "3M"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        said.push_str(&stderr(&out));
    }
    let history = t.results_dir().join("history");
    let runs: Vec<_> = std::fs::read_dir(&history).unwrap().flatten().collect();
    // The current run's folder and one earlier run's: 4 MB, never the 6+ of three.
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        said.contains("earlier run(s)")
            && said.contains("within 3 MiB (--history-runs, --history-size)"),
        "{said}"
    );
}
