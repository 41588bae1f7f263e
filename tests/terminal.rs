//! The terminal as nextest users expect it (issue 27): a line per finished script
//! (`PASS`, `FAIL`, `TIMEOUT`, `SKIP`), `SLOW` for a script past `--slow-timeout`, then
//! the failures alone with their reasons and stderr logs, then one summary line with
//! the counts and report.html's path; `-q` the summary line alone; colours on a
//! terminal; and `jax-runner show`, which prints the same end from the results folder.

mod common;

use assert_cmd::Command;
use common::*;

/// A script of `body`, padded to `size` bytes: with no history the runner starts
/// the largest script first, so the sizes fix the order.
fn script(t: &Tree, name: &str, body: &str, size: usize) {
    let pad = "#".repeat(size.saturating_sub(body.len() + 1));
    t.write(&format!("{name}/jax/{name}.py"), &format!("{body}{pad}\n"));
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const WORDS: &str = "1 of 4 succeeded, 1 failed, 1 timed out, 1 skipped";

/// One at a time: `a_ok` passes after 2.5 s (SLOW at 1 s), `b_bad` fails,
/// `c_hang` times out and spends --max-fail 2, so `d_later` is skipped.
fn four_endings() -> Tree {
    let t = Tree::new();
    script(
        &t,
        "a_ok",
        "import time\ntime.sleep(2.5)\nprint('ok')\n",
        400,
    );
    script(&t, "b_bad", "raise ValueError('deliberate')\n", 300);
    script(&t, "c_hang", "import time\ntime.sleep(600)\n", 200);
    script(&t, "d_later", "print('never')\n", 100);
    t
}

const ARGS: [&str; 12] = [
    "-j",
    "1",
    "--retries",
    "0",
    "--max-fail",
    "2",
    "--timeout",
    "5s",
    "--sandbox",
    "off",
    "--slow-timeout",
    "1s",
];

#[test]
fn a_run_says_each_ending_once_then_the_failures_then_one_summary() {
    let t = four_endings();
    let out = t.run(&ARGS);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let (said, err) = (stdout(&out), stderr(&out));
    // A line per finished script, and SLOW for the one past 1 s.
    for line in [
        "   PASS [",
        "   FAIL [",
        "TIMEOUT [",
        // A script never started is counted on one line of its kind, not named.
        "   SKIP 1 not started",
        "   SLOW [    1.00s] a_ok",
    ] {
        assert!(err.contains(line), "{line}: {err}");
    }
    assert!(
        err.lines()
            .any(|l| l.starts_with("   PASS [") && l.ends_with("] a_ok")),
        "{err}"
    );
    // Neither start lines, nor failures as warnings, nor the old table or counts.
    for gone in [
        "start  ",
        "warning: failed",
        "warning: timed_out",
        "STATUS  SCRIPT",
        "finished:",
        " in 0.",
    ] {
        assert!(
            !err.contains(gone) && !said.contains(gone),
            "{gone}: {err}\n{said}"
        );
    }
    // The failures alone, each with its reason and its stderr log.
    let results = t.results_dir();
    assert!(said.contains("\nfailures:\n"), "{said}");
    assert!(
        said.contains(
            "] b_bad: exit code 1 at b_bad/jax/b_bad.py:1 in <module>: ValueError: deliberate"
        ),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "stderr: {}",
            results.join("logs/b_bad.stderr.log").display()
        )),
        "{said}"
    );
    assert!(
        said.contains("] c_hang: no exit within 5s (timed out)"),
        "{said}"
    );
    assert!(!said.contains("a_ok"), "{said}");
    // One summary line, last, with the counts and report.html.
    let summary: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("Summary ["))
        .collect();
    assert_eq!(summary.len(), 1, "{said}");
    let report = results.join("report.html");
    assert!(summary[0].contains(&format!("] {WORDS}; ")), "{said}");
    assert!(
        summary[0].contains(" started warm; "),
        "how they ran: {said}"
    );
    assert!(
        summary[0].ends_with(&format!("; report: {}", report.display())),
        "{said}"
    );
    assert_eq!(said.lines().last(), Some(summary[0]));
    assert!(report.is_file());
    // The execution log keeps its lines.
    let log = std::fs::read_to_string(results.join("execution_log.txt")).unwrap();
    assert!(log.contains(&format!("finished: {WORDS} in ")), "{log}");
    assert!(log.contains("start  a_ok"), "{log}");

    // `show` prints the same end from the results folder, and says it failed.
    let shown = Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["show", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&shown), 1, "{}", stderr(&shown));
    assert_eq!(stdout(&shown), said);
    let last = Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["last", "-q", "--results-dir"])
        .arg(&results)
        .output()
        .unwrap();
    assert_eq!(code(&last), 1);
    assert_eq!(stdout(&last), format!("{}\n", summary[0]));

    // -q: the summary line alone. (This second run knows the first one's times, so
    // it starts the longest first and spends its failures elsewhere.)
    let quiet = t.run(&[&ARGS[..], &["-q"]].concat());
    assert_eq!(code(&quiet), 1);
    let said = stdout(&quiet);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.starts_with("Summary ["), "{said}");
    assert!(
        said.contains(" of 4 succeeded, ")
            && said.ends_with(&format!("; report: {}\n", report.display())),
        "{said}"
    );
    assert!(!stderr(&quiet).contains("PASS"), "{}", stderr(&quiet));
}

#[test]
fn show_without_a_run_says_there_is_none() {
    let t = Tree::new();
    let out = Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["show", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains("error: no run recorded in "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn on_a_terminal_pass_is_green_and_fail_red() {
    let t = Tree::new();
    script(&t, "a_ok", "print('ok')\n", 200);
    script(&t, "b_bad", "raise ValueError('deliberate')\n", 100);
    let bin = assert_cmd::cargo::cargo_bin("jax-runner");
    let command = format!(
        "{} --output-dir {} --python {} --device cpu --compilation-cache off --sandbox off --retries 0 -j 1",
        bin.display(),
        t.dir.path().display(),
        python().display()
    );
    // util-linux `script` gives the runner a pseudo-terminal for stdout and stderr.
    let out = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let said = stdout(&out);
    assert_eq!(code(&out), 1, "{said}");
    assert!(
        said.contains("\u{1b}[32m\u{1b}[1m   PASS\u{1b}[0m"),
        "{said:?}"
    );
    assert!(
        said.contains("\u{1b}[31m\u{1b}[1m   FAIL\u{1b}[0m"),
        "{said:?}"
    );
    assert!(
        said.contains("\u{1b}[31m\u{1b}[1mSummary\u{1b}[0m"),
        "{said:?}"
    );
}
