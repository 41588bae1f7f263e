//! History-aware runs: longest expected first, `--resume`, `--rerun-failed`, and
//! `--jax-trace`.

mod common;

use common::*;

fn started(t: &Tree, id: &str) -> String {
    t.result(id)["attempts"][0]["started_at"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_previous_run_decides_the_order_longest_first() {
    let t = Tree::new();
    // Equal sizes, so the first run (no history) keeps discovery order a, b, c.
    for (name, secs) in [("a", "0.2"), ("b", "1.6"), ("c", "0.9")] {
        t.write(
            &format!("m/jax/{name}.py"),
            &format!("import time\ntime.sleep({secs})\n"),
        );
    }
    assert_eq!(code(&t.run(&["--jobs", "1", "--sandbox", "off"])), 0);
    assert!(started(&t, "a") < started(&t, "b") && started(&t, "b") < started(&t, "c"));
    assert_eq!(code(&t.run(&["--jobs", "1", "--sandbox", "off"])), 0);
    let (a, b, c) = (started(&t, "a"), started(&t, "b"), started(&t, "c"));
    assert!(
        b < c && c < a,
        "expected b (1.6 s), c (0.9 s), a (0.2 s): {b} {c} {a}"
    );
    let ids: Vec<String> = t.metrics()["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec!["a", "b", "c"], "reports keep discovery order");
}

#[test]
fn resume_keeps_unchanged_successes_and_reruns_the_rest() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/plain.py");
    let changing = t.fixture("ok_plain.py", "m/jax/changing.py");
    t.fixture("fail_exception.py", "m/jax/fail.py");
    assert_eq!(code(&t.run(&[])), 1);
    let plain_before = started(&t, "plain");
    let changing_before = started(&t, "changing");
    let fail_before = started(&t, "fail");
    std::fs::write(&changing, "print('changed')\n").unwrap();

    let out = t.run(&["--resume", "-v"]);
    assert_eq!(code(&out), 1);
    assert_eq!(started(&t, "plain"), plain_before, "unchanged success kept");
    // The summary table (-v) says which scripts did not run now.
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |id: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(id))
            .unwrap_or_else(|| panic!("no row for {id}: {table}"))
            .to_string()
    };
    assert!(row("plain").starts_with("kept "), "{table}");
    assert!(row("changing").starts_with("ok "), "{table}");
    assert_ne!(
        started(&t, "changing"),
        changing_before,
        "changed source reruns"
    );
    assert_ne!(started(&t, "fail"), fail_before, "failures rerun");
    let m = t.metrics();
    assert_eq!(m["totals"]["resumed"], 1);
    assert_eq!(m["totals"]["total_scripts"], 3);
    assert_eq!(m["scripts"][2]["id"], "plain");
    assert_eq!(m["scripts"][2]["resumed"], true);

    // A different environment for jax is a different run.
    assert_eq!(code(&t.run(&["--resume", "--env", "JAX_ENABLE_X64=1"])), 1);
    assert_ne!(started(&t, "plain"), plain_before);

    // --rerun-failed keeps every success, changed or not.
    let plain_now = started(&t, "plain");
    std::fs::write(t.root().join("m/jax/plain.py"), "print('edited')\n").unwrap();
    assert_eq!(code(&t.run(&["--rerun-failed"])), 1);
    assert_eq!(started(&t, "plain"), plain_now);
    assert_eq!(t.metrics()["totals"]["resumed"], 2);
}

#[test]
fn profile_writes_a_trace_and_the_result_names_it() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    let out = t.run(&["--jax-trace"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("ok_jax");
    let trace = r["jax"]["profile_trace"]
        .as_str()
        .unwrap_or_else(|| panic!("no trace: {}", r["jax"]));
    assert!(trace.ends_with(".trace.json.gz"));
    assert!(trace.starts_with(r["data_dir"].as_str().unwrap()));
    assert!(std::fs::metadata(trace).unwrap().len() > 0);
}

/// Every result says where the time went, cold and warm, from jax's own figures.
#[test]
fn every_result_says_where_its_time_went() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    for start in ["off", "on"] {
        let out = t.run(&["--sandbox", "off", "--warm-start", start]);
        assert_eq!(code(&out), 0, "{start}: {}", stderr(&out));
        let r = t.result("ok_jax");
        let b = &r["time_breakdown"];
        let part = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
        let total = r["attempts"][0]["duration_s"].as_f64().unwrap();
        let known =
            part("startup_s") + part("jax_import_s") + part("backend_init_s") + part("compile_s");
        assert!(part("compile_s") > 0.0, "{start}: the script compiles: {b}");
        assert!(
            known <= total,
            "{start}: the parts fit in the attempt: {b} of {total}"
        );
        assert!(
            (known + part("script_s") - total).abs() < 1e-6,
            "{start}: {b}"
        );
        if start == "off" {
            assert_eq!(r["attempts"][0]["cold_start_reason"], "--warm-start off");
            assert!(part("jax_import_s") > 0.0, "a cold start imports jax: {b}");
            assert!(part("startup_s") > 0.0, "{b}");
        } else {
            assert_eq!(r["attempts"][0]["start"], "warm");
            assert_eq!(part("jax_import_s"), 0.0, "the zygote imported jax: {b}");
        }
    }
}
