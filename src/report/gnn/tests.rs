use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::model::DiscoveredBy;
use crate::model::PerformanceMetrics;
use crate::report::record::ScriptRecord;

fn script(rel: &str, id: &str) -> Script {
    Script {
        id: id.into(),
        path: PathBuf::from("/out/11_render_output").join(rel),
        relative_path: rel.into(),
        discovered_by: DiscoveredBy::Manifest,
        size_bytes: 1,
    }
}

/// A result as the runner writes it, with the fields a case needs changed.
fn result(id: &str, changes: serde_json::Value) -> ScriptResult {
    let mut v = json!({
        "schema_version": 1, "id": id, "script_path": "/s.py", "relative_path": "s.py",
        "discovered_by": "jax_folder", "success": false, "status": "failed",
        "class": "script_error", "return_code": null, "signal": null,
        "device_requested": "cpu", "device_used": null, "device_mismatch": false,
        "attempts": [{"number": 1, "device": "cpu", "started_at": "2026-11-22T07:40:35.693Z",
            "duration_s": 1.0, "status": "failed", "return_code": 1, "signal": null,
            "peak_memory_mb": 1.0, "cpu_user_s": 0.0, "cpu_system_s": 0.0,
            "class": "script_error", "stdout_log": "/nonexistent", "stderr_log": "/nonexistent"}],
        "execution_time_s": 1.0, "peak_memory_mb": 1.0, "cpu_user_s": 0.0,
        "cpu_system_s": 0.0, "timeout_s": 2.0, "started_at": "2026-11-22T07:40:35.693Z",
        "finished_at": null, "stdout_log": "/nonexistent", "stderr_log": "/nonexistent",
        "stdout_bytes": 3, "stderr_bytes": 4, "stderr_tail": [], "log_truncated": false,
        "leaks": [], "data_dir": "/d",
        "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
    });
    for (k, val) in changes.as_object().unwrap() {
        v[k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn every_script_gets_its_own_files_even_with_shared_names() {
    let step12 = Path::new("/out/12_execute_output");
    let scripts = [
        script("a/x/jax/s.py", "a_s"),
        script("b/x/jax/s.py", "b_s"),
        script("m/jax/M_jax.py", "m"),
    ];
    let plan = plan(step12, &scripts);
    let (a, b, m) = (&plan["a_s"], &plan["b_s"], &plan["m"]);
    assert_eq!(a.model, "x");
    assert_eq!(a.script_name, "s.py");
    assert_ne!(a.results_file(), b.results_file());
    assert_ne!(a.data_dir, b.data_dir);
    assert_eq!(m.impl_dir, step12.join("m/jax"));
    assert_eq!(m.data_dir, step12.join("m/jax/simulation_data"));
    assert_eq!(
        m.results_file(),
        step12.join("m/jax/execution_logs/M_jax.py_results.json")
    );
    assert_eq!(
        m.log_file(),
        step12.join("m/jax/execution_logs/M_jax.py_execution.log")
    );
}

#[test]
fn an_id_based_key_never_takes_another_scripts_file_name() {
    let step12 = Path::new("/out/12_execute_output");
    // `a/x/jax/s.py` and `b/x/jax/s.py` share a name, so they are keyed by id; the
    // third script's real name is the first one's id.
    let scripts = [
        script("a/x/jax/s.py", "a_x_jax_s"),
        script("b/x/jax/s.py", "b_x_jax_s"),
        script("c/x/jax/a_x_jax_s.py", "a_x_jax_s_2"),
    ];
    let plan = plan(step12, &scripts);
    let files: HashSet<PathBuf> = plan.values().map(GnnEntry::results_file).collect();
    let logs: HashSet<PathBuf> = plan.values().map(GnnEntry::log_file).collect();
    let data: HashSet<&PathBuf> = plan.values().map(|e| &e.data_dir).collect();
    assert_eq!((files.len(), logs.len(), data.len()), (3, 3, 3), "{plan:?}");
    assert_eq!(plan["a_x_jax_s_2"].script_name, "a_x_jax_s.py");
}

#[test]
fn long_file_names_are_keyed_by_their_short_id() {
    let step12 = Path::new("/out/12_execute_output");
    let long = format!("m/jax/{}.py", "n".repeat(246));
    let plan = plan(
        step12,
        &[script(&long, "n_0123456789ab"), script("m/jax/o.py", "o")],
    );
    let e = &plan["n_0123456789ab"];
    assert_eq!(e.script_name.len(), 249);
    let name = e.results_file().file_name().unwrap().len();
    assert!(name + 47 <= 255, "{name} bytes");
    assert_eq!(
        e.data_dir,
        step12.join("m/jax/simulation_data/n_0123456789ab")
    );
    assert_eq!(plan["o"].file_key, "o.py", "short names keep GNN's naming");
}

#[test]
fn return_codes_and_errors_follow_gnn() {
    let exit = result("e", json!({"return_code": 3}));
    let (rc, error, kind) = gnn_error(&ScriptRecord::of(&exit));
    assert_eq!(rc, Some(3));
    assert_eq!(error.unwrap(), "Script failed with return code 3");
    assert_eq!(kind.unwrap(), "RuntimeError");

    let timeout = result(
        "t",
        json!({"status": "timed_out", "class": "timed_out", "signal": 15}),
    );
    let (rc, error, kind) = gnn_error(&ScriptRecord::of(&timeout));
    assert_eq!(rc, Some(-1));
    assert_eq!(error.unwrap(), "Script execution timed out after 2 seconds");
    assert_eq!(kind.unwrap(), "TimeoutError");

    let killed = result(
        "k",
        json!({"class": "killed_by_signal", "signal": 6, "signal_name": "SIGABRT"}),
    );
    let (rc, error, _) = gnn_error(&ScriptRecord::of(&killed));
    assert_eq!(rc, Some(-6));
    assert!(error.unwrap().contains("SIGABRT"));

    let missing = result(
        "d",
        json!({"return_code": 1, "exception": {"type": "ModuleNotFoundError", "message": "No module named 'x'"}}),
    );
    let (_, error, kind) = gnn_error(&ScriptRecord::of(&missing));
    assert_eq!(kind.unwrap(), "DependencyError");
    assert!(error
        .unwrap()
        .ends_with("ModuleNotFoundError: No module named 'x'"));

    let never = result(
        "n",
        json!({"attempts": [], "status": "interrupted", "class": "interrupted"}),
    );
    assert_eq!(gnn_error(&ScriptRecord::of(&never)).0, None);

    let ok = result(
        "o",
        json!({"success": true, "status": "succeeded", "class": "succeeded", "return_code": 0}),
    );
    assert_eq!(gnn_error(&ScriptRecord::of(&ok)), (Some(0), None, None));
}

#[test]
fn summary_counts_and_rate_follow_gnn() {
    let step12 = PathBuf::from("/out/12_execute_output");
    let scripts = [script("m/jax/a.py", "a"), script("n/jax/b.py", "b")];
    let entries = plan(&step12, &scripts);
    let r = GnnExporter::new(
        step12.clone(),
        "/out/execution_results/jax".into(),
        entries,
        RunFacts::default(),
    );
    let never = result(
        "a",
        json!({"attempts": [], "status": "interrupted", "class": "interrupted"}),
    );
    let mut records = crate::report::record::Records::new();
    let record = records.push(&never);
    let d = document::detail(record, &r.entries["a"], "/py", Default::default());
    assert!(d.skipped && d.structured_result_file.is_none());
    let run = crate::model::test_run_info(json!({"interrupted": true}));
    let metrics = PerformanceMetrics::build(run, Vec::new(), Vec::new(), Vec::new());
    let s = r.summary(&crate::report::export::RunRecord::new(&metrics, &records));
    // Nothing attempted: GNN's 100.0, and the run did not succeed.
    assert_eq!(s.success_rate, 100.0);
    assert_eq!((s.skipped_executions, s.failed_executions), (1, 0));
    assert_eq!(s.framework_status["jax"].status, "skipped");
    assert!(!s.success);
    assert_eq!(s.execution_summary_format, "slim_v1");
}
