//! Issue 34, item 2: with a persistent compilation cache, scripts of one family (one
//! template, other constants) do not start beside the family's first while it may be
//! filling the cache; other families' scripts take the free slot meanwhile. Without a
//! cache nothing waits. The boundary is the order of starts and ends the results
//! record, not how long anything took.

mod common;

use common::*;
use serde_json::Value;

/// One template: a name and a sleep that differ from script to script.
fn family_member(name: &str, sleep_s: f64, padding: usize) -> String {
    format!(
        "import time\nNAME = '{name}'\ntime.sleep({sleep_s})\nprint(NAME)\n{}\n",
        "#".repeat(padding)
    )
}

/// Seconds since the epoch at which an attempt started and ended.
fn span(r: &Value) -> (f64, f64) {
    let a = &r["attempts"][0];
    let started = a["started_at"].as_str().unwrap();
    let t = chrono_free_seconds(started);
    (t, t + a["duration_s"].as_f64().unwrap())
}

/// `2026-11-26T08:09:52.239Z` as seconds (within a day is enough here).
fn chrono_free_seconds(stamp: &str) -> f64 {
    let time = stamp.split('T').nth(1).unwrap().trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    h * 3600.0 + m * 60.0 + s
}

fn tree() -> Tree {
    let t = Tree::new();
    // Bigger files go first without history: a1 (the pioneer), b, a2, a3.
    t.write("m/jax/a1.py", &family_member("one", 2.0, 3000));
    let other = format!("import time\ntime.sleep(0.2)\n{}\n", "#".repeat(1000));
    t.write("m/jax/b.py", &other);
    t.write("m/jax/a2.py", &family_member("two", 0.1, 100));
    t.write("m/jax/a3.py", &family_member("three", 0.1, 10));
    t
}

#[test]
fn a_familys_scripts_wait_for_its_first_while_the_cache_may_lack_its_work() {
    let t = tree();
    let cache = t.dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let cache = cache.to_str().unwrap().to_string();
    // `cmd()` turns the cache off; a later `--compilation-cache` wins.
    let out = t.run(&[
        "--jobs",
        "2",
        "--compilation-cache",
        &cache,
        "--sandbox",
        "off",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (a1, b) = (span(&t.result("a1")), span(&t.result("b")));
    let (a2, a3) = (span(&t.result("a2")), span(&t.result("a3")));
    // The other family ran beside the pioneer; the family's others after it ended.
    assert!(b.0 < a1.1, "b {b:?} a1 {a1:?}");
    assert!(
        a2.0 >= a1.1 - 0.05,
        "a2 {a2:?} started before a1 {a1:?} ended"
    );
    assert!(
        a3.0 >= a1.1 - 0.05,
        "a3 {a3:?} started before a1 {a1:?} ended"
    );

    // Without a cache there is nothing to wait for: a2 takes b's slot at once.
    let out = t.run(&["--jobs", "2", "--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (a1, a2) = (span(&t.result("a1")), span(&t.result("a2")));
    assert!(a2.0 < a1.1, "a2 {a2:?} waited for a1 {a1:?} with no cache");
}
