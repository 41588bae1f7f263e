//! The short switches through the binary: `-x` and `--fail-fast=now`, `--lf`, script
//! paths as trailing arguments, bare-number durations, and the way out an unwritable
//! results folder names.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Each script's id and status in the run's metrics, sorted by id.
fn statuses(t: &Tree) -> Vec<(String, String)> {
    let m = t.metrics();
    let mut all: Vec<(String, String)> = m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().into(),
                s["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    all.sort();
    all
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A fails, b and c succeed.
fn one_failure() -> Tree {
    let t = Tree::new();
    t.fixture("fail_exception.py", "a/jax/a.py");
    t.fixture("ok_plain.py", "b/jax/b.py");
    t.fixture("ok_plain.py", "c/jax/c.py");
    t
}

#[test]
fn x_stops_after_the_first_failure_and_lf_reruns_only_failures() {
    let t = Tree::new();
    for m in ["a", "b", "c"] {
        t.fixture("fail_exception.py", &format!("{m}/jax/{m}.py"));
    }
    let out = t.run(&["-j", "1", "--retries", "0", "-x"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["totals"]["failed"], 1, "{m:#}");
    assert_eq!(m["totals"]["skipped"], 2, "{m:#}");
    assert_eq!(m["run"]["settings"]["fail-fast"]["value"], "wait");

    let t = one_failure();
    assert_eq!(code(&t.run(&["--retries", "0"])), 1);
    let out = t.run(&["--retries", "0", "--lf"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let m = t.metrics();
    for s in m["scripts"].as_array().unwrap() {
        let rerun = s["id"] == "a";
        assert_eq!(s["resumed"] == Value::Bool(true), !rerun, "{s:#}");
    }
    assert_eq!(m["run"]["settings"]["rerun-failed"]["value"], "true");
}

#[test]
fn fail_fast_now_stops_running_scripts_and_keeps_their_logs() {
    let t = Tree::new();
    t.fixture("fail_exception.py", "a/jax/fails.py");
    // The largest script starts first (no history yet): padded so the sleeper is
    // running when the failure comes, whatever the fixtures' sizes.
    let pad = "#".repeat(20_000);
    t.write(
        "b/jax/sleeper.py",
        &format!("import time\nprint('sleeping now', flush=True)\ntime.sleep(60)\n{pad}\n"),
    );
    t.fixture("ok_plain.py", "c/jax/later.py");
    let started = Instant::now();
    let out = t.run(&[
        "-j",
        "2",
        "--retries",
        "0",
        "--grace",
        "2s",
        "--fail-fast=now",
    ]);
    let took = started.elapsed();
    assert_eq!(code(&out), 1, "not 130: {}", stderr(&out));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let all = statuses(&t);
    assert_eq!(
        all.iter().filter(|(_, s)| s == "failed").count(),
        1,
        "{all:?}"
    );
    assert!(
        all.contains(&("sleeper".into(), "interrupted".into())),
        "{all:?}"
    );
    let log = t.results_dir().join("logs/sleeper.stdout.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("sleeping now"), "{text}");
    let m = t.metrics();
    assert_eq!(m["run"]["settings"]["fail-fast"]["value"], "now");
    assert_eq!(m["run"]["interrupted"], false);
}

#[test]
fn trailing_script_paths_select_those_scripts() {
    let t = one_failure();
    // Relative to the current folder.
    let out = t
        .cmd()
        .current_dir(t.root())
        .args(["b/jax/b.py"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(statuses(&t), pairs(&[("b", "succeeded")]));
    assert_eq!(t.metrics()["totals"]["total_scripts"], 1);
    // Absolute, and a quoted glob.
    let abs = t.root().join("c/jax/c.py");
    let out = t.cmd().arg(&abs).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // b's record from the run before is carried, untouched; a never ran.
    let carried = [("b", "carried"), ("c", "succeeded")];
    assert_eq!(statuses(&t), pairs(&carried));
    let glob = format!("{}/[bc]/jax/*.py", t.root().display());
    let out = t.cmd().arg(&glob).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let both = [("b", "succeeded"), ("c", "succeeded")];
    assert_eq!(statuses(&t), pairs(&both));
    // As the reports print it, relative to --output-dir, from a folder elsewhere.
    let out = t.cmd().current_dir("/").arg("c/jax/c.py").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_id = &t.metrics()["run"]["run_id"];
    assert_eq!(&t.result("c")["run_id"], run_id, "c ran in this run");
    assert_ne!(&t.result("b")["run_id"], run_id, "b did not");
    // Outside the tree: a usage error that says so.
    let elsewhere = Tree::new();
    let stray = elsewhere.fixture("ok_plain.py", "x/jax/x.py");
    let out = t.cmd().arg(&stray).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("outside --output-dir"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bare_number_is_seconds() {
    let t = Tree::new();
    t.write(
        "s/jax/sleeper.py",
        "import time\nprint('up', flush=True)\ntime.sleep(60)\n",
    );
    let started = Instant::now();
    let out = t.run(&["--timeout", "2", "--grace", "1", "--retries", "0"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(t.result("sleeper")["status"], "timed_out");
    let m = t.metrics();
    assert_eq!(m["run"]["settings"]["timeout"]["value"], "2");
}

#[test]
fn an_unwritable_results_folder_names_the_way_out() {
    let t = one_failure();
    let file = t.write("not_a_folder", "");
    let out = t.run(&["--results-dir", &file.join("results").display().to_string()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--results-dir"), "{}", stderr(&out));
}

/// Unmounts the read-only bind mount, whatever the test's outcome.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_read_only_results_folder_names_the_way_out() {
    use common::prereq::{self, Prereq};
    let case = "a_read_only_results_folder_names_the_way_out";
    if !prereq::require(Prereq::Root, prereq::root(), case) {
        return;
    }
    let t = one_failure();
    let ro = tempfile::tempdir().unwrap();
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .arg(ro.path())
            .arg(ro.path())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !mount(&["--bind"]) {
        eprintln!("{case}: bind mounts are not allowed here; the message is unit-tested");
        return;
    }
    let _unmount = Unmount(ro.path().to_path_buf());
    assert!(mount(&["-o", "remount,bind,ro"]), "remount read-only");
    let out = t.run(&["--results-dir", &ro.path().display().to_string()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("Read-only") && err.contains("--results-dir"),
        "{err}"
    );
}

/// `run.settings` holds each option's effective value: one left to its default that
/// the run decides shows what it decided, its source still `default`.
#[test]
fn the_settings_hold_what_the_run_decided() {
    let t = Tree::new();
    t.write("m/deep/jax/ok.py", "print('ok')\n");
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = t.metrics();
    let (run, settings) = (&m["run"], &m["run"]["settings"]);
    for (option, value) in [
        ("jobs", run["jobs"].to_string()),
        (
            "results-dir",
            run["results_dir"].as_str().unwrap().to_string(),
        ),
        ("retry-on", "killed_by_signal".to_string()),
        ("recursive", "true".to_string()),
    ] {
        assert_eq!(settings[option]["value"], value, "{option}: {settings}");
        assert_eq!(settings[option]["source"], "default", "{option}");
    }
}
