//! One vocabulary of outcomes (issue 25): a run in which scripts end in every status
//! a run can give them at once (succeeded, failed, timed out, interrupted, skipped),
//! and every report of it says the same counts in the same words: the terminal
//! summary, the execution log, `execution_report.md`, `report.html`, `junit.xml` and
//! `performance_metrics.json`.
//!
//! The carried script is one an earlier run recorded and this run leaves out
//! (`--exclude`): the ledger keeps its record, and every report counts it as carried.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::*;

/// The statuses and the count each should have, in the order they are worded.
const COUNTS: [(&str, u64); 6] = [
    ("succeeded", 1),
    ("failed", 1),
    ("timed_out", 1),
    ("interrupted", 1),
    ("skipped", 1),
    ("carried", 1),
];
const WORDS: &str = "1 of 6 succeeded, 1 failed, 1 timed out, 1 interrupted, 1 skipped, 1 carried";

/// A script of `body`, padded to `size` bytes: with no history the runner starts
/// the largest script first, so the sizes fix the order.
fn script(t: &Tree, name: &str, body: &str, size: usize) {
    let pad = "#".repeat(size.saturating_sub(body.len() + 1));
    t.write(&format!("{name}/jax/{name}.py"), &format!("{body}{pad}\n"));
}

/// Waits until `path` exists, up to `limit`.
fn wait_for(path: &std::path::Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_report_words_the_same_counts() {
    let t = Tree::new();
    // Two slots. `a_ok` holds one for 5 s; `b_bad` fails at once and `c_slow` takes
    // its slot and times out at 8 s: the second failure spends --max-fail 2, so
    // `e_later`, still waiting, is skipped. `d_hang` got `a_ok`'s slot at 5 s and is
    // still running (its timeout is 13 s away) when the runner is interrupted.
    script(&t, "a_ok", "import time\ntime.sleep(5)\nprint('ok')\n", 500);
    script(&t, "b_bad", "raise ValueError('deliberate')\n", 400);
    script(&t, "c_slow", "import time\ntime.sleep(600)\n", 300);
    script(&t, "d_hang", "import time\ntime.sleep(600)\n", 200);
    script(&t, "e_later", "print('never')\n", 100);
    script(&t, "f_kept", "print('kept')\n", 50);
    // An earlier run of f_kept alone: its record is what the run below carries.
    let out = t.run(&["-k", "f_kept", "--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let results = t.results_dir();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
        .arg("--output-dir")
        .arg(t.dir.path())
        .arg("--python")
        .arg(python())
        .args([
            "--device",
            "cpu",
            "--compilation-cache",
            "off",
            "--sandbox",
            "off",
        ])
        .args([
            "-j",
            "2",
            "--retries",
            "0",
            "--max-fail",
            "2",
            "--timeout",
            "8s",
            "--exclude",
            "f_kept",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The skipped script's result is written once the budget is spent.
    wait_for(
        &results.join("e_later_results.json"),
        Duration::from_secs(60),
    );
    wait_for(
        &results.join("c_slow_results.json"),
        Duration::from_secs(10),
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the runner did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");

    // performance_metrics.json: disjoint counts that add up.
    let m = t.metrics();
    let totals = &m["totals"];
    for (status, n) in COUNTS {
        assert_eq!(totals[status], n, "{status}: {totals:#}");
    }
    assert_eq!(totals["total_scripts"], 6);
    for (id, status) in [
        ("a_ok", "succeeded"),
        ("b_bad", "failed"),
        ("c_slow", "timed_out"),
        ("d_hang", "interrupted"),
        ("e_later", "skipped"),
        ("f_kept", "succeeded"),
    ] {
        assert_eq!(t.result(id)["status"], status, "{id}");
    }

    // The terminal summary and the execution log.
    assert!(stdout.contains(&format!("] {WORDS}; ")), "{stdout}");
    let log = std::fs::read_to_string(results.join("execution_log.txt")).unwrap();
    assert!(log.contains(&format!("finished: {WORDS} in ")), "{log}");

    // execution_report.md: the same line, and a section of the four that need
    // attention, counted the same way.
    let md = std::fs::read_to_string(results.join("execution_report.md")).unwrap();
    assert!(md.contains(&format!("{WORDS} in ")), "{md}");
    assert!(
        md.contains("## Did not succeed (4: 1 failed, 1 timed out, 1 interrupted, 1 skipped)"),
        "{md}"
    );

    // report.html: one card per status with the same numbers, a title in the same
    // words, and a heading that counts the cards it heads.
    let html = std::fs::read_to_string(results.join("report.html")).unwrap();
    for (status, n) in COUNTS {
        if n > 0 {
            assert!(
                html.contains(&format!("data-status=\"{status}\" data-n=\"{n}\"")),
                "{status} card"
            );
        }
    }
    assert!(html.contains(WORDS), "the title");
    assert!(
        html.contains("Did not succeed (<span id=\"failures-count\" data-n=\"4\">4</span>)"),
        "the heading"
    );
    assert_eq!(html.matches("<div class=\"failure ").count(), 4);

    // junit.xml: nextest's mapping, and the six exact counts as properties.
    let junit = std::fs::read_to_string(results.join("junit.xml")).unwrap();
    for (status, n) in COUNTS {
        assert!(
            junit.contains(&format!("<property name=\"{status}\" value=\"{n}\"/>")),
            "{status}: {junit}"
        );
    }
    // failed, timed out and interrupted are failures; skipped and carried are skipped.
    assert!(junit.contains("failures=\"3\""), "{junit}");
    assert!(junit.contains("skipped=\"2\""), "{junit}");
    assert!(junit.contains("carried from run "), "{junit}");
    let m = t.metrics();
    let kept = m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "f_kept");
    assert_eq!(kept.unwrap()["carried_status"], "succeeded");
}
