use super::*;

fn touch(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn ledger(root: &Path) -> Ledger {
    Ledger {
        results_dir: root.join("results"),
        step12_dir: root.join("12_execute_output"),
        run_id: "r2".into(),
    }
}

#[test]
fn a_records_earlier_files_are_kept_before_its_first_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    let results = &l.results_dir;
    touch(&results.join("a_results.json"), "earlier a");
    touch(&results.join("ab_results.json"), "earlier ab");
    touch(&results.join("logs/a.stdout.log"), "out");
    touch(&results.join("logs/a.attempt2.stderr.log"), "err");
    touch(&results.join("logs/ab.stdout.log"), "other script");
    touch(&results.join("data/a/simulation_results.json"), "old data");
    let errors = l.archive_record(
        "a",
        &results.join("data/a"),
        &[],
        &EarlierLogs::read(results),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let history = l.history();
    // The result is copied: it stays current until the new one is whole.
    assert_eq!(
        std::fs::read_to_string(results.join("a_results.json")).unwrap(),
        "earlier a"
    );
    assert_eq!(
        std::fs::read_to_string(history.join("a_results.json")).unwrap(),
        "earlier a"
    );
    assert!(history.join("logs/a.stdout.log").is_file());
    assert!(history.join("logs/a.attempt2.stderr.log").is_file());
    assert!(!results.join("logs/a.stdout.log").exists());
    assert!(
        !results.join("data/a").exists(),
        "the attempt starts in a new folder"
    );
    assert_eq!(
        std::fs::read_to_string(history.join("data/a/simulation_results.json")).unwrap(),
        "old data"
    );
    // Another script's files, even with a name that starts the same, stay.
    assert!(results.join("logs/ab.stdout.log").is_file());
    assert!(!history.join("ab_results.json").exists());
}

#[test]
fn gnn_files_and_data_keep_their_layout_under_the_step12_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    let step12 = &l.step12_dir;
    let logs = step12.join("m/jax/execution_logs");
    let extra = [
        logs.join("m.py_results.json"),
        logs.join("m.py_execution.log"),
    ];
    touch(&extra[0], "gnn result");
    let data = step12.join("m/jax/simulation_data");
    touch(&data.join("x.csv"), "1,2");
    let errors = l.archive_record("m", &data, &extra, &EarlierLogs::default());
    assert!(errors.is_empty(), "{errors:?}");
    let kept = l.history().join(STEP12_IN_HISTORY).join("m/jax");
    assert!(kept.join("simulation_data/x.csv").is_file());
    assert!(kept.join("execution_logs/m.py_results.json").is_file());
    assert!(!extra[0].exists() && !data.exists());
}

#[test]
fn a_retry_starts_empty_and_the_attempt_before_keeps_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    let data = l.results_dir.join("data/a");
    // An empty folder has nothing to keep and stays.
    std::fs::create_dir_all(&data).unwrap();
    assert!(l.archive_attempt("a", &data, 2).is_empty());
    assert!(data.is_dir());
    touch(&data.join("marker"), "attempt 1");
    assert!(l.archive_attempt("a", &data, 2).is_empty());
    assert!(!data.exists());
    let kept = l.history().join("attempts/a/attempt1/marker");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "attempt 1");
}

#[test]
fn a_kept_result_is_copied_and_nothing_else_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    touch(&l.results_dir.join("a_results.json"), "kept");
    touch(&l.results_dir.join("logs/a.stdout.log"), "out");
    assert!(l.keep_result("a", &[]).is_empty());
    assert!(l.history().join("a_results.json").is_file());
    assert!(l.results_dir.join("a_results.json").is_file());
    assert!(l.results_dir.join("logs/a.stdout.log").is_file());
    // No earlier result: nothing to keep, and no error.
    assert!(l.keep_result("b", &[]).is_empty());
    assert!(!l.history().join("b_results.json").exists());
}

#[test]
fn paths_outside_both_roots_are_never_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    let elsewhere = tmp.path().join("elsewhere/data");
    touch(&elsewhere.join("f"), "x");
    assert!(l
        .archive_record("a", &elsewhere, &[], &EarlierLogs::default())
        .is_empty());
    assert!(elsewhere.join("f").is_file());
}

#[test]
fn a_file_in_the_way_of_a_data_folder_is_left_for_the_attempt_to_report() {
    let tmp = tempfile::tempdir().unwrap();
    let l = ledger(tmp.path());
    let data = l.results_dir.join("data/a");
    touch(&data, "in the way");
    assert!(l
        .archive_record("a", &data, &[], &EarlierLogs::default())
        .is_empty());
    assert!(data.is_file());
}

/// The copy a move across file systems makes: folders and files as they are, links as
/// links (never followed, the top one included), a FIFO left out rather than waited on.
#[test]
fn a_copied_tree_keeps_links_as_links_and_leaves_fifos_out() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("from");
    touch(&from.join("a/b/data.json"), "{}");
    std::os::unix::fs::symlink("/etc", from.join("a/elsewhere")).unwrap();
    let fifo = from.join("a/pipe");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o644)).unwrap();
    let to = tmp.path().join("to");
    copy_tree(&from, &to).unwrap();
    assert_eq!(std::fs::read(to.join("a/b/data.json")).unwrap(), b"{}");
    assert_eq!(
        std::fs::read_link(to.join("a/elsewhere")).unwrap(),
        Path::new("/etc")
    );
    assert!(!to.join("a/pipe").exists());
    std::os::unix::fs::symlink(&from, tmp.path().join("link")).unwrap();
    copy_tree(&tmp.path().join("link"), &tmp.path().join("copy")).unwrap();
    assert_eq!(std::fs::read_link(tmp.path().join("copy")).unwrap(), from);
}
