//! The JUnit document from hand-made records: counts match the elements, output in
//! `<system-out>`/`<system-err>`, retries as nextest writes them, bounded manifests.

use serde_json::json;

use super::*;
use crate::model::{PerformanceMetrics, ScriptResult, ScriptSummary};
use crate::report::export::RunRecord;
use crate::report::record::Records;

fn attempt(n: u32, status: &str, class: &str, code: i32) -> serde_json::Value {
    json!({"number": n, "device": "cpu", "slot": 0, "started_at": "2026-11-22T07:40:35.693Z",
        "duration_s": 1.0, "status": status, "return_code": code, "signal": null,
        "peak_memory_mb": 1.0, "cpu_user_s": 0.0, "cpu_system_s": 0.0, "class": class,
        "stdout_log": "/no/o", "stderr_log": "/no/e"})
}

fn result(id: &str, status: &str, class: &str, attempts: Vec<serde_json::Value>) -> ScriptResult {
    let ok = status == "succeeded";
    serde_json::from_value(json!({
        "schema_version": 1, "id": id, "script_path": format!("/out/m/{id}.py"),
        "relative_path": format!("m/{id}.py"), "discovered_by": "jax_folder",
        "success": ok, "status": status, "class": class,
        "return_code": if ok { 0 } else { 3 }, "signal": null, "device_requested": "cpu",
        "device_used": "cpu", "device_mismatch": false, "attempts": attempts,
        "execution_time_s": 2.0, "peak_memory_mb": 1.0, "cpu_user_s": 0.0,
        "cpu_system_s": 0.0, "timeout_s": 5.0, "started_at": "2026-11-22T07:40:35.693Z",
        "finished_at": null, "stdout_log": "/no/o", "stderr_log": "/no/e",
        "stdout_bytes": 0, "stderr_bytes": 4, "log_truncated": false, "leaks": [],
        "stderr_tail": if ok { json!([]) } else { json!(["boom <&> ]]>"]) },
        "data_dir": "/d",
        "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
    }))
    .unwrap()
}

fn metrics(results: &[ScriptResult], missing: Vec<String>) -> PerformanceMetrics {
    let run = crate::model::test_run_info(
        json!({"started_at": "2026-11-22T07:40:35.000Z", "wall_time_s": 3.0, "retries": 1}),
    );
    let lines = results.iter().map(ScriptSummary::of).collect();
    PerformanceMetrics::build(run, lines, missing, vec![])
}

fn xml(results: &[ScriptResult], missing: Vec<String>) -> String {
    let mut records = Records::new();
    for r in results {
        records.push(r);
    }
    let m = metrics(results, missing);
    String::from_utf8(render_bytes(&RunRecord::new(&m, &records)).unwrap()).unwrap()
}

#[test]
fn counts_match_the_elements_and_retries_show() {
    let flaky = result(
        "flaky",
        "succeeded",
        "succeeded",
        vec![
            attempt(1, "failed", "killed_by_signal", 1),
            attempt(2, "succeeded", "succeeded", 0),
        ],
    );
    let failed = result(
        "failed",
        "failed",
        "script_error",
        vec![
            attempt(1, "failed", "script_error", 3),
            attempt(2, "failed", "script_error", 3),
        ],
    );
    let stopped = result("stopped", "interrupted", "interrupted", vec![]);
    let doc = xml(&[flaky, failed, stopped], vec!["gone.py".into()]);
    // Interrupted is a failure, as nextest writes a test its cancellation killed.
    assert!(
        doc.contains("tests=\"4\"") && doc.contains("failures=\"3\""),
        "{doc}"
    );
    assert!(doc.contains("skipped=\"0\""), "{doc}");
    assert_eq!(doc.matches("<failure").count(), 3, "{doc}");
    assert_eq!(doc.matches("<skipped").count(), 0, "{doc}");
    assert_eq!(doc.matches("<flakyFailure").count(), 1, "{doc}");
    assert_eq!(doc.matches("<rerunFailure").count(), 1, "{doc}");
    assert!(
        doc.contains("message=\"exit code 3: boom &lt;&amp;&gt; ]]&gt;\""),
        "{doc}"
    );
    assert!(doc.contains("message=\"not started (interrupted)"), "{doc}");
    assert!(
        doc.contains("listed in the render manifest but missing"),
        "{doc}"
    );
    assert!(
        doc.contains("<system-err>boom &lt;&amp;&gt; ]]&gt;</system-err>"),
        "{doc}"
    );
    assert!(
        !doc.contains("/no/o"),
        "a log path instead of output: {doc}"
    );
}

#[test]
fn many_missing_entries_make_a_bounded_document() {
    let missing: Vec<String> = (0..200_000).map(|i| format!("gone/{i}.py")).collect();
    let cases = manifest_cases(&missing, "missing", "gone");
    assert_eq!(cases.len(), LISTED + 1);
    assert!(
        cases[LISTED].name.as_str().contains("and 199950 more"),
        "{:?}",
        cases[LISTED].name
    );
}

#[test]
fn every_status_maps_as_nextest_and_the_six_counts_are_properties() {
    let mut earlier = result(
        "kept",
        "failed",
        "script_error",
        vec![attempt(1, "failed", "script_error", 3)],
    );
    earlier.run_id = "20261101T000000.000Z-1".into();
    let results = [
        result(
            "ok",
            "succeeded",
            "succeeded",
            vec![attempt(1, "succeeded", "succeeded", 0)],
        ),
        result(
            "bad",
            "failed",
            "script_error",
            vec![attempt(1, "failed", "script_error", 3)],
        ),
        result(
            "slow",
            "timed_out",
            "timed_out",
            vec![attempt(1, "timed_out", "timed_out", 3)],
        ),
        result("stopped", "interrupted", "interrupted", vec![]),
        result("later", "skipped", "skipped", vec![]),
    ];
    let mut records = Records::new();
    for r in &results {
        records.push(r);
    }
    records.handle(&crate::events::RunEvent::ScriptCarried {
        result: Box::new(earlier.clone()),
        why: "not selected".into(),
    });
    let mut lines: Vec<ScriptSummary> = results.iter().map(ScriptSummary::of).collect();
    lines.push(ScriptSummary::carried(&earlier));
    let run = crate::model::test_run_info(json!({"started_at": "2026-11-22T07:40:35.000Z"}));
    let m = PerformanceMetrics::build(run, lines, vec![], vec![]);
    let doc = String::from_utf8(render_bytes(&RunRecord::new(&m, &records)).unwrap()).unwrap();
    // failed, timed out, interrupted are failures; skipped and carried are skipped.
    assert!(doc.contains("failures=\"3\""), "{doc}");
    assert!(doc.contains("skipped=\"2\""), "{doc}");
    assert!(doc.contains("type=\"timed_out\""), "{doc}");
    assert!(doc.contains("type=\"interrupted\""), "{doc}");
    assert!(
        doc.contains("<skipped message=\"still failing since run 20261101T000000.000Z-1: failed\""),
        "{doc}"
    );
    // The carried failure is listed as failing in a suite of its own, counted apart.
    let earlier_suite = &doc[doc
        .find("<testsuite name=\"jax-scripts (still failing from earlier runs)\" tests=\"1\"")
        .expect("a suite of the carried failures")..];
    assert!(earlier_suite.contains("failures=\"1\""), "{doc}");
    assert!(
        earlier_suite.contains("type=\"still_failing\""),
        "{earlier_suite}"
    );
    // Nothing of the earlier run's output: it is not this run's.
    let kept = &doc[doc.find("name=\"kept\"").unwrap()..];
    let kept = &kept[..kept.find("</testcase>").unwrap_or(kept.len())];
    assert!(
        !kept.contains("system-err") && !kept.contains("boom"),
        "{kept}"
    );
    for (name, n) in [
        ("succeeded", 1),
        ("failed", 1),
        ("timed_out", 1),
        ("interrupted", 1),
        ("skipped", 1),
        ("carried", 1),
    ] {
        assert!(
            doc.contains(&format!("<property name=\"{name}\" value=\"{n}\"/>")),
            "{name}: {doc}"
        );
    }
}

#[test]
fn control_characters_from_a_script_are_shown_escaped() {
    let mut r = result("steers", "failed", "script_error", vec![]);
    r.stderr_tail = vec!["ValueError: \x1b]52;c;eA==\x07 \0\u{202e}x".into()];
    let doc = xml(&[r], vec!["gone/\x1b[2K.py".into()]);
    for raw in ['\x1b', '\x07', '\0', '\u{202e}'] {
        assert!(!doc.contains(raw), "{raw:?} in {doc}");
    }
    // In the failure's message and in <system-err>, instead of dropped.
    assert_eq!(
        doc.matches("\\x1b]52;c;eA==\\x07 \\x00\\u{202e}x").count(),
        3,
        "{doc}"
    );
    assert!(doc.contains("gone/\\x1b[2K.py"), "{doc}");
}
