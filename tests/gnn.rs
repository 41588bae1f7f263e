//! The step-12 contract GNN's analysis step reads: a tree shaped like GNN's step-11
//! output (`11_render_output/<model>/jax/<Name>_jax.py`, a render manifest with
//! absolute paths), run the way GNN users point step 12 at it, then every key of
//! `12_execute_output` checked by name, type and meaning.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// The models of the fixture tree: (model folder, script file, fixture).
const MODELS: [(&str, &str, &str); 5] = [
    (
        "actinf_pomdp_agent",
        "Active Inference POMDP Agent_jax.py",
        "ok_jax.py",
    ),
    ("broken_model", "Broken_jax.py", "fail_exception.py"),
    ("exit_model", "Exit_jax.py", "exit3"),
    ("slow_model", "Slow_jax.py", "hang.py"),
    ("crash_model", "Crash_jax.py", "signal_death.py"),
];

/// Writes GNN's step-11 output under `tree`: scripts, and a manifest keyed by GNN
/// source file with absolute `output_files`, one failed rendering, one missing script
/// and a pymdp rendering that is not ours to run.
fn render_tree(tree: &Path) -> PathBuf {
    let render = tree.join("11_render_output");
    let mut file_results = serde_json::Map::new();
    for (model, script, fixture) in MODELS {
        let dest = render.join(model).join("jax").join(script);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        if fixture == "exit3" {
            std::fs::write(&dest, "import sys\nimport jax\nsys.exit(3)\n").unwrap();
        } else {
            std::fs::copy(repo().join("fixtures").join(fixture), &dest).unwrap();
        }
        file_results.insert(
            format!("input/gnn_files/{model}.md"),
            json!({"overall_success": true, "framework_results": {
                "jax": {"success": true, "message": "ok", "output_files": [dest]},
                "pymdp": {"success": true, "output_files": [render.join(model).join("pymdp/x_pymdp.py")]}
            }}),
        );
    }
    file_results.insert(
        "input/gnn_files/bad_render.md".into(),
        json!({"framework_results": {"jax": {"success": false, "message": "no B matrix", "output_files": []}}}),
    );
    file_results.insert(
        "input/gnn_files/gone.md".into(),
        json!({"framework_results": {"jax": {"success": true,
            "output_files": [render.join("gone/jax/Gone_jax.py")]}}}),
    );
    let manifest =
        json!({"processing_type": "POMDP-aware rendering", "file_results": file_results});
    std::fs::write(
        render.join("render_processing_summary.json"),
        serde_json::to_string_pretty(&manifest).unwrap(),
    )
    .unwrap();
    render
}

/// `jax-runner --output-dir <dir>` with the test interpreter, CPU, no cache.
fn run_at(dir: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--output-dir")
        .arg(dir)
        .arg("--python")
        .arg(python())
        .args(["--compilation-cache", "off", "--device", "cpu"])
        .args(args)
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap()
}

fn is_local_iso(s: &Value) -> bool {
    let s = s.as_str().unwrap_or_default();
    // 2026-11-22T14:55:01.123456: no zone, microseconds, as Python's isoformat().
    s.len() == 26 && s.as_bytes()[10] == b'T' && s.as_bytes()[19] == b'.' && !s.ends_with('Z')
}

fn by_model<'a>(summary: &'a Value, model: &str) -> &'a Value {
    summary["execution_details"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["model_name"] == model)
        .unwrap_or_else(|| panic!("no entry for {model}: {summary:#}"))
}

#[test]
fn step_12_output_is_what_gnn_step_16_reads() {
    let t = Tree::outside_tmp();
    let tree = t.root();
    let render = render_tree(&tree);
    // Long enough for a cold start on a loaded machine; the hanging script reaches it.
    let out = run_at(&render, &["--timeout", "15s"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    // Beside the render folder, never inside it.
    let step12 = tree.join("12_execute_output");
    assert!(!render.join("execution_results").exists());
    assert!(!render.join("12_execute_output").exists());
    assert!(tree
        .join("execution_results/jax/performance_metrics.json")
        .is_file());

    let s = read_json(&step12.join("summaries/execution_summary.json"));
    assert_valid(
        &validator("gnn_execution_summary"),
        &s,
        "execution_summary.json",
    );
    assert!(is_local_iso(&s["timestamp"]), "{}", s["timestamp"]);
    assert_eq!(s["target_directory"], render.to_str().unwrap());
    assert_eq!(s["output_directory"], step12.to_str().unwrap());
    assert_eq!(
        s["total_scripts_found"], 5,
        "missing scripts are not found scripts"
    );
    assert_eq!(s["total_scripts"], 5);
    assert_eq!(s["successful_executions"], 1);
    assert_eq!(s["failed_executions"], 4);
    assert_eq!(s["skipped_executions"], 0);
    assert_eq!(s["success_rate"], 20.0);
    assert_eq!(s["success"], false);
    assert_eq!(s["framework_status"]["jax"]["status"], "failed");
    assert_eq!(s["framework_status"]["jax"]["executions"], 5);
    assert_eq!(s["requested_frameworks"], json!(["jax"]));
    assert_eq!(
        s["render_failures"],
        json!([{"file": "bad_render.md", "framework": "jax", "message": "no B matrix"}])
    );
    assert_eq!(
        s["missing_render_scripts"],
        json!([render.join("gone/jax/Gone_jax.py")])
    );
    assert!(s["execution_workers"].as_u64().unwrap() >= 1);
    assert_eq!(s["execution_mode"], "local");
    assert_eq!(s["backend"], Value::Null);
    assert_eq!(s["execution_summary_format"], "slim_v1");
    assert_eq!(s["execution_details"].as_array().unwrap().len(), 5);

    for d in s["execution_details"].as_array().unwrap() {
        for (key, is_type) in [
            ("framework", Value::is_string as fn(&Value) -> bool),
            ("model_name", Value::is_string),
            ("script_name", Value::is_string),
            ("script_path", Value::is_string),
            ("executor", Value::is_string),
            ("success", Value::is_boolean),
            ("skipped", Value::is_boolean),
            ("return_code", Value::is_i64),
            ("execution_time", Value::is_f64),
            ("timestamp", Value::is_string),
            ("structured_result_file", Value::is_string),
            ("output_file", Value::is_string),
            ("implementation_directory", Value::is_string),
            ("stdout_length", Value::is_u64),
            ("stderr_length", Value::is_u64),
            ("collected_outputs_summary", Value::is_object),
        ] {
            assert!(is_type(&d[key]), "{key} has the wrong type in {d:#}");
        }
        assert!(d.get("error").is_some() && d.get("error_type").is_some());
        assert_eq!(d["framework"], "jax");
        assert_eq!(d["skipped"], false);
        assert!(is_local_iso(&d["timestamp"]));
        assert_eq!(d["executor"], python().to_str().unwrap());
        let model = d["model_name"].as_str().unwrap();
        let name = d["script_name"].as_str().unwrap();
        assert_eq!(
            d["script_path"],
            render.join(model).join("jax").join(name).to_str().unwrap()
        );
        let implementation = step12.join(model).join("jax");
        assert_eq!(
            d["implementation_directory"],
            implementation.to_str().unwrap()
        );
        let results = implementation.join(format!("execution_logs/{name}_results.json"));
        let log = implementation.join(format!("execution_logs/{name}_execution.log"));
        assert_eq!(d["structured_result_file"], results.to_str().unwrap());
        assert_eq!(d["output_file"], log.to_str().unwrap());
        let kinds = d["collected_outputs_summary"].as_object().unwrap();
        for kind in ["visualizations", "simulation_data", "traces", "other"] {
            assert!(kinds[kind]["count"].is_u64(), "{kind}: {d:#}");
        }

        // The per-script document and its log, beside each other.
        let doc = read_json(&results);
        assert_valid(&validator("gnn_script_result"), &doc, name);
        for key in [
            "framework",
            "model_name",
            "script_name",
            "script_path",
            "success",
        ] {
            assert_eq!(doc[key], d[key], "{key} differs between summary and {name}");
        }
        assert_eq!(doc["return_code"], d["return_code"]);
        assert_eq!(doc["execution_metadata"]["executor"], d["executor"]);
        assert_eq!(
            doc["execution_metadata"]["stdout_length"],
            d["stdout_length"]
        );
        assert_eq!(
            doc["execution_metadata"]["output_directory"],
            d["implementation_directory"]
        );
        assert!(doc["collected_outputs"]["simulation_data"].is_array());
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.starts_with(&format!("Execution Results for {name}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("Return Code: {}\n", d["return_code"])),
            "{text}"
        );
        assert!(
            text.contains("\nSTDOUT:\n") && text.contains("\nSTDERR:\n"),
            "{text}"
        );
        let stdout_bytes = d["stdout_length"].as_u64().unwrap();
        assert!(text.len() as u64 >= stdout_bytes);
    }

    // Meaning, script by script.
    let ok = by_model(&s, "actinf_pomdp_agent");
    assert_eq!(
        (ok["success"].clone(), ok["return_code"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(
        (ok["error"].clone(), ok["error_type"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(ok["script_name"], "Active Inference POMDP Agent_jax.py");
    assert_eq!(
        ok["collected_outputs_summary"]["simulation_data"]["count"],
        1
    );
    assert_eq!(ok["execution_time_samples"].as_array().unwrap().len(), 1);
    let sim = step12.join("actinf_pomdp_agent/jax/simulation_data/simulation_results.json");
    assert_eq!(read_json(&sim)["model_name"], "ok_jax");
    let ok_doc = read_json(Path::new(ok["structured_result_file"].as_str().unwrap()));
    assert!(ok_doc["simulation_data"]["raw_output"]
        .as_str()
        .unwrap()
        .contains("result: 14.0"));
    assert_eq!(ok_doc["collected_outputs"]["simulation_data"], json!([sim]));
    let ours = read_json(Path::new(
        ok_doc["execution_metadata"]["results_file"]
            .as_str()
            .unwrap(),
    ));
    assert_eq!(ok["stdout_length"], ours["stdout_bytes"]);
    assert!(ok["stdout_length"].as_u64().unwrap() > 0);

    let broken = by_model(&s, "broken_model");
    assert_eq!(broken["return_code"], 1);
    assert!(broken["error"].as_str().unwrap().contains("ValueError"));
    assert_eq!(broken["error_type"], "RuntimeError");
    assert!(broken.get("execution_time_samples").is_none());

    let exit = by_model(&s, "exit_model");
    assert_eq!(exit["return_code"], 3);
    assert_eq!(exit["error"], "Script failed with return code 3");

    let slow = by_model(&s, "slow_model");
    assert_eq!(slow["return_code"], -1, "GNN's timeout code");
    assert_eq!(slow["error"], "Script execution timed out after 15 seconds");
    assert_eq!(slow["error_type"], "TimeoutError");

    let crash = by_model(&s, "crash_model");
    assert_eq!(
        crash["return_code"], -11,
        "minus the signal, as Python's subprocess"
    );
    assert!(crash["error"].as_str().unwrap().contains("SIGSEGV"));

    // GNN step 16's own filters: jax entries that succeeded, were not skipped and name
    // a result file, whose implementation folder lies inside 12_execute_output and
    // holds simulation_data/simulation_results.json.
    let usable: Vec<&Value> = s["execution_details"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["framework"] == "jax" && d["success"] == true && d["skipped"] != true)
        .filter(|d| d["structured_result_file"].is_string() || d["output_file"].is_string())
        .collect();
    assert_eq!(usable.len(), 1);
    let implementation = PathBuf::from(usable[0]["implementation_directory"].as_str().unwrap());
    assert!(implementation
        .canonicalize()
        .unwrap()
        .starts_with(step12.canonicalize().unwrap()));
    assert!(implementation
        .join("simulation_data/simulation_results.json")
        .is_file());
}

#[test]
fn resume_runs_again_when_the_outputs_are_gone() {
    let t = Tree::outside_tmp();
    let tree = t.root();
    let render = one_model_tree(&tree, "ok_jax.py");
    let sim = tree.join("12_execute_output/m/jax/simulation_data/simulation_results.json");
    let started = |t: &Tree| t.result("M_jax")["started_at"].clone();

    let out = run_at(&render, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(sim.is_file());
    let first = started(&t);

    // Outputs intact: kept, not run again.
    let out = run_at(&render, &["--resume"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(started(&t), first);

    // The step-12 folder deleted: resuming must not report a success without data.
    std::fs::remove_dir_all(tree.join("12_execute_output")).unwrap();
    let out = run_at(&render, &["--resume", "-v"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_ne!(started(&t), first, "the script ran again");
    assert!(sim.is_file(), "its simulation_results.json is back");
    assert!(tree
        .join("12_execute_output/m/jax/execution_logs/M_jax.py_results.json")
        .is_file());

    // Switching the layout moves the data folder: the script runs again there too.
    let second = started(&t);
    let out = run_at(&render, &["--resume", "--layout", "plain"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_ne!(started(&t), second);
    let data = PathBuf::from(t.result("M_jax")["data_dir"].as_str().unwrap());
    assert!(data.join("simulation_results.json").is_file());
}

#[test]
fn a_moved_or_copied_tree_runs_its_own_scripts() {
    let t = Tree::outside_tmp();
    let original = t.root().join("original");
    one_model_tree(&original, "ok_jax.py");

    // A copy beside the original: the copy's scripts run, not the original's.
    let copy = t.root().join("copy");
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(&original)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let out = run_at(&copy.join("11_render_output"), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("moved or copied").count(),
        1,
        "said once: {err}"
    );
    let result = read_json(&copy.join("execution_results/jax/M_jax_results.json"));
    assert_eq!(
        result["script_path"],
        copy.join("11_render_output/m/jax/M_jax.py")
            .to_str()
            .unwrap()
    );
    assert!(!original.join("execution_results").exists());

    // The original moved away: nothing is missing.
    let moved = t.root().join("moved");
    std::fs::rename(&original, &moved).unwrap();
    let out = run_at(&moved.join("11_render_output"), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let summary = read_json(&moved.join("12_execute_output/summaries/execution_summary.json"));
    assert_eq!(summary["total_scripts_found"], 1);
    assert_eq!(summary["missing_render_scripts"], json!([]));
}
