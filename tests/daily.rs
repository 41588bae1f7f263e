//! Everyday workflow through the binary: `-k/--filter` and `--exclude`, `--fail-fast`
//! and `--max-fail`, `--dry-run`, `jax-runner.toml` profiles with overrides and the
//! `JAX_RUNNER_*` variables (and their precedence), `--jax-trace`, `--no-capture`.

mod common;

use common::*;
use serde_json::Value;

/// Ids of the scripts in the run's metrics, sorted.
fn ran_ids(t: &Tree) -> Vec<String> {
    script_ids(&t.metrics())
}

/// Three plain scripts in three model folders.
fn three_models() -> Tree {
    let t = Tree::new();
    for m in ["alpha", "beta", "gamma"] {
        t.fixture("ok_plain.py", &format!("{m}/jax/{m}_model.py"));
    }
    t
}

#[test]
fn filters_pick_scripts_by_id_or_path_and_excludes_drop_them() {
    let t = three_models();
    // A substring of the path, and a glob over the id.
    let out = t.run(&["-k", "alpha/", "--filter", "gam*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(ran_ids(&t), ["alpha_model", "gamma_model"]);
    let out = t.run(&["--exclude", "*beta*"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(ran_ids(&t), ["alpha_model", "gamma_model"]);
    // `list` takes the same options.
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["list", "--json", "-k", "beta", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: Vec<&str> = doc["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["beta_model"]);
    // A pattern that selects nothing of a tree with scripts is a usage error (exit 2)
    // that names the count: a run would change nothing.
    let out = t.run(&["-k", "nothing-matches-this"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("0 of 3 scripts"), "{}", stderr(&out));
    let out = t.run(&["-k", "[unclosed"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--filter"), "{}", stderr(&out));
}

/// Three scripts that all fail, run one at a time.
fn three_failures() -> Tree {
    let t = Tree::new();
    for m in ["a", "b", "c"] {
        t.fixture("fail_exception.py", &format!("{m}/jax/{m}.py"));
    }
    t
}

#[test]
fn fail_fast_starts_nothing_after_the_first_failure() {
    let t = three_failures();
    let out = t.run(&["-j", "1", "--retries", "0", "--fail-fast"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["totals"]["total_scripts"], 3);
    assert_eq!(m["totals"]["skipped"], 2, "{m:#}");
    let statuses: Vec<&str> = m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.iter().filter(|s| **s == "failed").count(), 1);
    // Every skipped script has a result that says so, and why; it never started.
    for s in m["scripts"].as_array().unwrap() {
        if s["status"] == "skipped" {
            let r = t.result(s["id"].as_str().unwrap());
            assert_eq!(r["class"], "skipped");
            assert_eq!(r["attempts"].as_array().unwrap().len(), 0);
            let reason = r["reason"].as_str().unwrap();
            assert!(reason.contains("--fail-fast"), "{reason}");
        }
    }
    // One line for all it stopped, after the culprit's: never one per script.
    let err = stderr(&out);
    let (fail, skip) = (err.find("   FAIL ["), err.find("   SKIP 2 not started"));
    assert!(
        fail.is_some() && fail < skip,
        "culprit, then one SKIP line: {err}"
    );
    assert_eq!(err.matches("SKIP").count(), 1, "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" skipped; "),
        "the summary line counts them"
    );
}

#[test]
fn max_fail_allows_that_many_failures() {
    let t = three_failures();
    let out = t.run(&["-j", "1", "--retries", "0", "--max-fail", "2"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["totals"]["skipped"], 1, "{m:#}");
    assert_eq!(m["totals"]["by_class"]["script_error"], 2, "{m:#}");
    // Without a limit every script runs.
    let out = t.run(&["-j", "1", "--retries", "0"]);
    assert_eq!(code(&out), 1);
    assert_eq!(t.metrics()["totals"]["skipped"], 0);
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let t = three_models();
    let out = t.run(&["--dry-run", "--timeout", "90s"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    for id in ["alpha_model", "beta_model", "gamma_model"] {
        assert!(table.contains(id), "{table}");
    }
    assert!(table.contains("1m 30s") && table.contains("cpu"), "{table}");
    assert!(
        !t.root().join("execution_results").exists(),
        "a dry run creates no results folder"
    );
    // The same plan as events; nothing else on stdout.
    let out = t.run(&["--dry-run", "--events", "-"]);
    let planned: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(planned.len(), 3);
    assert!(planned.iter().all(|e| e["event"] == "planned"));
    let orders: Vec<u64> = planned
        .iter()
        .map(|e| e["script"]["order"].as_u64().unwrap())
        .collect();
    assert_eq!(orders, [1, 2, 3]);
    assert!(!t.root().join("execution_results").exists());
}

#[test]
fn dry_run_says_what_resume_keeps_and_why() {
    let t = three_models();
    assert_eq!(code(&t.run(&[])), 0);
    // beta changes: its fingerprint no longer matches.
    t.write("beta/jax/beta_model.py", "print('changed')\n");
    let before = std::fs::read(t.results_dir().join("performance_metrics.json")).unwrap();
    let out = t.run(&["--dry-run", "--resume", "--events", "-"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let by_id: std::collections::HashMap<String, Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| (e["id"].as_str().unwrap().to_string(), e["script"].clone()))
        .collect();
    assert_eq!(by_id["alpha_model"]["action"], "keep");
    assert!(by_id["alpha_model"]["why"]
        .as_str()
        .unwrap()
        .starts_with("succeeded in run "));
    assert_eq!(by_id["beta_model"]["action"], "run");
    assert!(by_id["beta_model"]["why"]
        .as_str()
        .unwrap()
        .contains("changed"));
    let after = std::fs::read(t.results_dir().join("performance_metrics.json")).unwrap();
    assert_eq!(before, after, "the dry run left the results as they were");
}

#[test]
fn no_capture_streams_output_with_the_id_and_still_logs_it() {
    let t = Tree::new();
    t.write(
        "m/jax/talker.py",
        "import sys\nprint('said-on-stdout', flush=True)\nprint('said-on-stderr', file=sys.stderr)\n",
    );
    let out = t.run(&["--no-capture"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("[talker] said-on-stdout"), "{err}");
    assert!(err.contains("[talker] said-on-stderr"), "{err}");
    let log = std::fs::read_to_string(t.results_dir().join("logs/talker.stdout.log")).unwrap();
    assert!(log.contains("said-on-stdout"));
    // Without it, nothing of the script's reaches the terminal.
    let out = t.run(&[]);
    assert!(!stderr(&out).contains("said-on-stdout"));
}

#[test]
fn the_old_trace_flag_is_now_a_profile_name() {
    let t = three_models();
    let out = t.run(&["--profile"]);
    assert_eq!(code(&out), 2, "--profile takes a name now");
    let out = t.run(&["--profile", "ci"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("jax-runner.toml"), "{}", stderr(&out));
}

#[path = "daily/profiles.rs"]
mod profiles;

#[test]
fn missing_manifest_entries_count_only_when_selected() {
    let t = Tree::new();
    let render = "out/11_render_output";
    t.fixture("ok_plain.py", &format!("{render}/a/jax/present.py"));
    let manifest = serde_json::json!({"file_results": {"a.md": {"framework_results": {"jax": {
        "success": true,
        "output_files": ["a/jax/present.py", "b/jax/gone.py"]
    }}}}});
    t.write(
        &format!("{render}/render_processing_summary.json"),
        &manifest.to_string(),
    );
    let run = |args: &[&str]| {
        t.cmd()
            .arg("--output-dir")
            .arg(t.root().join(render))
            .args(["--sandbox", "off", "--no-preflight"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(
        code(&out),
        1,
        "the missing script fails the run: {}",
        stderr(&out)
    );
    let out = run(&["-k", "present"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&["-k", "gone"]);
    assert_eq!(code(&out), 1, "a selected missing script still counts");
}

#[test]
fn a_dry_run_starts_no_script() {
    let t = Tree::new();
    t.write(
        "m/jax/marks.py",
        "import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'RAN'), 'w').write('x')\n",
    );
    let out = t.run(&["--dry-run", "--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!t.root().join("m/jax/RAN").exists(), "the script ran");
    // The same script does leave its mark when it runs, so the check can fail.
    assert_eq!(code(&t.run(&["--sandbox", "off"])), 0);
    assert!(t.root().join("m/jax/RAN").exists());
}
