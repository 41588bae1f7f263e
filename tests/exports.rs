//! `--export-json`, `--export-markdown`, `--export-junit` and `--export-csv`: the
//! end-of-run documents written where the user names, `-` for standard output.

mod common;

use common::*;

/// A tree with a script that passes and one that fails with a comma and quotes in the
/// last line of its stderr (the CSV's reason).
fn tree() -> Tree {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/good.py");
    t.write(
        "m/jax/bad.py",
        "import sys\nprint('went wrong, said \"no\"', file=sys.stderr)\nsys.exit(3)\n",
    );
    t
}

/// A CSV document's rows, as RFC 4180 reads them.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = vec![vec![String::new()]];
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        let row = rows.last_mut().unwrap();
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                row.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => row.push(String::new()),
            ('\r', false) => {}
            ('\n', false) => rows.push(vec![String::new()]),
            (c, _) => row.last_mut().unwrap().push(c),
        }
    }
    if rows.last().is_some_and(|r| r.len() == 1 && r[0].is_empty()) {
        rows.pop();
    }
    rows
}

/// Checks the CSV of the tree's run: a header, then one row per script.
fn check_csv(text: &str) {
    let rows = csv_rows(text);
    assert_eq!(rows[0][..3], ["id", "status", "exit_code"], "{text}");
    assert_eq!(rows.len(), 3, "a header and one row per script: {text}");
    let row = |id: &str| rows.iter().find(|r| r[0] == id).unwrap().clone();
    let (good, bad) = (row("good"), row("bad"));
    assert_eq!((good[1].as_str(), good[2].as_str()), ("succeeded", "0"));
    assert_eq!((bad[1].as_str(), bad[2].as_str()), ("failed", "3"));
    assert_eq!(bad[6], "1", "one attempt: {bad:?}");
    assert!(bad[7].contains("went wrong, said \"no\""), "{bad:?}");
    assert!(good[7].is_empty(), "{good:?}");
}

#[test]
fn each_export_goes_to_its_file() {
    let t = tree();
    let dir = t.root().join("exports");
    let file = |name: &str| dir.join(name);
    // A folder that does not exist is an error before anything runs, not made.
    let out = t
        .cmd()
        .arg("--export-json")
        .arg(file("m.json"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not exist: make it first"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.exists() && !t.results_dir().exists());
    std::fs::create_dir(&dir).unwrap();
    let out = t
        .cmd()
        .arg("--export-json")
        .arg(file("m.json"))
        .arg("--export-markdown")
        .arg(file("r.md"))
        .arg("--export-junit")
        .arg(file("j.xml"))
        .arg("--export-csv")
        .arg(file("s.csv"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let results = t.results_dir();
    let read = |p: std::path::PathBuf| std::fs::read(&p).unwrap();
    assert_eq!(
        read(file("m.json")),
        read(results.join("performance_metrics.json")),
        "the JSON export is performance_metrics.json's bytes"
    );
    assert_eq!(
        read(file("r.md")),
        read(results.join("execution_report.md"))
    );
    assert_eq!(read(file("j.xml")), read(results.join("junit.xml")));
    check_csv(&String::from_utf8(read(file("s.csv"))).unwrap());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "atomic writes leave no temporary: {leftovers:?}"
    );
}

#[test]
fn csv_to_stdout_is_stdout_alone() {
    let t = tree();
    let out = t.run(&["--export-csv", "-", "--progress", "on", "--no-capture"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    check_csv(&text);
    assert!(
        !text.contains("plain ok"),
        "script output stays off stdout: {text}"
    );
}

#[test]
fn two_streams_on_stdout_are_refused() {
    let t = tree();
    let out = t.run(&["--export-csv", "-", "--events", "-"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("standard output"), "{}", stderr(&out));
    assert!(!t.results_dir().join("performance_metrics.json").exists());
}
