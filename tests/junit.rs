//! `junit.xml` as a CI tool reads it: Python's `xml.etree` (what junitparser and most
//! CI plugins build on) parses the file of a run with a success, a failure retried in
//! vain, a flaky success, a timeout and a missing render-manifest script, and counts.

mod common;

use common::*;
use serde_json::Value;

/// Reads a JUnit file the way a consumer does and reports what it found as JSON.
const CONSUMER: &str = r#"
import json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root.find("testsuite")
cases = {}
for c in suite.iter("testcase"):
    failure, skipped = c.find("failure"), c.find("skipped")
    cases[c.get("name") if c.get("classname") != "manifest" else "<manifest>"] = {
        "failure": None if failure is None else failure.get("message"),
        "failure_type": None if failure is None else failure.get("type"),
        "skipped": None if skipped is None else skipped.get("message"),
        "flaky": [f.get("message") for f in c.findall("flakyFailure")],
        "rerun": [f.get("message") for f in c.findall("rerunFailure")],
        "out": c.findtext("system-out") or "",
        "err": c.findtext("system-err") or "",
    }
print(json.dumps({
    "header": {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")},
    "root": {k: int(root.get(k)) for k in ("tests", "failures", "errors")},
    "counted": {
        "tests": len(cases),
        "failures": sum(1 for c in cases.values() if c["failure"] is not None),
        "skipped": sum(1 for c in cases.values() if c["skipped"] is not None),
    },
    "cases": cases,
}))
"#;

#[test]
fn a_junit_consumer_reads_the_counts_retries_and_output() {
    let tree = Tree::new();
    let render = "11_render_output";
    tree.fixture("ok_plain.py", &format!("{render}/m/jax/ok.py"));
    tree.fixture("flaky.py", &format!("{render}/m/jax/flaky.py"));
    tree.write(
        &format!("{render}/m/jax/exits.py"),
        "print('partial result 7', flush=True)\nimport sys\nsys.exit(3)\n",
    );
    tree.write(
        &format!("{render}/m/jax/hangs.py"),
        "import time\nprint('still thinking', flush=True)\ntime.sleep(120)\n",
    );
    let listed: Vec<String> = ["ok", "flaky", "exits", "hangs", "gone"]
        .iter()
        .map(|n| format!("m/jax/{n}.py"))
        .collect();
    let manifest = serde_json::json!({"file_results": {"m.md": {"framework_results": {
        "jax": {"success": true, "output_files": listed}}}}});
    tree.write(
        &format!("{render}/render_processing_summary.json"),
        &manifest.to_string(),
    );
    let out = tree.run(&[
        "-q",
        "--retries",
        "1",
        "--retry-on",
        "script_error",
        "--retry-delay",
        "100ms",
        "--timeout",
        "2s",
        "--grace",
        "1s",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let junit = tree.results_dir().join("junit.xml");
    let read = std::process::Command::new(python())
        .args(["-c", CONSUMER])
        .arg(&junit)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let seen: Value = serde_json::from_slice(&read.stdout).unwrap();
    let xml = std::fs::read_to_string(&junit).unwrap();

    // 4 scripts and the missing one; failures: exits, hangs and the missing script.
    let want = serde_json::json!({"tests": 5, "failures": 3, "errors": 0, "skipped": 0});
    assert_eq!(seen["header"], want, "{xml}");
    assert_eq!(seen["root"]["tests"], 5, "{xml}");
    assert_eq!(seen["root"]["failures"], 3, "{xml}");
    assert_eq!(seen["counted"]["tests"], 5, "{xml}");
    assert_eq!(seen["counted"]["failures"], 3, "{xml}");
    assert_eq!(seen["counted"]["skipped"], 0, "{xml}");

    let case = |name: &str| seen["cases"][name].clone();
    assert_eq!(case("ok")["failure"], Value::Null);
    let flaky = case("flaky");
    assert_eq!(flaky["failure"], Value::Null, "{xml}");
    assert_eq!(flaky["flaky"], serde_json::json!(["exit code 1"]), "{xml}");
    let exits = case("exits");
    assert_eq!(exits["failure"], "exit code 3: partial result 7", "{xml}");
    assert_eq!(exits["failure_type"], "script_error");
    assert_eq!(exits["rerun"], serde_json::json!(["exit code 3"]), "{xml}");
    assert!(
        exits["out"].as_str().unwrap().contains("partial result 7"),
        "{xml}"
    );
    assert!(
        !exits["out"].as_str().unwrap().contains("/logs/"),
        "a path, not output"
    );
    let hangs = case("hangs");
    assert_eq!(
        hangs["failure"],
        "no exit within 2s (timed out) at 11_render_output/m/jax/hangs.py:3 in <module>",
        "{xml}"
    );
    assert_eq!(
        hangs["rerun"],
        serde_json::json!([]),
        "timeouts are not retried here"
    );
    let missing = case("<manifest>");
    assert_eq!(
        missing["failure"], "listed in the render manifest but missing",
        "{xml}"
    );
}
