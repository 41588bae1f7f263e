//! The results folder describes one run, and says which: a script deleted between
//! two runs leaves no result, log or data folder among the current files, in
//! jax-runner's results folder or in GNN's step-12 layout (they wait in
//! `history/<run_id>/`); every file names the run, the runner and its command line.

mod common;

use std::path::Path;

use common::*;

/// Every file under `dir` whose path mentions `needle`, outside `history/`.
fn current_files_naming(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == "history" {
                continue;
            }
            if rel.contains(needle) {
                found.push(rel);
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found
}

#[test]
fn a_deleted_script_leaves_nothing_current_behind() {
    let tree = Tree::new();
    let render = "11_render_output";
    tree.fixture("ok_plain.py", &format!("{render}/keeper/jax/Keeper_jax.py"));
    let doomed = tree.fixture("ok_plain.py", &format!("{render}/doomed/jax/Doomed_jax.py"));
    let first = tree.run(&["-q"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let results = tree.results_dir();
    let step12 = tree.root().join("12_execute_output");
    assert!(!current_files_naming(&results, "Doomed").is_empty());
    assert!(!current_files_naming(&step12, "doomed").is_empty());
    let first_run = tree.metrics()["run"]["run_id"].as_str().map(String::from);

    std::fs::remove_file(doomed).unwrap();
    let second = tree.run(&["-q"]);
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    assert_eq!(
        current_files_naming(&results, "Doomed"),
        Vec::<String>::new()
    );
    assert_eq!(
        current_files_naming(&results, "doomed"),
        Vec::<String>::new()
    );
    assert_eq!(
        current_files_naming(&step12, "Doomed"),
        Vec::<String>::new()
    );
    assert_eq!(
        current_files_naming(&step12, "doomed"),
        Vec::<String>::new()
    );
    let globbed: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("_results.json"))
        .collect();
    assert_eq!(globbed.len(), 1, "{globbed:?}");
    assert_eq!(tree.metrics()["scripts"].as_array().unwrap().len(), 1);

    // Moved, not lost: the history folder of the second run holds them.
    let history = std::fs::read_dir(results.join("history"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect::<Vec<_>>();
    assert_eq!(history.len(), 1, "{history:?}");
    let kept = current_files_naming(&history[0], "oomed");
    assert!(
        kept.iter().any(|f| f.ends_with("_results.json")),
        "{kept:?}"
    );
    assert!(kept.iter().any(|f| f.starts_with("logs/")), "{kept:?}");
    assert!(
        kept.iter()
            .any(|f| f.starts_with("12_execute_output/doomed")),
        "{kept:?}"
    );
    if let Some(first_run) = first_run {
        assert_ne!(history[0].file_name().unwrap().to_string_lossy(), first_run);
    }
}

#[test]
fn every_file_names_its_run_and_kept_results_name_theirs() {
    let tree = Tree::new();
    tree.fixture("ok_plain.py", "m/jax/a.py");
    tree.fixture("ok_plain.py", "m/jax/b.py");
    let first = tree.run(&["-q"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let first_id = tree.metrics()["run"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(tree.result("a")["run_id"], first_id.as_str());

    // b changes, so --resume runs it again and keeps a.
    tree.write("m/jax/b.py", "print('changed')\n");
    let events = tree.root().join("events.ndjson");
    let second = tree.run(&["-q", "--resume", "--events", events.to_str().unwrap()]);
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    let m = tree.metrics();
    let run = &m["run"];
    let run_id = run["run_id"].as_str().unwrap();
    assert_ne!(run_id, first_id, "two runs, one id");
    assert_eq!(run["runner_version"], env!("CARGO_PKG_VERSION"));
    let argv: Vec<&str> = run["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv[0].ends_with("jax-runner"), "{argv:?}");
    assert!(argv.contains(&"--resume"), "{argv:?}");

    let kept = tree.result("a");
    assert_eq!(kept["run_id"], run_id);
    assert_eq!(kept["resumed_from"], first_id.as_str());
    let ran = tree.result("b");
    assert_eq!(ran["run_id"], run_id);
    assert!(ran.get("resumed_from").is_none(), "{ran}");

    let started = std::fs::read_to_string(&events).unwrap();
    let started: serde_json::Value =
        serde_json::from_str(started.lines().find(|l| l.contains("run_started")).unwrap()).unwrap();
    assert_eq!(started["run_id"], run_id);
    for report in ["report.html", "execution_report.md"] {
        let text = std::fs::read_to_string(tree.results_dir().join(report)).unwrap();
        assert!(text.contains(run_id), "{report} lacks the run id");
        assert!(
            text.contains(env!("CARGO_PKG_VERSION")),
            "{report} lacks the version"
        );
    }
}

#[test]
fn the_history_keeps_the_newest_ten_runs_by_default() {
    let tree = Tree::new();
    tree.fixture("ok_plain.py", "m/jax/a.py");
    let history = tree.results_dir().join("history");
    // 13 earlier runs, oldest first, and a folder that is no run.
    let runs: Vec<String> = (0..13)
        .map(|i| format!("20200101T0000{i:02}.000Z-{}", 10 + i))
        .collect();
    for run in runs.iter().chain(["notes".to_string()].iter()) {
        std::fs::create_dir_all(history.join(run)).unwrap();
        std::fs::write(history.join(run).join("gone_results.json"), "{}").unwrap();
    }
    let out = tree.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("removed the history of 3 earlier run(s)"),
        "the run says it pruned: {}",
        stderr(&out)
    );
    let mut left: Vec<String> = std::fs::read_dir(&history)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    let mut want: Vec<String> = runs[3..].to_vec();
    want.push("notes".into());
    assert_eq!(left, want, "the three oldest runs go, the rest stay");
}
