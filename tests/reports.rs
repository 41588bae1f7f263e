//! What a run leaves for people and pipelines: the NDJSON event stream, Markdown,
//! JUnit, GNN's step-12 layout, and JSON Schemas that every written file satisfies.

mod common;

use std::path::Path;

use common::*;
use jax_runner::schema;
use serde_json::Value;

/// Fails when the types and the committed schemas drift apart; `INSTA_UPDATE=always`
/// rewrites `schemas/` (see `common::snapshot`).
#[test]
fn committed_schemas_match_the_code() {
    for name in schema::NAMES {
        let generated =
            serde_json::to_string_pretty(&schema::schema(name).unwrap()).unwrap() + "\n";
        snapshot::assert_file(&schema::file_name(name), &generated);
    }
}

#[cfg(feature = "integration")]
#[test]
fn every_file_a_run_writes_matches_its_schema_and_the_reports_are_there() {
    let t = Tree::new();
    t.fixture("slow_ok.py", "m/jax/slow.py");
    t.fixture("fail_exception.py", "m/jax/fail.py");
    let events = t.root().join("events.ndjson");
    let out = t
        .cmd()
        .arg("--events")
        .arg(&events)
        .args(["--env", "SLOW_SECONDS=2.5"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.contains('\u{1b}'),
        "off a terminal there are no control codes: {err:?}"
    );

    let results = validator("results");
    for id in ["slow", "fail"] {
        assert_valid(&results, &t.result(id), id);
    }
    assert_valid(
        &validator("metrics"),
        &t.metrics(),
        "performance_metrics.json",
    );

    let ev = validator("events");
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for line in &lines {
        assert_valid(&ev, line, "an event line");
        assert_eq!(line["schema_version"], 2);
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
        if line["event"] != "run_started"
            && line["event"] != "run_finished"
            && line["event"] != "warning"
        {
            assert!(line["id"].is_string(), "script events carry the id: {line}");
        }
        // `attempt` has one type wherever it appears: the attempt's number.
        if let Some(a) = line.get("attempt") {
            assert!(a.is_u64(), "attempt is a number in every event: {line}");
        }
    }
    let kinds: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    for k in [
        "script_started",
        "attempt_finished",
        "script_finished",
        "sample",
    ] {
        assert!(kinds.contains(&k), "no {k} event in {kinds:?}");
    }

    let md = std::fs::read_to_string(t.results_dir().join("execution_report.md")).unwrap();
    assert!(
        md.contains("| `m/jax/fail.py` | failed | script_error |"),
        "{md}"
    );
    assert!(
        md.contains("ValueError: deliberate failure for tests"),
        "{md}"
    );
    let junit = std::fs::read_to_string(t.results_dir().join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 2);
    assert!(
        junit.contains(
            "message=\"exit code 1 at m/jax/fail.py:7 in &lt;module&gt;: \
             ValueError: deliberate failure for tests\""
        ),
        "{junit}"
    );
    assert!(junit.contains("type=\"script_error\""), "{junit}");
    assert!(junit.contains("tests=\"2\""), "{junit}");
    assert!(junit.contains("failures=\"1\""), "{junit}");

    // The metrics' peak is the runner's up to the end of the scripts; the log's last
    // line, written once every report is, gives it with them: never less.
    let log = std::fs::read_to_string(t.results_dir().join("execution_log.txt")).unwrap();
    let last = log.lines().last().unwrap();
    let whole: f64 = last
        .split("reports included: ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(" MiB"))
        .unwrap_or_else(|| panic!("the log's last line gives the peak: {last}"))
        .parse()
        .unwrap();
    let before = t.metrics()["run"]["runner_peak_rss_mb"].as_f64().unwrap();
    assert!(before > 1.0 && whole >= before, "{before} then {whole}");
}

/// `list --json` has a committed schema like every other document, and matches it.
#[test]
fn list_json_matches_its_schema() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["list", "--json", "--output-dir"])
        .arg(t.root())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&validator("list"), &doc, "list --json");
    assert_eq!(doc["scripts"][0]["id"], "ok_plain");
}

#[cfg(feature = "integration")]
#[test]
fn the_event_stream_can_own_stdout() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = t.run(&["--events", "-"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.lines().count() >= 4);
    for line in stdout.lines() {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["event"].is_string());
    }
}

#[cfg(feature = "integration")]
#[test]
fn doctor_json_matches_its_schema() {
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["doctor", "--json", "--python"])
        .arg(python())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&validator("doctor"), &doc, "doctor --json");
}

#[cfg(feature = "integration")]
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[cfg(feature = "integration")]
#[test]
fn gnn_step_12_layout_next_to_the_render_output() {
    let t = Tree::new();
    t.fixture(
        "ok_jax.py",
        "11_render_output/actinf_pomdp/jax/actinf_pomdp_jax.py",
    );
    t.fixture(
        "fail_exception.py",
        "11_render_output/broken_model/jax/broken_model_jax.py",
    );
    t.write(
        "11_render_output/render_processing_summary.json",
        r#"{"file_results": [
            {"framework_results": {"jax": {"output_file": "actinf_pomdp/jax/actinf_pomdp_jax.py"}}},
            {"framework_results": {"jax": {"output_file": "broken_model/jax/broken_model_jax.py"}}}
        ]}"#,
    );
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let step12 = t.root().join("12_execute_output");
    let doc =
        read_json(&step12.join("actinf_pomdp/jax/execution_logs/actinf_pomdp_jax.py_results.json"));
    for k in [
        "framework",
        "model_name",
        "script_name",
        "script_path",
        "success",
        "return_code",
        "execution_time",
        "timestamp",
        "simulation_data",
        "execution_metadata",
    ] {
        assert!(
            doc.get(k).is_some(),
            "GNN key {k} missing: {:?}",
            keys(&doc)
        );
    }
    assert_eq!(doc["framework"], "jax");
    assert_eq!(doc["model_name"], "actinf_pomdp");
    assert_eq!(doc["script_name"], "actinf_pomdp_jax.py");
    assert_eq!(doc["success"], true);
    assert!(doc["simulation_data"]["raw_output"]
        .as_str()
        .unwrap()
        .contains("result: 14.0"));
    // The script's own output landed where GNN's analysis step looks for it.
    let sim = step12.join("actinf_pomdp/jax/simulation_data/simulation_results.json");
    assert_eq!(read_json(&sim)["model_name"], "ok_jax");
    let broken =
        read_json(&step12.join("broken_model/jax/execution_logs/broken_model_jax.py_results.json"));
    assert!(broken["simulation_data"]["raw_error"]
        .as_str()
        .unwrap()
        .contains("ValueError"));

    let summary = read_json(&step12.join("summaries/execution_summary.json"));
    for k in [
        "total_scripts_found",
        "successful_executions",
        "failed_executions",
        "skipped_executions",
        "success_rate",
        "execution_details",
    ] {
        assert!(summary.get(k).is_some(), "summary key {k} missing");
    }
    assert_eq!(summary["total_scripts_found"], 2);
    assert_eq!(summary["successful_executions"], 1);
    assert_eq!(summary["failed_executions"], 1);
    assert_eq!(summary["success_rate"], 50.0);
    assert!(step12.join("summaries/execution_report.md").is_file());

    // The runner's own outputs are never discovered as scripts on the next run.
    let again = t.run(&["--layout", "plain"]);
    assert_eq!(code(&again), 1);
    assert_eq!(t.metrics()["totals"]["total_scripts"], 2);
}

#[cfg(feature = "integration")]
#[test]
fn plain_trees_get_no_gnn_layout_unless_asked() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    assert_eq!(code(&t.run(&[])), 0);
    assert!(!t.root().join("12_execute_output").exists());
    assert_eq!(code(&t.run(&["--layout", "gnn"])), 0);
    assert!(t
        .root()
        .join("12_execute_output/m/jax/execution_logs/ok_plain.py_results.json")
        .is_file());
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    let bin = || assert_cmd::Command::cargo_bin("jax-runner").unwrap();
    let bash = bin().args(["completions", "bash"]).output().unwrap();
    let text = String::from_utf8_lossy(&bash.stdout);
    assert!(
        text.contains("complete -F _jax__runner") && text.contains("--memory-limit"),
        "{text}"
    );
    let man = bin().arg("man").output().unwrap();
    let roff = String::from_utf8_lossy(&man.stdout);
    assert!(
        roff.contains(".TH jax-runner 1") && roff.contains("doctor"),
        "{roff}"
    );
    assert!(Path::new(&repo().join("schemas/results.schema.json")).is_file());
}
