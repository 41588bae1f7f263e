//! What a script leaves behind cannot hang, flood or redirect the runner (issue 23):
//! its telemetry file, its `simulation_results.json` and (unsandboxed) its own logs
//! replaced by a FIFO, a symlink to /dev/zero or a 1.5 GiB sparse file; a symlink
//! planted as its data folder or as the logs folder; a render manifest entry behind a
//! symlinked folder. Every run ends with complete, schema-valid results, the problem
//! named on the script's result, and the runner under 400 MB. And what the next step
//! reads (issue 30): a data folder left with FIFOs, sockets, device nodes and symlinks
//! holds only regular files and folders once the runner is done with it, so GNN's step
//! 16 (`os.walk` and `open`) reads the whole tree without blocking.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::watched::{run, spawn, watch, Ran};
use common::*;
use serde_json::Value;

/// The result of `id`, checked whole: it parses, matches its schema, ran, and the
/// run's metrics (also schema-valid) count it.
fn complete_result(results: &Path, id: &str) -> Value {
    let r = read_json(&results.join(format!("{id}_results.json")));
    assert_valid(&validator("results"), &r, id);
    assert!(!r["attempts"].as_array().unwrap().is_empty(), "{r:#}");
    let m = read_json(&results.join("performance_metrics.json"));
    assert_valid(&validator("metrics"), &m, "performance_metrics.json");
    assert!(m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id));
    r
}

fn problems(r: &Value) -> Vec<String> {
    r["problems"]
        .as_array()
        .map(|a| a.iter().map(|p| p.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn assert_problem(r: &Value, expected: &str) {
    let found = problems(r);
    assert!(
        found.iter().any(|p| p == expected),
        "no problem {expected:?} in {found:?}"
    );
}

/// A plain tree whose one script (`leaves`) leaves `leave` at `at`.
fn plain_case(leave: &str, at: &str, extra: &[&str]) -> (Tree, Ran) {
    let t = Tree::new();
    t.fixture("leaves_behind.py", "jax/leaves.py");
    let logs = t.results_dir().join("logs");
    let env = [
        format!("LEAVE={leave}"),
        format!("AT={at}"),
        "ID=leaves".into(),
        format!("LOGS={}", logs.display()),
    ];
    let mut args: Vec<String> = env.into_iter().flat_map(|a| ["--env".into(), a]).collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = run(&t.root(), &args);
    (t, ran)
}

/// A GNN tree whose one script (`M_jax`) leaves `leave` at `at`.
fn gnn_case(leave: &str, at: &str, extra: &[&str]) -> (Tree, Ran) {
    let t = Tree::outside_tmp();
    t.fixture("leaves_behind.py", "11_render_output/m/jax/M_jax.py");
    let logs = t.results_dir().join("logs");
    let mut args = vec!["--env".to_string(), format!("LEAVE={leave}")];
    args.extend([
        "--env".into(),
        format!("AT={at}"),
        "--env".into(),
        "ID=M_jax".into(),
    ]);
    args.extend(["--env".into(), format!("LOGS={}", logs.display())]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = run(&t.root(), &args);
    (t, ran)
}

#[test]
fn telemetry_replaced_by_a_fifo() {
    let (t, ran) = plain_case("fifo", "telemetry", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "leaves");
    assert_problem(&r, "telemetry: not a regular file (fifo)");
}

#[test]
fn telemetry_replaced_by_a_link_to_dev_zero() {
    let (t, ran) = plain_case("zero", "telemetry", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "leaves");
    assert_problem(&r, "telemetry: not a regular file (symlink)");
}

#[test]
fn telemetry_replaced_by_a_huge_sparse_file() {
    let (t, ran) = plain_case("sparse", "telemetry", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "leaves");
    assert_problem(
        &r,
        "telemetry: larger than the 1 MiB the runner reads (1.5 GiB)",
    );
}

/// GNN's documents of the script are whole and valid too.
/// The memory a script claims in its own report at its exit is no figure past what
/// the kernel showed of its resident size: a PiB is not taken.
#[test]
fn telemetry_that_claims_a_pib_at_exit() {
    let (t, ran) = plain_case("forged_memory", "telemetry", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "leaves");
    let peak = r["peak_memory_mb"].as_f64().unwrap();
    assert!(peak > 0.0 && peak < 4096.0, "{peak} MiB: {r}");
}

fn gnn_documents_complete(t: &Tree) {
    let logs = t.root().join("12_execute_output/m/jax/execution_logs");
    let doc = read_json(&logs.join("M_jax.py_results.json"));
    assert_valid(
        &validator("gnn_script_result"),
        &doc,
        "M_jax.py_results.json",
    );
    let summary = t
        .root()
        .join("12_execute_output/summaries/execution_summary.json");
    assert_valid(
        &validator("gnn_execution_summary"),
        &read_json(&summary),
        "execution_summary.json",
    );
}

/// A FIFO or a link is no data: it goes from the data folder as the attempt ends,
/// named, before anything reads the folder.
#[test]
fn simulation_results_replaced_by_a_fifo() {
    let (t, ran) = gnn_case("fifo", "simulation", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "M_jax");
    assert_problem(&r, &removed("fifo", "simulation_results.json"));
    gnn_documents_complete(&t);
}

#[test]
fn simulation_results_replaced_by_a_link_to_dev_zero() {
    let (t, ran) = gnn_case("zero", "simulation", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "M_jax");
    assert_problem(&r, &removed("symlink", "simulation_results.json"));
    gnn_documents_complete(&t);
}

#[test]
fn simulation_results_replaced_by_a_huge_sparse_file() {
    let (t, ran) = gnn_case("sparse", "simulation", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "M_jax");
    assert_problem(
        &r,
        "simulation_results.json: larger than the 16 MiB the runner reads (1.5 GiB)",
    );
    gnn_documents_complete(&t);
}

/// Under 16 MiB, but dense: parsed whole, its values alone would pass 400 MB.
#[test]
fn simulation_results_too_dense_to_parse() {
    let (t, ran) = gnn_case("dense", "simulation", &[]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "M_jax");
    assert_problem(
        &r,
        "simulation_results.json: holds more values than the runner parses within 128 MiB",
    );
    gnn_documents_complete(&t);
}

/// Unsandboxed, a script reaches its own logs: it fails with nothing on stderr, so
/// the reports read the end of its stdout log, which it replaced.
#[test]
fn own_stdout_log_replaced_by_a_fifo_or_a_link_to_dev_zero() {
    for (leave, kind) in [("fifo", "fifo"), ("zero", "symlink")] {
        let (t, ran) = plain_case(
            leave,
            "stdout_log",
            &["--env", "EXIT=1", "--sandbox", "off"],
        );
        ran.assert_ended(1);
        let r = complete_result(&t.results_dir(), "leaves");
        assert_eq!(r["status"], "failed");
        assert_problem(&r, &format!("stdout log: not a regular file ({kind})"));
        let junit = std::fs::read_to_string(t.results_dir().join("junit.xml")).unwrap();
        assert!(junit.contains("leaves"), "{junit}");
    }
}

/// GNN's execution log copies both logs whole: a FIFO there must not stop it.
#[test]
fn own_stderr_log_replaced_by_a_fifo_in_the_gnn_layout() {
    let (t, ran) = gnn_case("fifo", "stderr_log", &["--sandbox", "off"]);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), "M_jax");
    assert_problem(&r, "stderr log: not a regular file (fifo)");
    gnn_documents_complete(&t);
    let log = t
        .root()
        .join("12_execute_output/m/jax/execution_logs/M_jax.py_execution.log");
    assert!(std::fs::read_to_string(log)
        .unwrap()
        .contains("leaving a fifo"));
}

/// SIGTERM ends a run whose finished script left a FIFO for telemetry while another
/// script still runs: exit 130, every result written.
#[test]
fn sigterm_ends_a_run_with_a_fifo_left_behind() {
    let t = Tree::new();
    t.fixture("leaves_behind.py", "jax/leaves.py");
    t.write(
        "jax/sleeper.py",
        "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n",
    );
    let results = t.results_dir();
    let log = t.root().join(".runner.stderr.txt");
    let args = [
        "--jobs",
        "2",
        "--env",
        "LEAVE=fifo",
        "--env",
        "AT=telemetry",
    ];
    let child = spawn(&t.root(), &args, &log);
    let has_output =
        |log: &str| std::fs::metadata(results.join("logs").join(log)).is_ok_and(|m| m.len() > 0);
    let mut since: Option<Duration> = None;
    let mut sent = false;
    let ran = watch(child, &log, |pid, at| {
        if since.is_none() && has_output("sleeper.stdout.log") && has_output("leaves.stdout.log") {
            since = Some(at);
        }
        // Three seconds after both started: the FIFO is left, its script is gone.
        if !sent && since.is_some_and(|s| at > s + Duration::from_secs(3)) {
            sent = true;
            // SAFETY: a signal to the runner this test started.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    });
    eprintln!("runner peak {:.1} MiB, {:?}", ran.peak_mib, ran.stopped);
    assert!(sent, "never signalled: {ran:?}");
    ran.assert_ended(130);
    let r = complete_result(&results, "leaves");
    assert_problem(&r, "telemetry: not a regular file (fifo)");
    let s = complete_result(&results, "sleeper");
    assert_eq!(s["status"], "interrupted");
}

/// What `dir` holds, with each entry's owner, mode and content: to show it unchanged.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.unwrap();
        let m = entry.path().symlink_metadata().unwrap();
        let body = if m.is_file() {
            std::fs::read(entry.path()).unwrap()
        } else {
            Vec::new()
        };
        out.push((entry.path().to_path_buf(), m.uid(), m.mode(), body));
    }
    out
}

/// A tree another user owns may hold links where the runner makes its folders: the
/// script's data folder and `logs/` planted as symlinks to a folder outside. The run
/// writes nothing there and changes nothing in it; the data goes to a real folder.
#[test]
fn planted_data_and_logs_folders_lead_nowhere() {
    let t = Tree::outside_tmp();
    t.fixture("writes_data.py", "jax/writes.py");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "untouched").unwrap();
    let before = snapshot(outside.path());
    let results = t.results_dir();
    std::fs::create_dir_all(results.join("data")).unwrap();
    std::os::unix::fs::symlink(outside.path(), results.join("data/writes")).unwrap();
    std::os::unix::fs::symlink(outside.path(), results.join("logs")).unwrap();
    let ran = run(&t.root(), &[]);
    ran.assert_ended(0);
    assert_eq!(
        snapshot(outside.path()),
        before,
        "the outside folder changed"
    );
    let r = complete_result(&results, "writes");
    assert_eq!(r["status"], "succeeded", "{r:#}");
    let data = results.join("data/writes");
    assert!(data.is_dir() && !data.is_symlink());
    assert!(data.join("simulation_results.json").is_file());
    assert!(!results.join("logs").is_symlink());
    let planted = |what: &str, at: &Path| {
        format!(
            "{what}: a symlink was planted at {}; replaced by a folder",
            at.display()
        )
    };
    assert_problem(&r, &planted("data folder", &data));
    assert_problem(&r, &planted("logs folder", &results.join("logs")));
}

/// A manifest entry behind a symlinked folder that leads out of the tree is refused,
/// and never runs, whether `--output-dir` names the pipeline or its render folder.
#[test]
fn a_manifest_entry_behind_a_symlinked_folder_never_runs() {
    for render_as_output in [false, true] {
        let t = Tree::outside_tmp();
        let outside = tempfile::tempdir().unwrap();
        let evil = outside.path().join("jax/evil.py");
        std::fs::create_dir_all(evil.parent().unwrap()).unwrap();
        std::fs::write(
            &evil,
            "import os\nopen(os.path.join(os.path.dirname(__file__), 'EXECUTED'), 'w')\n",
        )
        .unwrap();
        let pipeline = t.root().join("pipeline");
        let render = pipeline.join("11_render_output");
        t.fixture("ok_plain.py", "pipeline/11_render_output/m/jax/ok.py");
        std::os::unix::fs::symlink(outside.path(), render.join("linked")).unwrap();
        let manifest = serde_json::json!({"file_results": {"m.md": {"framework_results": {
            "jax": {"success": true, "output_files": ["m/jax/ok.py", "linked/jax/evil.py"]}
        }}}});
        std::fs::write(
            render.join("render_processing_summary.json"),
            manifest.to_string(),
        )
        .unwrap();
        let out = if render_as_output { &render } else { &pipeline };
        let results = pipeline.join("execution_results/jax");
        let ran = run(out, &["--sandbox", "off"]);
        let form = if render_as_output {
            "render folder"
        } else {
            "pipeline"
        };
        assert!(
            !outside.path().join("jax/EXECUTED").exists(),
            "--output-dir {form}: a script outside the tree ran"
        );
        ran.assert_ended(1);
        let m = read_json(&results.join("performance_metrics.json"));
        assert_eq!(m["totals"]["refused"], 1, "--output-dir {form}: {m:#}");
        assert_eq!(
            m["refused_scripts"],
            serde_json::json!(["linked/jax/evil.py"])
        );
        assert_eq!(
            m["totals"]["total_scripts"], 1,
            "--output-dir {form}: {m:#}"
        );
    }
}

/// The problem that names an entry removed from the data folder.
fn removed(kind: &str, rel: &str) -> String {
    format!("removed {kind} `{rel}` from the data folder: only regular files and folders are kept")
}

/// Every path below `dir` that is neither a regular file nor a folder (not followed).
fn specials_below(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| !e.file_type().is_file() && !e.file_type().is_dir())
        .map(|e| e.path().to_path_buf())
        .collect()
}

/// What GNN's step 16 does with a results tree, in Python: `os.walk` every folder and
/// `open(f).read()` every file. It must end (within 30 seconds) and without error.
fn python_reads_everything_below(dir: &Path) {
    let code = "import os, sys\n\
        n = 0\n\
        for root, dirs, files in os.walk(sys.argv[1]):\n\
        \x20   for f in files:\n\
        \x20       with open(os.path.join(root, f), 'rb') as fh:\n\
        \x20           fh.read()\n\
        \x20       n += 1\n\
        print(n)\n";
    let mut child = std::process::Command::new(python())
        .args(["-c", code])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("os.walk + open over {} blocked for 30 s", dir.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "os.walk + open over {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `leaves_specials.py` as `id` (a plain tree's `jax/leaves.py`, or GNN's
/// `m/jax/M_jax.py`), then checks what the next step reads: the data folder `data`
/// holds only regular files and folders, each entry the script made and the runner
/// removed is named on the result, the regular files stay and are listed, and Python
/// reads the whole tree. Returns what the script made, as (path, kind).
fn leaves_specials(gnn: bool, extra: &[&str]) -> Vec<(String, String)> {
    let t = Tree::outside_tmp();
    let (rel, id) = match gnn {
        true => ("11_render_output/m/jax/M_jax.py", "M_jax"),
        false => ("jax/leaves.py", "leaves"),
    };
    t.fixture("leaves_specials.py", rel);
    let ran = run(&t.root(), extra);
    ran.assert_ended(0);
    let r = complete_result(&t.results_dir(), id);
    assert_eq!(r["status"], "succeeded", "{r:#}");
    let data = match gnn {
        true => t.root().join("12_execute_output/m/jax/simulation_data"),
        false => t.results_dir().join("data/leaves"),
    };
    assert_eq!(Path::new(r["data_dir"].as_str().unwrap()), data);
    let made: Vec<(String, String)> =
        serde_json::from_value(read_json(&data.join("made.json"))).unwrap();
    for (path, kind) in &made {
        assert!(
            data.join(path).symlink_metadata().is_err(),
            "{kind} {path} is still there"
        );
        assert_problem(&r, &removed(kind, path));
    }
    assert_eq!(specials_below(&t.root()), Vec::<PathBuf>::new());
    assert_eq!(
        std::fs::read_to_string(data.join("result.txt")).unwrap(),
        "kept\n"
    );
    let files: Vec<&str> = r["data_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files, ["made.json", "result.txt"], "{r:#}");
    if gnn {
        gnn_documents_complete(&t);
        let doc = read_json(
            &t.root()
                .join("12_execute_output/m/jax/execution_logs/M_jax.py_results.json"),
        );
        let collected = &doc["collected_outputs"];
        let mut listed: Vec<&str> = ["simulation_data", "other", "traces", "visualizations"]
            .iter()
            .flat_map(|kind| collected[kind].as_array().unwrap())
            .map(|f| f.as_str().unwrap())
            .collect();
        listed.sort();
        let own = |f: &str| data.join(f).to_string_lossy().into_owned();
        assert_eq!(listed, [own("made.json"), own("result.txt")], "{doc:#}");
    }
    python_reads_everything_below(&t.root());
    made
}

fn made_paths(made: &[(String, String)]) -> Vec<&str> {
    made.iter().map(|(p, _)| p.as_str()).collect()
}

/// Sandboxed (the filter refuses a unix socket): FIFOs and every kind of symlink.
#[test]
fn fifos_and_symlinks_left_in_the_data_folder_are_removed_and_named() {
    let made = leaves_specials(false, &[]);
    let paths = made_paths(&made);
    for p in [
        "pipe",
        "passwd",
        "dangling",
        "loop_a",
        "loop_b",
        "sibling",
        "nested/pipe",
    ] {
        assert!(paths.contains(&p), "{p} was not made: {made:?}");
    }
}

/// Unsandboxed, the script also binds a unix socket (and as root makes a device node).
#[test]
fn sockets_and_devices_left_unsandboxed_are_removed_and_named() {
    let made = leaves_specials(false, &["--sandbox", "off"]);
    let paths = made_paths(&made);
    assert!(paths.contains(&"nested/sock"), "no socket made: {made:?}");
    assert!(paths.contains(&"pipe"), "no FIFO made: {made:?}");
}

/// GNN's layout: `12_execute_output/m/jax/simulation_data/` is what step 16 walks.
#[test]
fn gnn_simulation_data_holds_only_regular_files_and_folders() {
    let made = leaves_specials(true, &[]);
    assert!(made_paths(&made).contains(&"pipe"), "{made:?}");
    let made = leaves_specials(true, &["--sandbox", "off"]);
    assert!(made_paths(&made).contains(&"nested/sock"), "{made:?}");
}

/// A list a result cuts says so (issue 31): a data folder of 10,001 files gives a
/// `data_files` of 10,000, and `problems` names the list and its full length.
#[test]
fn a_cut_data_files_list_says_so_and_names_its_length() {
    let tree = Tree::new();
    tree.fixture("many_files.py", "jax/many_files.py");
    let ran = run(&tree.root(), &[]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let r = complete_result(&tree.results_dir(), "many_files");
    assert_eq!(r["data_files"].as_array().unwrap().len(), 10_000);
    assert_problem(
        &r,
        "data_files: the list names 10000 of 10001 files (it stops at 10000)",
    );
}
