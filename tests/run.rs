//! The built binary on fixture trees with real Python: what each kind of script does
//! to the results, the metrics and the exit code.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn well_behaved_scripts_succeed_with_the_full_contract() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "model/jax/ok_jax.py");
    t.fixture("print_env.py", "model/jax/print_env.py");
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let r = t.result("ok_jax");
    assert_eq!(r["schema_version"], 2);
    assert_eq!(r["success"], true);
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["return_code"], 0);
    assert_eq!(r["signal"], Value::Null);
    assert_eq!(r["device_requested"], "cpu");
    assert_eq!(r["device_used"], "cpu");
    assert_eq!(r["attempts"].as_array().unwrap().len(), 1);
    assert!(r["execution_time_s"].as_f64().unwrap() > 0.0);
    assert!(
        r["cpu_user_s"].as_f64().unwrap() > 0.0,
        "python burns user CPU: {r}"
    );
    // Memory as the kernel counts it: a warm script's pages shared with the zygote
    // count in part (PSS), so the figure is what it holds of its own and a share.
    assert!(r["peak_memory_mb"].as_f64().unwrap() > 5.0, "{r}");
    assert!(
        ["pss", "cgroup", "rss"].contains(&r["memory_source"].as_str().unwrap()),
        "{r}"
    );
    let stdout_log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    assert!(!stdout_log.is_empty());
    let data_dir = std::path::PathBuf::from(r["data_dir"].as_str().unwrap());
    assert!(data_dir.join("simulation_results.json").is_file());

    let m = t.metrics();
    assert_eq!(m["schema_version"], 2);
    assert_eq!(m["totals"]["total_scripts"], 2);
    assert_eq!(m["totals"]["succeeded"], 2);
    assert_eq!(m["totals"]["failed"], 0);
    assert_eq!(m["run"]["device"], "cpu");
    assert_eq!(m["run"]["jax_version"], "0.10.2");
    assert_eq!(m["run"]["interpreter_source"], "flag");
    let ids: Vec<&str> = m["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["ok_jax", "print_env"]);
    assert_eq!(m["scripts"][0]["results_file"], "ok_jax_results.json");

    let log = std::fs::read_to_string(t.results_dir().join("execution_log.txt")).unwrap();
    assert!(log.contains("succeeded ok_jax"), "{log}");
    assert!(log.contains("finished: 2 of 2 succeeded in "), "{log}");
    // Each warm start leaves its line, the time it was forked (what bench/turns.sh
    // measures from the zygote's ready), and a cold start none.
    let forked: Vec<&str> = (log.lines())
        .filter(|l| l.contains("warm start: forked "))
        .collect();
    let warm: Vec<&str> = ["ok_jax", "print_env"]
        .into_iter()
        .filter(|id| t.result(id)["attempts"][0]["start"] == "warm")
        .collect();
    assert_eq!(forked.len(), warm.len(), "{log}");
    for id in warm {
        let named = format!("{id}.py as pid ");
        assert!(forked.iter().any(|l| l.contains(&named)), "{id}: {log}");
    }
}

#[test]
fn child_environment_working_directory_and_data_folder() {
    let t = Tree::new();
    let script = t.fixture("print_env.py", "m/jax/print_env.py");
    t.fixture("reads_sibling.py", "m/jax/reads_sibling.py");
    t.fixture("sibling_data.json", "m/jax/sibling_data.json");
    let out = t
        .cmd()
        .env("JAX_PLATFORM_NAME", "gpu")
        .env("CUDA_VISIBLE_DEVICES", "0")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("print_env");
    let env = read_json(&std::path::Path::new(r["data_dir"].as_str().unwrap()).join("env.json"));
    assert_eq!(env["JAX_PLATFORMS"], "cpu");
    assert_eq!(
        env["JAX_PLATFORM_NAME"],
        Value::Null,
        "deprecated variable is removed"
    );
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "", "CPU runs hide GPUs");
    assert_eq!(env["JAX_RUNNER_ATTEMPT"], "1");
    assert_eq!(env["GNN_OUTPUT_DIR"], r["data_dir"]);
    assert_eq!(env["JAX_OUTPUT_DIR"], r["data_dir"]);
    assert_eq!(
        env["JAX_COMPILATION_CACHE_DIR"],
        Value::Null,
        "cache is off in tests"
    );
    assert_eq!(
        env["cwd"].as_str().unwrap(),
        script
            .parent()
            .unwrap()
            .canonicalize()
            .unwrap()
            .to_str()
            .unwrap()
    );
    assert_eq!(t.result("reads_sibling")["success"], true);
}

#[test]
fn compilation_cache_variables_point_at_the_chosen_folder() {
    let t = Tree::new();
    t.fixture("print_env.py", "m/jax/print_env.py");
    let cache = t.root().join("xla-cache");
    let out = t
        .cmd()
        .arg("--compilation-cache")
        .arg(&cache)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("print_env");
    let env = read_json(&std::path::Path::new(r["data_dir"].as_str().unwrap()).join("env.json"));
    assert_eq!(env["JAX_COMPILATION_CACHE_DIR"], cache.to_str().unwrap());
    assert_eq!(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"], "0");
    assert_eq!(env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"], "-1");
    assert!(cache.is_dir());
    assert_eq!(
        t.metrics()["run"]["compilation_cache"],
        cache.to_str().unwrap()
    );
}

#[test]
fn a_failing_script_fails_the_run_with_its_traceback() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    t.fixture("fail_exception.py", "m/jax/fail_exception.py");
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = t.result("fail_exception");
    assert_eq!(r["success"], false);
    assert_eq!(r["status"], "failed");
    assert_eq!(r["return_code"], 1);
    let tail = r["stderr_tail"].to_string();
    assert!(
        tail.contains("ValueError: deliberate failure for tests"),
        "{tail}"
    );
    let m = t.metrics();
    assert_eq!(m["totals"]["succeeded"], 1);
    assert_eq!(m["totals"]["failed"], 1);
    assert_eq!(
        t.result("ok_jax")["success"],
        true,
        "one failure does not stop the rest"
    );
}

#[test]
fn a_hung_script_is_timed_out_and_its_group_killed() {
    let t = Tree::new();
    t.fixture("hang.py", "m/jax/hang.py");
    t.fixture("ignore_sigterm.py", "m/jax/ignore_sigterm.py");
    let out = t.run(&["--timeout", "3s", "--grace", "1s"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let hang = t.result("hang");
    assert_eq!(hang["status"], "timed_out");
    assert_eq!(hang["signal_name"], "SIGTERM");
    let stubborn = t.result("ignore_sigterm");
    assert_eq!(stubborn["status"], "timed_out");
    assert_eq!(
        stubborn["signal_name"], "SIGKILL",
        "SIGTERM ignored, so SIGKILL after grace"
    );
    let secs = stubborn["execution_time_s"].as_f64().unwrap();
    assert!(
        (3.0..15.0).contains(&secs),
        "timeout 3s + grace 1s, took {secs}"
    );
    assert_eq!(t.metrics()["totals"]["timed_out"], 2);
    let root = t.root();
    assert!(
        processes_under(&root).is_empty(),
        "no process of the tree survives"
    );
}

#[test]
fn odd_file_names_all_run() {
    use std::os::unix::ffi::OsStrExt;
    let t = Tree::new();
    t.fixture("ok_jax.py", "my models/jax/pomdp solver.py");
    t.fixture("ok_jax.py", "модели/jax/модель.py");
    let bad_dir = t.dir.path().join("x/jax");
    std::fs::create_dir_all(&bad_dir).unwrap();
    std::fs::copy(
        repo().join("fixtures/ok_jax.py"),
        bad_dir.join(std::ffi::OsStr::from_bytes(b"bad\xffname.py")),
    )
    .unwrap();
    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for id in ["pomdp_solver", "модель", "bad_name"] {
        assert_eq!(t.result(id)["success"], true, "{id}");
    }
    assert_eq!(t.metrics()["totals"]["succeeded"], 3);
}

#[test]
fn two_scripts_with_the_same_stem_get_distinct_results() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "alpha/jax/model.py");
    t.fixture("fail_exception.py", "beta/jax/model.py");
    let out = t.run(&[]);
    assert_eq!(code(&out), 1);
    assert_eq!(t.result("alpha_jax_model")["success"], true);
    assert_eq!(t.result("beta_jax_model")["success"], false);
    assert!(t.result("alpha_jax_model")["script_path"]
        .as_str()
        .unwrap()
        .ends_with("alpha/jax/model.py"));
}

#[test]
fn an_empty_tree_exits_3_and_says_why() {
    let t = Tree::new();
    t.write("notes/readme.md", "nothing to run\n");
    let out = t.run(&[]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        !t.root().join("execution_results").exists(),
        "a results folder the run made for nothing is removed again"
    );
    // A results folder from an earlier run whose scripts are gone since: it stays,
    // and its metrics say what this run found.
    t.fixture("ok_plain.py", "m/jax/gone.py");
    assert_eq!(code(&t.run(&[])), 0);
    std::fs::remove_dir_all(t.root().join("m")).unwrap();
    let out = t.run(&[]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no JAX scripts found"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        t.metrics()["totals"]["total_scripts"],
        0,
        "stale metrics are replaced"
    );
}

#[test]
fn a_missing_output_folder_exits_2_naming_it() {
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["--output-dir", "/definitely/not/here"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("/definitely/not/here"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_options_exit_2() {
    let t = Tree::new();
    for args in [
        &["--timeout", "soon"][..],
        &["--device", "quantum"],
        &["--jobs", "0"],
    ] {
        let out = t.run(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn manifest_scripts_run_and_missing_ones_fail_the_run() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "11_render_output/model/jax/model_jax.py");
    t.write(
        "11_render_output/render_processing_summary.json",
        r#"{"file_results": [
            {"framework_results": {"jax": {"success": true, "output_file": "model/jax/model_jax.py"}}},
            {"framework_results": {"jax": {"success": true, "output_file": "gone/jax/gone_jax.py"}}}
        ]}"#,
    );
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(t.result("model_jax")["discovered_by"], "manifest");
    let m = t.metrics();
    assert_eq!(m["totals"]["succeeded"], 1);
    assert_eq!(m["totals"]["missing"], 1);
    assert_eq!(m["missing_scripts"][0], "gone/jax/gone_jax.py");
}

#[test]
fn results_dir_option_and_parallel_jobs() {
    let t = Tree::new();
    for i in 0..4 {
        t.fixture("slow_ok.py", &format!("m{i}/jax/slow.py"));
    }
    let results = t.root().join("elsewhere");
    let out = t
        .cmd()
        .args(["--env", "SLOW_SECONDS=2", "--jobs", "4", "--results-dir"])
        .arg(&results)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = read_json(&results.join("performance_metrics.json"));
    assert_eq!(m["run"]["jobs"], 4);
    assert_eq!(m["totals"]["succeeded"], 4);
    // In parallel: every script started before any finished (no timing threshold,
    // which a loaded machine would break).
    let (mut last_start, mut first_end) = (String::new(), String::from("~"));
    for i in 0..4 {
        let r = read_json(&results.join(format!("m{i}_jax_slow_results.json")));
        last_start = last_start.max(r["started_at"].as_str().unwrap().to_string());
        first_end = first_end.min(r["finished_at"].as_str().unwrap().to_string());
    }
    assert!(
        last_start < first_end,
        "not parallel: last start {last_start}, first end {first_end}"
    );
}

#[test]
fn ctrl_c_stops_the_run_writes_results_and_exits_130() {
    let t = Tree::new();
    let hang = t.fixture("hang.py", "a/jax/hang.py");
    // The scheduler runs bigger files first when there is no history: make the hung
    // script the bigger one, so `later` is still waiting when Ctrl-C comes.
    let body = std::fs::read_to_string(&hang).unwrap() + &format!("# {}\n", "pad ".repeat(500));
    std::fs::write(&hang, body).unwrap();
    t.fixture("ok_jax.py", "b/jax/later.py");
    let mut child = t.spawn(&["--jobs", "1", "--grace", "2s"]);
    // Wait until the hung script is running (its log file exists and has output).
    wait_for_output(&t.results_dir().join("logs/hang.stdout.log"));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let hang = t.result("hang");
    assert_eq!(hang["status"], "interrupted");
    assert_eq!(hang["signal_name"], "SIGTERM");
    let later = t.result("later");
    assert_eq!(later["status"], "interrupted");
    assert_eq!(
        later["attempts"].as_array().unwrap().len(),
        0,
        "never started"
    );
    let m = t.metrics();
    assert_eq!(m["run"]["interrupted"], true);
    assert_eq!(m["totals"]["interrupted"], 2);
    assert!(processes_under(&t.root()).is_empty());
}

#[test]
fn attempts_record_the_worker_slot_that_ran_them() {
    let t = Tree::new();
    for i in 0..3 {
        t.fixture("slow_ok.py", &format!("m{i}/jax/slow.py"));
    }
    let out = t.run(&["--jobs", "3", "--env", "SLOW_SECONDS=1.5"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut slots: Vec<u64> = (0..3)
        .map(|i| {
            t.result(&format!("m{i}_jax_slow"))["attempts"][0]["slot"]
                .as_u64()
                .unwrap()
        })
        .collect();
    slots.sort_unstable();
    assert_eq!(
        slots,
        vec![0, 1, 2],
        "three scripts at once use three slots"
    );
}
