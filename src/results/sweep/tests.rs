use super::*;

static WALK_ALL: crate::discovery::DiscoverOptions = crate::discovery::DiscoverOptions {
    recursive: true,
    exclude: Vec::new(),
};

fn touch(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, "x").unwrap();
}

#[test]
fn log_names_map_to_their_script() {
    assert_eq!(log_owner("a.b.stdout.log"), Some("a.b"));
    assert_eq!(log_owner("a.attempt2.stderr.log"), Some("a"));
    assert_eq!(log_owner("a.attemptx.stderr.log"), Some("a.attemptx"));
    assert_eq!(log_owner("notes.txt"), None);
}

#[test]
fn files_of_gone_scripts_move_into_the_runs_history() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for f in [
        "keep_results.json",
        "gone_results.json",
        "logs/keep.stdout.log",
        "logs/gone.stdout.log",
        "logs/gone.attempt2.stderr.log",
        "data/keep/out.json",
        "data/gone/out.json",
        "performance_metrics.json",
    ] {
        touch(&dir.join(f));
    }
    let sweep = Sweep {
        results_dir: dir,
        ids: HashSet::from(["keep"]),
        gnn: None,
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: "r1",
        budget: HistoryBudget::default(),
    };
    let swept = sweep.run();
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    assert_eq!(swept.moved.len(), 4, "{:?}", swept.moved);
    for f in [
        "keep_results.json",
        "logs/keep.stdout.log",
        "data/keep/out.json",
    ] {
        assert!(dir.join(f).exists(), "{f} was moved");
    }
    assert!(dir.join("performance_metrics.json").exists());
    for f in [
        "gone_results.json",
        "logs/gone.stdout.log",
        "logs/gone.attempt2.stderr.log",
        "data/gone/out.json",
    ] {
        assert!(!dir.join(f).exists(), "{f} stayed");
        assert!(
            dir.join("history/r1").join(f).exists(),
            "{f} not in history"
        );
    }
    // A second sweep finds nothing and leaves the history alone.
    let again = Sweep {
        run_id: "r2",
        ..sweep
    }
    .run();
    assert!(again.moved.is_empty(), "{:?}", again.moved);
}

#[test]
fn gnn_files_of_gone_scripts_move_too() {
    let tmp = tempfile::tempdir().unwrap();
    let (results, step12) = (tmp.path().join("results"), tmp.path().join("12"));
    let impl_dir = step12.join("m/jax");
    let entry = GnnEntry {
        model: "m".into(),
        script_name: "A.py".into(),
        file_key: "A.py".into(),
        impl_dir: impl_dir.clone(),
        data_dir: impl_dir.join("simulation_data/A"),
    };
    for f in [
        "m/jax/execution_logs/A.py_results.json",
        "m/jax/execution_logs/B.py_results.json",
        "m/jax/simulation_data/A/x.json",
        "m/jax/simulation_data/B/x.json",
        "gone/jax/execution_logs/G.py_results.json",
        "gone/pymdp/other.py",
        "summaries/execution_summary.json",
    ] {
        touch(&step12.join(f));
    }
    let entries = HashMap::from([("a".to_string(), entry)]);
    let swept = Sweep {
        results_dir: &results,
        ids: HashSet::from(["a"]),
        gnn: Some((&step12, &entries)),
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: "r",
        budget: HistoryBudget::default(),
    }
    .run();
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    let history = results.join("history/r/12_execute_output");
    for f in [
        "m/jax/execution_logs/B.py_results.json",
        "m/jax/simulation_data/B/x.json",
        "gone/jax/execution_logs/G.py_results.json",
    ] {
        assert!(!step12.join(f).exists(), "{f} stayed");
        assert!(history.join(f).exists(), "{f} not in history");
    }
    for f in [
        "m/jax/execution_logs/A.py_results.json",
        "m/jax/simulation_data/A/x.json",
        "gone/pymdp/other.py",
        "summaries/execution_summary.json",
    ] {
        assert!(step12.join(f).exists(), "{f} was moved");
    }
}

/// `n` history folders of runs one second apart, oldest first.
fn past_runs(results: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let id = format!("20261122T18{:02}{:02}.000Z-{}", i / 60, i % 60, 100 + i);
            touch(&results.join(HISTORY_DIR).join(&id).join("old_results.json"));
            id
        })
        .collect()
}

fn history_names(results: &Path) -> Vec<String> {
    entries(results, Path::new(HISTORY_DIR))
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn run_ids_are_recognised() {
    assert!(is_run_id(&crate::paths::run_id(
        std::time::SystemTime::now()
    )));
    assert!(is_run_id("20261122T183605.123Z-4242"));
    assert!(is_run_id("20261122T183605Z-1"));
    for not in [
        "notes",
        "r1",
        "20261122T183605.123Z",
        "2026112T183605Z-1",
        "x-1",
    ] {
        assert!(!is_run_id(not), "{not}");
    }
}

#[test]
fn the_history_keeps_the_newest_runs_and_this_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = past_runs(dir, 8);
    // A person's folder and file in history/ are not runs: they stay.
    touch(&dir.join("history/keep-me/notes.txt"));
    touch(&dir.join("history/README"));
    // This run's folder sorts oldest (its clock went back): it stays all the same.
    let current = "20261122T170000.000Z-7";
    touch(&dir.join("history").join(current).join("gone_results.json"));
    let sweep = Sweep {
        results_dir: dir,
        ids: HashSet::new(),
        gnn: None,
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: current,
        budget: HistoryBudget::default(),
    };
    let mut swept = Swept::default();
    sweep.prune(
        HistoryBudget {
            runs: 3,
            ..HistoryBudget::default()
        },
        None,
        &mut swept,
    );
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    // Three places: this run's and the two newest before it.
    let mut want = vec![
        current.to_string(),
        runs[6].clone(),
        runs[7].clone(),
        "README".into(),
        "keep-me".into(),
    ];
    want.sort();
    assert_eq!(history_names(dir), want);
    assert_eq!(swept.pruned.len(), 6, "{:?}", swept.pruned);
    assert!(dir.join("history/keep-me/notes.txt").exists());
}

#[test]
fn every_sweep_prunes_to_the_documented_number() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = past_runs(dir, HistoryBudget::default().runs + 5);
    touch(&dir.join("gone_results.json"));
    let current = "20261123T000000.000Z-9";
    let swept = Sweep {
        results_dir: dir,
        ids: HashSet::new(),
        gnn: None,
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: current,
        budget: HistoryBudget::default(),
    }
    .run();
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    assert_eq!(swept.moved.len(), 1);
    let left = history_names(dir);
    assert_eq!(left.len(), HistoryBudget::default().runs, "{left:?}");
    assert!(
        left.contains(&current.to_string()),
        "this run's history was removed"
    );
    assert!(dir
        .join("history")
        .join(current)
        .join("gone_results.json")
        .exists());
    // The oldest six went; the newest nine before this run stayed.
    for old in &runs[..6] {
        assert!(!left.contains(old), "{old} stayed");
    }
    for kept in &runs[6..] {
        assert!(left.contains(kept), "{kept} went");
    }
}

/// A results folder in a tree another user owns may hold links where the runner's
/// folders go: nothing is moved out of, or pruned in, where they point.
#[test]
fn planted_links_lead_the_sweep_nowhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs_target, history_target) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dir = tmp.path();
    touch(&dir.join("gone_results.json"));
    touch(&logs_target.path().join("gone.stdout.log"));
    let old_run = history_target.path().join("20200101T000000.000Z-1");
    touch(&old_run.join("x"));
    std::os::unix::fs::symlink(logs_target.path(), dir.join("logs")).unwrap();
    std::os::unix::fs::symlink(history_target.path(), dir.join(HISTORY_DIR)).unwrap();
    let sweep = Sweep {
        results_dir: dir,
        ids: HashSet::from(["keep"]),
        gnn: None,
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: "20990101T000000.000Z-2",
        budget: HistoryBudget::default(),
    };
    let mut swept = sweep.run();
    sweep.prune(
        HistoryBudget {
            runs: 0,
            ..HistoryBudget::default()
        },
        None,
        &mut swept,
    );
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    assert_eq!(swept.moved, vec![dir.join("gone_results.json")]);
    assert!(logs_target.path().join("gone.stdout.log").is_file());
    assert!(old_run.join("x").is_file());
    let history = dir.join(HISTORY_DIR);
    assert!(history.is_dir() && !history.is_symlink());
    assert!(sweep.history().join("gone_results.json").is_file());
}

/// The size bound: the newest runs that fit stay; once one does not, it and every
/// older one go, whatever the count allows.
#[test]
fn history_keeps_the_newest_runs_that_fit_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = past_runs(dir, 6);
    for (i, run) in runs.iter().enumerate() {
        // 1 KiB each, but the third newest holds 10 KiB.
        let size = if i == 3 { 10 * 1024 } else { 1024 };
        let file = dir.join(HISTORY_DIR).join(run).join("data.bin");
        std::fs::write(file, vec![0u8; size]).unwrap();
    }
    let current = "20261123T000000.000Z-9";
    let budget = TEN_RUNS_IN_8_KIB;
    let sweep = history_sweep(dir, current, budget);
    let mut swept = Swept::default();
    sweep.prune(budget, None, &mut swept);
    let left = history_names(dir);
    // The two newest fit (2 KiB); the third newest (10 KiB) does not, so it and the
    // older three go.
    assert_eq!(left, [runs[4].clone(), runs[5].clone()], "{left:?}");
    assert_eq!(swept.pruned.len(), 4);
    assert!(swept.pruned_bytes >= 13 * 1024);
}

/// The sizes read while the zygote imports are the walk's, folder for folder, and the
/// sweep weighs the history by them: a folder they say is over the budget goes
/// although its files are small, and one they lack is walked then.
#[test]
fn the_sweep_weighs_the_history_by_the_sizes_read_ahead() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = past_runs(dir, 3);
    for run in &runs {
        let file = dir.join(HISTORY_DIR).join(run).join("data.bin");
        std::fs::write(file, vec![0u8; 1024]).unwrap();
    }
    let current = "20261123T000000.000Z-9";
    let read = HistorySizes::read(dir, current);
    assert_eq!(read.0.len(), runs.len(), "{read:?}");
    for run in &runs {
        let walked = tree_size(&dir.join(HISTORY_DIR).join(run));
        assert_eq!(read.0[run], walked, "{run}");
        assert!(walked >= 1024, "{run}: {walked}");
    }
    let budget = TEN_RUNS_IN_8_KIB;
    let sweep = history_sweep(dir, current, budget);
    // The newest as it is, the next said to hold 9 KiB, the oldest not said at all.
    let said = HistorySizes(HashMap::from([
        (runs[2].clone(), read.0[&runs[2]]),
        (runs[1].clone(), 9 * 1024),
    ]));
    let mut swept = Swept::default();
    sweep.prune(budget, Some(&said), &mut swept);
    assert!(swept.errors.is_empty(), "{:?}", swept.errors);
    assert_eq!(history_names(dir), [runs[2].clone()]);
    assert_eq!(swept.pruned.len(), 2);
    assert_eq!(swept.pruned_bytes, 9 * 1024 + read.0[&runs[0]]);
}

/// Ten earlier runs, at most 8 KiB in all.
const TEN_RUNS_IN_8_KIB: HistoryBudget = HistoryBudget {
    runs: 10,
    bytes: 8 * 1024,
};

/// A sweep of `dir`'s history for the run `current`, under `budget`, that moves no
/// script's files (it knows no tree).
fn history_sweep<'a>(dir: &'a Path, current: &'a str, budget: HistoryBudget) -> Sweep<'a> {
    Sweep {
        results_dir: dir,
        ids: HashSet::new(),
        gnn: None,
        tree: (Path::new("/nonexistent"), &WALK_ALL),
        run_id: current,
        budget,
    }
}
