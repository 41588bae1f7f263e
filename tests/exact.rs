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

/// Everything a generated script computed, compared as Python reads it (floats by
/// their bits): `ok`, or the first difference. `elapsed_s`, the script's own clock,
/// is left out.
const SAME_SIMULATION: &str = r#"
import json, struct, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "elapsed_s"}
    if isinstance(x, list):
        return [strip(v) for v in x]
    if isinstance(x, float):
        return ("float", struct.pack("<d", x))
    return x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:3])
if a == b:
    print("ok")
else:
    keys = [k for k in a if a.get(k) != b.get(k)] if isinstance(a, dict) else []
    print("differ in", keys or "shape")
"#;

/// Issue 34: every value the generated POMDP workload computes is bit for bit what a
/// sequential `python script.py` computes, however the runner starts it: warm, from
/// a zygote whose scripts' lowerings share an MLIR context it made ahead, sandboxed as
/// by default, with the cache-aware order on an empty compilation cache, and again
/// with the cache filled; and cold on an empty cache, then warm on it. A warm run on a filled cache misses
/// nothing, whoever filled it.
#[test]
fn the_generated_workload_computes_what_a_sequential_run_computes() {
    let t = Tree::new();
    let tree = t.root().join("tree");
    let rendered = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["render-workload", "--count", "6", "--out"])
        .arg(&tree)
        .output()
        .unwrap();
    assert_eq!(code(&rendered), 0, "{}", stderr(&rendered));
    let mut scripts: Vec<std::path::PathBuf> = walkdir::WalkDir::new(&tree)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    scripts.sort();
    assert_eq!(scripts.len(), 6, "{scripts:?}");
    let sequential = t.root().join("sequential");
    for s in &scripts {
        let id = s.file_stem().unwrap().to_str().unwrap();
        let out = std::process::Command::new(python())
            .arg(s)
            .current_dir(s.parent().unwrap())
            .env("GNN_OUTPUT_DIR", sequential.join(id))
            .env("JAX_PLATFORMS", "cpu")
            .output()
            .unwrap();
        assert!(out.status.success(), "{id}: {}", stderr(&out));
    }
    // The last two rounds fill a second cache cold, where every lowering makes its
    // own context, and run warm on it: lowerings that share one must give those keys.
    for (round, start, cache) in [
        ("empty cache", "warm", "cache"),
        ("filled cache", "warm", "cache"),
        ("cold, empty cache", "cold", "cold-cache"),
        ("warm, cache a cold run filled", "warm", "cold-cache"),
    ] {
        let warm = if start == "warm" { "on" } else { "off" };
        let out = assert_cmd::Command::cargo_bin("jax-runner")
            .unwrap()
            .arg("--output-dir")
            .arg(&tree)
            .arg("--python")
            .arg(python())
            .args(["--device", "cpu", "--warm-start", warm, "-q"])
            .arg("--compilation-cache")
            .arg(t.root().join(cache))
            .timeout(std::time::Duration::from_secs(300))
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{round}: {}", stderr(&out));
        let results = tree.join("execution_results/jax");
        for s in &scripts {
            let id = s.file_stem().unwrap().to_str().unwrap();
            let record = read_json(&results.join(format!("{id}_results.json")));
            assert_eq!(record["attempts"][0]["start"], start, "{round}: {record}");
            // A warm script's lowerings share one context, made ahead: each gives the
            // key a lowering into a fresh one gave.
            if round.starts_with("filled") || round.starts_with("warm,") {
                let jax = &record["jax"];
                assert!(jax["compilations"].as_u64() > Some(0), "{id}: {jax}");
                assert_eq!(jax["cache_misses"], 0, "{id}: a key changed: {jax}");
            }
            let ran = results
                .join("data")
                .join(id)
                .join("simulation_results.json");
            let alone = sequential.join(id).join("simulation_results.json");
            assert_eq!(
                python_says(SAME_SIMULATION, &[&alone, &ran]),
                "ok",
                "{round}: {id}"
            );
        }
    }
}
