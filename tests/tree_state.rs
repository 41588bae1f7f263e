//! Reports that tell the tree's whole truth (issue 32): after any sequence of runs
//! (`-k`, `--lf`, `-x`, `--resume`, `--no-recursive`) every report agrees with the
//! ledger about which scripts stand failed; a narrower scope never empties the
//! ledger; a copied tree resumes; a changed input beside a script reruns it; the
//! terminal stays a few lines at 500 scripts; render failures come first.

mod common;

use common::*;

/// A script that prints and succeeds (no jax import needed: a `jax/` folder makes
/// it a script).
const OK: &str = "print('ok', flush=True)\n";
/// A script that fails with an exception at its own line 2.
const BAD: &str = "x = 1\nraise ValueError('bad value')\n";

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn show(t: &Tree) -> std::process::Output {
    assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["show", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap()
}

fn read(t: &Tree, name: &str) -> String {
    std::fs::read_to_string(t.results_dir().join(name)).unwrap()
}

#[test]
fn a_script_still_failing_is_listed_by_every_report_and_fails_show() {
    let t = Tree::new();
    t.write("a/jax/ok_sim.py", OK);
    t.write("b/jax/bad_sim.py", BAD);
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let first = t.metrics()["run"]["run_id"].as_str().unwrap().to_string();

    // A run of the green script alone: its own outcome is green (pytest's rule)…
    let out = t.run(&["-k", "ok_sim"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let since = format!("still failing since run {first}");
    assert!(stdout(&out).contains(&since), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("1 carried (1 still failing)"),
        "{}",
        stdout(&out)
    );
    // …and the tree is red, which `show` answers for.
    let out = show(&t);
    assert_eq!(
        code(&out),
        1,
        "show exits 1 over a red tree: {}",
        stdout(&out)
    );
    assert!(stdout(&out).contains(&since), "{}", stdout(&out));
    assert!(stdout(&out).contains("bad_sim"), "{}", stdout(&out));

    // Every report lists it as failing, marked with the run it comes from.
    let m = t.metrics();
    assert_eq!(m["totals"]["still_failing"], 1, "{m:#}");
    assert_eq!(m["totals"]["failed"], 0, "counted apart from this run's");
    let html = read(&t, "report.html");
    assert!(html.contains(&since), "report.html");
    assert!(
        html.contains("id=\"failures\""),
        "report.html has a failures section"
    );
    let md = read(&t, "execution_report.md");
    assert!(
        md.contains("## Still failing from earlier runs (1)"),
        "{md}"
    );
    assert!(md.contains(&since), "{md}");
    let junit = read(&t, "junit.xml");
    assert!(junit.contains("type=\"still_failing\""), "{junit}");
    let log = read(&t, "execution_log.txt");
    assert!(log.contains("1 still failing"), "{log}");

    // Fixed and rerun by `--lf`: the tree is green again, and `show` says so.
    t.write("b/jax/bad_sim.py", OK);
    let out = t.run(&["--lf"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.metrics()["totals"]["still_failing"], 0);
    assert_eq!(code(&show(&t)), 0);
}

#[test]
fn a_narrower_scope_keeps_the_ledger_and_only_a_gone_source_leaves_it() {
    let t = Tree::new();
    t.write("top.py", "import jax\nprint(1)\n");
    t.write("deep/jax/deep_bad.py", BAD);
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    // `--no-recursive` reaches only the top: the deeper record stands, carried.
    let out = t.run(&["--no-recursive"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.results_dir().join("deep_bad_results.json").is_file());
    let m = t.metrics();
    let line = (m["scripts"].as_array().unwrap().iter())
        .find(|s| s["id"] == "deep_bad")
        .unwrap_or_else(|| panic!("the unreached script is still in the metrics: {m:#}"));
    assert_eq!(line["status"], "carried");
    assert_eq!(line["carried_status"], "failed");
    assert_eq!(code(&show(&t)), 1, "the tree still has a failure");
    assert!(
        stderr(&out).contains("out of reach of --no-recursive"),
        "{}",
        stderr(&out)
    );

    // `--lf` still knows it failed.
    let out = t.run(&["--lf"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(t.result("deep_bad")["status"], "failed");
    assert!(t.result("top")["resumed_from"].is_string(), "top was kept");

    // Its source gone, its record leaves for the history.
    std::fs::remove_file(t.root().join("deep/jax/deep_bad.py")).unwrap();
    let out = t.run(&["--no-recursive"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!t.results_dir().join("deep_bad_results.json").exists());
    let run = t.metrics()["run"]["run_id"].as_str().unwrap().to_string();
    let kept = t
        .results_dir()
        .join("history")
        .join(run)
        .join("deep_bad_results.json");
    assert!(kept.is_file(), "kept in the history, not lost");
    assert_eq!(code(&show(&t)), 0);
}

#[test]
fn a_copied_tree_resumes_and_a_changed_input_beside_a_script_reruns_it() {
    let t = Tree::new();
    let read_params = "import json, pathlib\n\
        print(json.loads((pathlib.Path(__file__).parent / 'params.json').read_text()))\n";
    t.write("m/jax/with_params.py", read_params);
    t.write("m/jax/params.json", "{\"a\": 1}");
    t.write("n/jax/alone.py", OK);
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // `cp -a`, as from a cluster's scratch: the copy's ledger resumes everything.
    let copy = Tree::new();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", t.root().display()))
        .arg(copy.root())
        .status()
        .unwrap();
    assert!(status.success());
    let out = copy.run(&["--resume"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("KEPT 2 earlier success"), "{text}");
    assert!(
        !text.contains("PASS"),
        "nothing ran, so nothing passed: {text}"
    );
    assert_eq!(copy.metrics()["totals"]["resumed"], 2);
    let kept = copy.result("alone");
    let log = kept["stderr_log"].as_str().unwrap();
    assert!(
        log.starts_with(copy.root().to_str().unwrap()),
        "paths follow the copy: {log}"
    );

    // A changed params.json reruns the script beside it, and the dry run says why.
    copy.write("m/jax/params.json", "{\"a\": 2}");
    let out = copy.run(&["--resume", "--dry-run"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("params.json changed"),
        "{}",
        stdout(&out)
    );
    let out = copy.run(&["--resume"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        copy.result("with_params")["resumed_from"].is_null(),
        "it ran again"
    );
    assert!(
        copy.result("alone")["resumed_from"].is_string(),
        "the other was kept"
    );
}

#[test]
fn five_hundred_scripts_with_one_selected_print_a_few_lines() {
    let t = Tree::new();
    for i in 0..500 {
        t.write(&format!("m/jax/s{i:03}.py"), OK);
    }
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let lines = |out: &std::process::Output| {
        let text = format!("{}{}", stdout(out), stderr(out));
        (text.lines().count(), text)
    };
    let out = t.run(&["-k", "s123"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (n, text) = lines(&out);
    assert!(n < 10, "{n} lines: {text}");
    assert!(text.contains("CARRIED 499 from earlier runs"), "{text}");
    // Nothing to do under --resume: one KEPT line, no PASS.
    let out = t.run(&["--resume"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (n, text) = lines(&out);
    assert!(n < 10, "{n} lines: {text}");
    assert!(text.contains("running 0 script(s)"), "{text}");
    assert!(text.contains("KEPT 500 earlier success"), "{text}");
}

#[test]
fn fail_fast_names_the_culprit_before_one_line_for_the_scripts_it_stopped() {
    let t = Tree::new();
    for m in ["a", "b", "c", "d"] {
        t.write(&format!("{m}/jax/{m}_bad.py"), BAD);
    }
    let out = t.run(&["-x", "--jobs", "1"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stderr(&out);
    let fail = text.find("FAIL").unwrap_or_else(|| panic!("{text}"));
    let skip = text
        .find("SKIP 3 not started")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(fail < skip, "the culprit first: {text}");
    assert_eq!(
        text.matches("SKIP").count(),
        1,
        "one line for the skipped: {text}"
    );
}

#[test]
fn a_model_that_failed_to_render_comes_first_in_every_report() {
    let t = Tree::new();
    let render = t.root().join("11_render_output");
    let ok = render.join("good/jax/good.py");
    std::fs::create_dir_all(ok.parent().unwrap()).unwrap();
    std::fs::write(&ok, OK).unwrap();
    let manifest = serde_json::json!({"file_results": {
        "input/good.md": {"framework_results": {"jax": {"success": true, "output_files": [ok]}}},
        "input/broken.md": {"framework_results": {"jax": {
            "success": false, "message": "no B matrix in the model", "output_files": []}}}
    }});
    std::fs::write(
        render.join("render_processing_summary.json"),
        manifest.to_string(),
    )
    .unwrap();
    let out = t.run(&[]);
    assert_eq!(
        code(&out),
        1,
        "a failed render fails the run: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("render failures (1)"), "{text}");
    assert!(
        text.contains("broken.md: no B matrix in the model"),
        "{text}"
    );
    assert!(text.contains("1 failed to render"), "{text}");
    let m = t.metrics();
    assert_eq!(m["totals"]["render_failures"], 1, "{m:#}");
    assert_eq!(
        m["render_failures"][0]["message"],
        "no B matrix in the model"
    );
    let html = read(&t, "report.html");
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    assert!(
        at("id=\"render-failures\"") < at("id=\"scripts-section\""),
        "first"
    );
    assert!(html.contains("no B matrix in the model"));
    let md = read(&t, "execution_report.md");
    let broken = md.find("no B matrix").unwrap_or_else(|| panic!("{md}"));
    assert!(broken < md.find("## Scripts").unwrap(), "{md}");
    // A selection of another model leaves it out, as it does a missing script.
    let out = t.run(&["-k", "good"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
