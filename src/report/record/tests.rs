//! Records from hand-made events: what is kept, slots, order.

use serde_json::json;

use super::*;
use crate::model::ScriptSummary;

/// A result as the runner writes it, one attempt on slot 0, with `changes` applied.
fn result(id: &str, changes: serde_json::Value) -> ScriptResult {
    let mut v = json!({
        "schema_version": 1, "id": id, "script_path": format!("/out/{id}.py"),
        "relative_path": format!("{id}.py"), "discovered_by": "jax_folder",
        "success": true, "status": "succeeded", "class": "succeeded", "return_code": 0,
        "signal": null, "device_requested": "cpu", "device_used": "cpu",
        "device_mismatch": false,
        "attempts": [{"number": 1, "device": "cpu", "slot": 0,
            "started_at": "2026-11-22T07:40:35.693Z", "duration_s": 1.0,
            "status": "succeeded", "return_code": 0, "signal": null, "peak_memory_mb": 1.0,
            "cpu_user_s": 0.0, "cpu_system_s": 0.0, "class": "succeeded",
            "stdout_log": "/o", "stderr_log": "/e"}],
        "execution_time_s": 1.0, "peak_memory_mb": 1.0, "cpu_user_s": 0.0,
        "cpu_system_s": 0.0, "timeout_s": 2.0, "started_at": "2026-11-22T07:40:35.693Z",
        "finished_at": null, "stdout_log": "/o", "stderr_log": "/e",
        "stdout_bytes": 3, "stderr_bytes": 4, "stderr_tail": ["a warning"],
        "log_truncated": false, "leaks": [], "data_dir": "/d",
        "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
    });
    for (k, val) in changes.as_object().unwrap() {
        v[k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn failed(id: &str) -> ScriptResult {
    result(
        id,
        json!({"success": false, "status": "failed", "class": "script_error",
            "return_code": 1, "stderr_tail": ["Traceback", "ValueError: bad"],
            "exception": {"type": "ValueError", "message": "bad"}}),
    )
}

fn finished(r: ScriptResult) -> RunEvent {
    RunEvent::ScriptFinished {
        result: Box::new(r),
    }
}

fn metrics(ids: &[&str]) -> PerformanceMetrics {
    let run = crate::model::test_run_info(json!({}));
    let scripts = ids
        .iter()
        .map(|id| ScriptSummary::of(&result(id, json!({}))))
        .collect();
    PerformanceMetrics::build(run, scripts, Vec::new(), Vec::new())
}

#[test]
fn only_failures_keep_their_stderr_tail() {
    let ok = ScriptRecord::of(&result("ok", json!({})));
    assert!(ok.succeeded() && ok.stderr_tail.is_empty());
    let bad = ScriptRecord::of(&failed("bad"));
    assert!(!bad.succeeded());
    assert_eq!(bad.stderr_tail, ["Traceback", "ValueError: bad"]);
    assert_eq!(bad.exception_text().as_deref(), Some("ValueError: bad"));
    assert_eq!(bad.attempts.len(), 1);
}

#[test]
fn the_started_event_names_the_slot() {
    let mut records = Records::new();
    records.handle(&RunEvent::ScriptStarted {
        id: "a".into(),
        attempt: 1,
        device: crate::model::Platform::Cpu,
        path: "a.py".into(),
        slot: 3,
    });
    let record = records.handle(&finished(result("a", json!({})))).unwrap();
    assert_eq!(record.attempts[0].slot, 3);
    // Used up: a later script of the same id keeps its own slot.
    let again = records.handle(&finished(result("a", json!({})))).unwrap();
    assert_eq!(again.attempts[0].slot, 0);
}

#[test]
fn ordered_like_the_metrics_then_as_finished() {
    let mut records = Records::new();
    for id in ["x", "b", "y", "a"] {
        records.handle(&finished(result(id, json!({}))));
    }
    let ids = |v: Vec<&ScriptRecord>| v.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(records.ordered(&metrics(&["a", "b"]))),
        ["a", "b", "x", "y"]
    );
    let finishing: Vec<&str> = records
        .finishing_order()
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(finishing, ["x", "b", "y", "a"]);
}

/// One definition of compile time: the record's (the HTML's compile column) is the
/// breakdown's, tracing and lowering included (0.19 s of XLA alone read as 0.30 s).
#[test]
fn the_compile_time_is_the_breakdowns() {
    let jax = json!({"jax_imported": true, "backend": "cpu", "compile_time_s": 0.19,
        "trace_time_s": 0.07, "lowering_time_s": 0.04, "uncaught_exception": null});
    let mut r = result("c", json!({ "jax": jax }));
    let telemetry = r.jax.clone().unwrap();
    r.time_breakdown = Some(crate::model::TimeBreakdown::of(2.0, &telemetry));
    let record = ScriptRecord::of(&r);
    let compile = record.compile_time_s.unwrap();
    assert!((compile - 0.30).abs() < 1e-9, "{compile}");
    assert_eq!(compile, record.time_breakdown.unwrap().compile_s);
}
