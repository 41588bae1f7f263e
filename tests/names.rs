//! Names that break naive file naming (issue 15): legal but long file names, scripts
//! whose derived files would collide (in GNN's layout and across retries), non-UTF-8
//! paths, and one script's I/O failure, which must not end the run.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// Prints its relative path, and writes it to `who.txt` in its data folder.
const WHO: &str = "import os\n\
rel = os.path.relpath(os.path.abspath(__file__), os.environ['TREE'])\n\
print('I am ' + rel)\n\
open(os.path.join(os.environ['GNN_OUTPUT_DIR'], 'who.txt'), 'w').write(rel)\n";

fn run_fast(t: &Tree, args: &[&str]) -> std::process::Output {
    t.cmd()
        .args(["--sandbox", "off", "--warm-start", "off", "--no-preflight"])
        .arg("--env")
        .arg(format!("TREE={}", t.root().display()))
        .args(args)
        .output()
        .unwrap()
}

/// Every `*_results.json` in the results folder.
fn results(t: &Tree) -> Vec<(PathBuf, Value)> {
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(t.results_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with("_results.json"))
        .map(|p| {
            let v = read_json(&p);
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn text(path: &Value) -> String {
    std::fs::read_to_string(path.as_str().unwrap()).unwrap()
}

#[test]
fn long_legal_file_names_run_and_get_their_results() {
    let t = Tree::new();
    let ascii = format!("m/jax/{}.py", "s".repeat(247));
    let utf8 = format!("m/jax/{}.py", "é".repeat(118));
    for rel in [ascii.as_str(), utf8.as_str(), "m/jax/short.py"] {
        t.write(rel, WHO);
    }
    let out = run_fast(&t, &["--layout", "gnn"]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 0, "{}\n{summary}", stderr(&out));
    assert!(summary.contains("3 of 3 succeeded"), "{summary}");
    let found = results(&t);
    assert_eq!(found.len(), 3, "{found:?}");
    for (path, r) in &found {
        assert!(path.file_name().unwrap().len() <= 255);
        assert_eq!(r["success"], true, "{r}");
        assert!(r["id"].as_str().unwrap().len() <= 160, "{}", r["id"]);
        let rel = Path::new(r["script_path"].as_str().unwrap())
            .strip_prefix(t.root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(text(&r["stdout_log"]), format!("I am {rel}\n"));
        let data = Path::new(r["data_dir"].as_str().unwrap());
        assert_eq!(std::fs::read_to_string(data.join("who.txt")).unwrap(), rel);
    }
    assert!(
        found.iter().any(|(_, r)| r["id"] == "short"),
        "short names stay"
    );
    let logs = t.root().join("12_execute_output/m/jax/execution_logs");
    assert_eq!(
        std::fs::read_dir(logs).unwrap().count(),
        6,
        "GNN files for all"
    );
}

#[test]
fn scripts_whose_derived_names_would_collide_each_get_their_own_files() {
    let t = Tree::new();
    for rel in ["a/x/jax/s.py", "b/x/jax/s.py", "c/x/jax/a_x_jax_s.py"] {
        t.write(rel, WHO);
    }
    // Attempt 2 of `r.py` must not write the logs of a script named `r.attempt2.py`.
    t.write(
        "r/jax/r.py",
        "import os, sys\nn = os.environ['JAX_RUNNER_ATTEMPT']\nprint('r attempt ' + n)\n\
         sys.exit(0 if n != '1' else 1)\n",
    );
    t.write("r/jax/r.attempt2.py", "print('I am r.attempt2')\n");
    let out = run_fast(
        &t,
        &[
            "--layout",
            "gnn",
            "--retry-on",
            "script_error",
            "--retry-delay",
            "0s",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let found = results(&t);
    assert_eq!(found.len(), 5);
    let data: HashSet<&str> = found
        .iter()
        .map(|(_, r)| r["data_dir"].as_str().unwrap())
        .collect();
    assert_eq!(data.len(), 5, "one data folder each");
    for (_, r) in found
        .iter()
        .filter(|(_, r)| r["relative_path"].as_str().unwrap().contains("/x/"))
    {
        let rel = r["relative_path"].as_str().unwrap();
        let data = Path::new(r["data_dir"].as_str().unwrap());
        assert_eq!(std::fs::read_to_string(data.join("who.txt")).unwrap(), rel);
        assert_eq!(text(&r["stdout_log"]), format!("I am {rel}\n"));
    }
    let gnn = t.root().join("12_execute_output/x/jax/execution_logs");
    let gnn_files: Vec<_> = std::fs::read_dir(gnn).unwrap().flatten().collect();
    assert_eq!(gnn_files.len(), 6, "three scripts, two files each");
    let retried = found
        .iter()
        .find(|(_, r)| r["relative_path"] == "r/jax/r.py")
        .unwrap();
    let attempts = retried.1["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(text(&attempts[1]["stdout_log"]), "r attempt 2\n");
    let other = found
        .iter()
        .find(|(_, r)| r["relative_path"] == "r/jax/r.attempt2.py")
        .unwrap();
    assert_eq!(text(&other.1["stdout_log"]), "I am r.attempt2\n");
    assert_ne!(other.1["stdout_log"], attempts[1]["stdout_log"]);
}

#[test]
fn one_scripts_io_failure_fails_that_script_only() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/fine.py");
    t.fixture("ok_plain.py", "m/jax/blocked.py");
    // A file where `blocked`'s data folder must go.
    std::fs::create_dir_all(t.results_dir().join("data")).unwrap();
    std::fs::write(t.results_dir().join("data/blocked"), "in the way").unwrap();
    let out = run_fast(&t, &["--layout", "plain"]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(summary.contains("1 of 2 succeeded"), "{summary}");
    assert_eq!(t.result("fine")["success"], true);
    let blocked = t.result("blocked");
    assert_eq!(blocked["status"], "failed");
    let why = blocked["matched_line"].as_str().unwrap();
    assert!(
        why.contains("failed to create") && why.contains("data/blocked"),
        "{why}"
    );
}

#[test]
fn a_non_utf8_path_is_kept_losslessly_beside_the_lossy_one() {
    use std::os::unix::ffi::OsStrExt;
    let t = Tree::new();
    let dir = t.dir.path().join("x/jax");
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join(std::ffi::OsStr::from_bytes(b"bad\xffname.py"));
    std::fs::write(&real, "print('odd')\n").unwrap();
    t.fixture("ok_plain.py", "x/jax/plain.py");
    let out = run_fast(&t, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let odd = t.result("bad_name");
    assert!(odd["script_path"].as_str().unwrap().contains('\u{fffd}'));
    let hex = odd["script_path_hex"].as_str().unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let canonical = real.canonicalize().unwrap();
    assert_eq!(bytes, canonical.as_os_str().as_bytes());
    assert!(
        t.result("plain").get("script_path_hex").is_none(),
        "only where needed"
    );
}

/// A script reached through links (a file link and a folder link) runs once, named by
/// its real path, sandboxed, from its own folder: it reads the file beside it there.
#[test]
fn a_linked_script_runs_once_sandboxed_by_its_real_path() {
    let t = Tree::outside_tmp();
    t.write(
        "models/m/jax/model.py",
        "import json, os\n\
         here = os.path.dirname(os.path.realpath(__file__))\n\
         print(json.load(open(os.path.join(here, 'params.json')))['k'])\n",
    );
    t.write("models/m/jax/params.json", "{\"k\": \"beside\"}");
    t.write("links/jax/.keep", "");
    let root = t.root();
    std::os::unix::fs::symlink(
        root.join("models/m/jax/model.py"),
        root.join("links/jax/same.py"),
    )
    .unwrap();
    std::os::unix::fs::symlink(root.join("models"), root.join("alias")).unwrap();
    let out = t.cmd().arg("-q").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let found = results(&t);
    assert_eq!(found.len(), 1, "{found:?}");
    let r = &found[0].1;
    assert_eq!(r["relative_path"], "models/m/jax/model.py");
    assert_eq!(r["success"], true);
    assert_eq!(text(&r["stdout_log"]).trim(), "beside");
}
