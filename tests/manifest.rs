//! The render manifest as hostile input (issue 15): entries outside `--output-dir`
//! are refused and never run, a moved tree still runs its own copies, a huge list of
//! missing entries makes bounded output, and an oversized manifest is not read.

mod common;

use std::path::Path;

use common::*;

/// A script that leaves `EXECUTED` beside itself if it ever runs.
const EVIL: &str = "import os\n\
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'EXECUTED'), 'w').write('ran')\n";

/// `jax-runner` on `<tree>/out`, fast: no sandbox, no warm start.
fn run_on(t: &Tree, out: &Path) -> std::process::Output {
    t.cmd()
        .arg("--output-dir")
        .arg(out)
        .args(["--sandbox", "off", "--warm-start", "off", "--no-preflight"])
        .output()
        .unwrap()
}

#[test]
fn entries_outside_the_tree_are_refused_named_counted_and_never_run() {
    let t = Tree::new();
    let evil = t.write("elsewhere/evil.py", EVIL);
    let root = t.root().join("out");
    let render = root.join("11_render_output");
    t.fixture("ok_plain.py", "out/11_render_output/m/jax/ok.py");
    t.fixture("ok_plain.py", "out/11_render_output/m/jax/moved.py");
    std::os::unix::fs::symlink(&evil, render.join("m/jax/link.py")).unwrap();
    let entries = serde_json::json!({"file_results": {"m.md": {"framework_results": {"jax": {
        "success": true,
        "output_files": [
            "m/jax/ok.py",
            evil,
            "../../elsewhere/evil.py",
            "m/jax/link.py",
            // A tree moved from elsewhere: its own copy runs.
            "/old/place/11_render_output/m/jax/moved.py"
        ]
    }}}}});
    t.write(
        "out/11_render_output/render_processing_summary.json",
        &entries.to_string(),
    );
    let out = run_on(&t, &root);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "refused entries fail the run: {err}");
    assert!(
        !evil.with_file_name("EXECUTED").exists(),
        "a script outside --output-dir ran"
    );
    assert!(
        err.contains("refused 3 render manifest entries")
            && err.contains("../../elsewhere/evil.py")
            && err.contains("m/jax/link.py"),
        "{err}"
    );
    let results = root.join("execution_results/jax");
    let m = read_json(&results.join("performance_metrics.json"));
    assert_eq!(m["totals"]["refused"], 3);
    assert_eq!(m["refused_scripts"].as_array().unwrap().len(), 3);
    assert_eq!(m["totals"]["total_scripts"], 2, "{m}");
    assert_eq!(m["totals"]["succeeded"], 2);
    let moved = read_json(&results.join("moved_results.json"));
    assert!(moved["script_path"]
        .as_str()
        .unwrap()
        .starts_with(render.to_str().unwrap()));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("refused: "), "{summary}");
}

#[test]
fn many_missing_entries_make_one_warning_and_small_reports() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "11_render_output/m/jax/ok.py");
    let mut listed: Vec<String> = (0..20_000)
        .map(|i| format!("gone{i}/jax/gone{i}.py"))
        .collect();
    listed.push("m/jax/ok.py".into());
    t.write(
        "11_render_output/render_processing_summary.json",
        &serde_json::json!({ "jax": listed }).to_string(),
    );
    let out = run_on(&t, &t.root());
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(
        err.lines().count() < 60,
        "{} lines on stderr",
        err.lines().count()
    );
    assert!(
        err.contains("lists 20000 scripts that do not exist") && err.contains("and 19990 more"),
        "{}",
        &err[..err.len().min(2000)]
    );
    let results = t.results_dir();
    for (file, limit) in [
        ("junit.xml", 64 << 10),
        ("execution_log.txt", 64 << 10),
        ("execution_report.md", 64 << 10),
        ("report.html", 256 << 10),
    ] {
        let size = std::fs::metadata(results.join(file)).unwrap().len();
        assert!(size < limit, "{file} is {size} bytes");
    }
    let m = t.metrics();
    assert_eq!(m["totals"]["missing"], 20_000);
    assert_eq!(
        m["missing_scripts"].as_array().unwrap().len(),
        20_000,
        "the JSON keeps every entry"
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("missing: and 19950 more"), "{summary}");
}

#[test]
fn an_oversized_manifest_is_refused_before_it_is_read() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "11_render_output/m/jax/ok.py");
    let manifest = t.write("11_render_output/render_processing_summary.json", "{}");
    // Sparse: 65 MiB on paper, nothing on disk.
    std::fs::File::options()
        .write(true)
        .open(&manifest)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let out = run_on(&t, &t.root());
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains("render_processing_summary.json")
            && err.contains("more than the 67108864 bytes")
            && err.contains("move it aside"),
        "{err}"
    );
}
