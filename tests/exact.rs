//! What jax-runner copies from a script's output is what the script wrote: every
//! float of its `simulation_results.json` bit for bit, and, in GNN's layout, GNN's own
//! conventions where a consumer could tell (`stdout_length` in characters, `raw_output`
//! cut at 10,000 characters). Python, not serde, is the judge of equality.

mod common;

use std::path::Path;

use common::*;

/// A GNN step-11 tree with the one script `fixture`, run in GNN's layout.
fn run_gnn(t: &Tree, fixture: &str) -> std::path::PathBuf {
    let render = one_model_tree(&t.root(), fixture);
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--output-dir")
        .arg(&render)
        .arg("--python")
        .arg(python())
        .args(["--device", "cpu"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t.root().join("12_execute_output/m/jax")
}

/// Runs `check` (Python) with the paths as `sys.argv[1:]`; it prints `ok` or why not.
fn python_says(check: &str, paths: &[&Path]) -> String {
    let out = std::process::Command::new(python())
        .arg("-c")
        .arg(check)
        .args(paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn beliefs_are_copied_bit_for_bit() {
    let t = Tree::outside_tmp();
    let implementation = run_gnn(&t, "exact_floats.py");
    let written = implementation.join("simulation_data/simulation_results.json");
    let copied = implementation.join("execution_logs/M_jax.py_results.json");
    let check = r#"
import json, struct, sys
src = json.load(open(sys.argv[1]))["beliefs"]
doc = json.load(open(sys.argv[2]))["simulation_data"]["beliefs"]
bits = lambda x: struct.pack("<d", x)
flat = lambda rows: [v for row in rows for v in row]
pairs = list(zip(flat(src), flat(doc)))
bad = [(a, b) for a, b in pairs if bits(a) != bits(b)]
if len(pairs) != len(flat(src)) or len(flat(src)) != len(flat(doc)):
    print("lengths differ")
elif bad:
    print("%d of %d differ, e.g. %r" % (len(bad), len(pairs), bad[:3]))
else:
    print("ok")
"#;
    assert_eq!(python_says(check, &[&written, &copied]), "ok");
}

#[test]
fn gnn_counts_characters_and_keeps_the_first_ten_thousand() {
    let t = Tree::outside_tmp();
    let implementation = run_gnn(&t, "exact_floats.py");
    let doc = implementation.join("execution_logs/M_jax.py_results.json");
    let summary = t
        .root()
        .join("12_execute_output/summaries/execution_summary.json");
    let ours = t.result("M_jax");
    let stdout_log = Path::new(ours["stdout_log"].as_str().unwrap());
    // GNN decodes the output to str: len() and [:10000] are in characters.
    let check = r#"
import json, sys
stdout = open(sys.argv[1], encoding="utf-8").read()
doc = json.load(open(sys.argv[2]))
detail = json.load(open(sys.argv[3]))["execution_details"][0]
want = (len(stdout), stdout[:10000])
got = (doc["execution_metadata"]["stdout_length"], doc["simulation_data"]["raw_output"])
if got != want:
    print("document: %r chars, head of %r, against %r and %r" % (got[0], len(got[1]), want[0], len(want[1])))
elif detail["stdout_length"] != len(stdout):
    print("summary: %r against %r" % (detail["stdout_length"], len(stdout)))
elif len(stdout.encode()) == len(stdout):
    print("the fixture printed no multi-byte text")
else:
    print("ok")
"#;
    assert_eq!(python_says(check, &[stdout_log, &doc, &summary]), "ok");
}
