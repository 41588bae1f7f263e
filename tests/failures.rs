//! Bad scripts through the built binary: failure classes, retries, fallback, truthful
//! device, leaks, bounded output and the results-folder lock.

mod common;

use common::*;
use serde_json::Value;

fn attempts(r: &Value) -> &Vec<Value> {
    r["attempts"].as_array().unwrap()
}

#[test]
fn each_kind_of_failure_gets_its_class() {
    let t = Tree::new();
    for f in [
        "syntax_error.py",
        "missing_module.py",
        "fail_exception.py",
        "signal_death.py",
        "memory_error.py",
    ] {
        t.fixture(f, &format!("m/jax/{f}"));
    }
    let out = t.run(&["--retry-delay", "0s"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = t.result("syntax_error");
    assert_eq!(r["class"], "script_error");
    assert_eq!(r["exception"]["type"], "SyntaxError");
    let r = t.result("missing_module");
    assert_eq!(r["exception"]["type"], "ModuleNotFoundError");
    assert!(r["matched_line"]
        .as_str()
        .unwrap()
        .contains("definitely_not_a_real_module_xyz"));
    let r = t.result("fail_exception");
    assert_eq!(r["exception"]["type"], "ValueError");
    assert_eq!(r["exception"]["message"], "deliberate failure for tests");
    assert_eq!(r["jax"]["uncaught_exception"], "ValueError");
    let r = t.result("signal_death");
    assert_eq!(r["class"], "killed_by_signal");
    assert_eq!(r["signal_name"], "SIGSEGV");
    assert_eq!(
        attempts(&r).len(),
        2,
        "killed_by_signal is retried once by default"
    );
    let r = t.result("memory_error");
    assert_eq!(r["class"], "out_of_memory");
    let by_class = &t.metrics()["totals"]["by_class"];
    assert_eq!(by_class["script_error"], 3);
    assert_eq!(by_class["killed_by_signal"], 1);
    assert_eq!(by_class["out_of_memory"], 1);
}

#[test]
fn flaky_scripts_succeed_when_their_class_is_retried() {
    let t = Tree::new();
    t.fixture("flaky.py", "m/jax/flaky.py");
    let out = t.run(&["--retry-delay", "0s"]);
    assert_eq!(code(&out), 1, "script errors are not retried by default");
    assert_eq!(attempts(&t.result("flaky")).len(), 1);

    let out = t.run(&[
        "--retry-on",
        "script_error",
        "--retries",
        "2",
        "--retry-delay",
        "0s",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("flaky");
    let a = attempts(&r);
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["class"], "script_error");
    assert_eq!(a[1]["class"], "succeeded");
    assert_ne!(
        a[0]["stderr_log"], a[1]["stderr_log"],
        "each attempt keeps its own log"
    );
    assert_eq!(r["stderr_log"], a[1]["stderr_log"]);
    assert_eq!(t.metrics()["totals"]["retried"], 1);
}

#[test]
fn timeouts_retry_only_when_asked() {
    let t = Tree::new();
    t.fixture("hang.py", "m/jax/hang.py");
    let out = t.run(&[
        "--timeout",
        "1s",
        "--grace",
        "1s",
        "--retry-on",
        "timed_out",
        "--retry-delay",
        "0s",
    ]);
    assert_eq!(code(&out), 1);
    let r = t.result("hang");
    assert_eq!(attempts(&r).len(), 2);
    assert!(attempts(&r).iter().all(|a| a["class"] == "timed_out"));
}

#[test]
fn a_broken_gpu_environment_falls_back_to_cpu_once_and_says_so() {
    let t = Tree::new();
    // jax with JAX_PLATFORMS=cuda on this CPU-only install fails for real. Without
    // the pre-flight (which would send everything to the CPU at once), the failure
    // shows up in the first script's GPU attempt. The scheduler runs the bigger file
    // first (no history yet): pad the real-jax script so it is the one.
    let first_path = t.fixture("ok_jax.py", "a/jax/first.py");
    let mut body = std::fs::read_to_string(&first_path).unwrap();
    body.push_str(&format!("\n# {}\n", "padding ".repeat(300)));
    std::fs::write(&first_path, body).unwrap();
    t.fixture("gpu_env_error.py", "b/jax/second.py");
    let out = t
        .cmd()
        .env("JAX_RUNNER_GPU_COUNT", "1")
        .args(["--device", "gpu", "--jobs", "1", "--no-preflight"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let first = t.result("first");
    let a = attempts(&first);
    assert_eq!(a.len(), 2, "{first}");
    assert_eq!(a[0]["device"], "gpu");
    assert_eq!(a[0]["class"], "gpu_environment");
    assert_eq!(a[1]["device"], "cpu");
    assert_eq!(first["device_requested"], "gpu");
    assert_eq!(first["device_used"], "cpu");
    assert_eq!(first["fallback"]["from"], "gpu");
    assert_eq!(first["fallback"]["to"], "cpu");
    let second = t.result("second");
    assert_eq!(attempts(&second).len(), 1, "later scripts start on the CPU");
    assert!(second["fallback"]["reason"]
        .as_str()
        .unwrap()
        .contains("earlier in this run"));
    assert_eq!(t.metrics()["totals"]["fallbacks"], 2);
    let err = stderr(&out);
    assert_eq!(err.matches("GPU unusable").count(), 1, "said once: {err}");
}

#[test]
fn the_preflight_sends_a_gpu_run_to_the_cpu_before_any_script_fails() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "a/jax/first.py");
    t.fixture("ok_jax.py", "b/jax/second.py");
    // NVML "sees" a GPU, but this jax has no CUDA plugin: doctor knows before any run.
    let out = t
        .cmd()
        .env("JAX_RUNNER_GPU_COUNT", "1")
        .args(["--device", "gpu"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for id in ["first", "second"] {
        let r = t.result(id);
        assert_eq!(attempts(&r).len(), 1, "{id} never tried the GPU");
        assert_eq!(attempts(&r)[0]["device"], "cpu");
        assert!(
            r["fallback"]["reason"]
                .as_str()
                .unwrap()
                .contains("no CUDA plugin"),
            "{r}"
        );
    }
    let m = t.metrics();
    let codes: Vec<&str> = m["environment"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"cpu-only-jaxlib"), "{codes:?}");
    assert_eq!(m["environment"]["python"]["jax_version"], "0.10.2");

    let out = t
        .cmd()
        .env("JAX_RUNNER_GPU_COUNT", "1")
        .args(["--device", "auto"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["run"]["device"], "cpu");
    assert!(m["run"]["device_choice"]
        .as_str()
        .unwrap()
        .starts_with("auto: the CPU, because"));
    assert_eq!(
        t.result("first")["fallback"],
        Value::Null,
        "auto chose the CPU: no fallback"
    );
}

#[test]
fn fallback_none_fails_with_the_gpu_class() {
    let t = Tree::new();
    t.fixture("gpu_env_error.py", "m/jax/gpu.py");
    let out = t
        .cmd()
        .env("JAX_RUNNER_GPU_COUNT", "1")
        .args(["--device", "gpu", "--fallback", "none"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    let r = t.result("gpu");
    assert_eq!(r["class"], "gpu_environment");
    assert!(r["matched_line"]
        .as_str()
        .unwrap()
        .contains("Unable to initialize backend 'cuda'"));
    assert_eq!(r["fallback"], Value::Null);
}

#[test]
fn gpu_requested_without_any_gpu_runs_on_cpu_from_the_start() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    let out = t
        .cmd()
        .env("JAX_RUNNER_NO_NVML", "1")
        .env_remove("JAX_RUNNER_GPU_COUNT")
        .args(["--device", "gpu"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.contains("script(s) on gpu"),
        "no 'running on gpu' before the fallback: {err}"
    );
    let r = t.result("ok_jax");
    assert_eq!(attempts(&r).len(), 1);
    assert_eq!(attempts(&r)[0]["device"], "cpu");
    assert!(r["fallback"]["reason"].as_str().unwrap().contains("NVML"));
    let m = t.metrics();
    assert_eq!(m["run"]["device"], "cpu");
    assert!(m["run"]["device_fallback_reason"]
        .as_str()
        .unwrap()
        .contains("NVML"));
}

#[test]
fn device_used_comes_from_jax_itself() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    t.fixture("switches_to_cpu.py", "m/jax/switches_to_cpu.py");
    // The environment says cuda; the switching script overrides it itself.
    let out = t
        .cmd()
        .env("JAX_RUNNER_GPU_COUNT", "1")
        .args(["--device", "gpu", "--fallback", "none", "--jobs", "1"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "ok_jax fails on the missing cuda backend");
    let sw = t.result("switches_to_cpu");
    assert_eq!(sw["success"], true);
    assert_eq!(sw["device_used"], "cpu");
    assert_eq!(sw["device_mismatch"], true);
    assert_eq!(sw["jax"]["backend"], "cpu");
    assert!(sw["jax"]["compilations"].as_u64().unwrap() >= 1);
    let plain = t.result("ok_plain");
    assert_eq!(plain["device_used"], Value::Null, "never touched jax");
    assert_eq!(plain["jax"]["jax_imported"], false);
    assert_eq!(plain["device_mismatch"], false);
    assert_eq!(t.metrics()["totals"]["device_mismatches"], 1);

    let out = t.run(&[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let ok = t.result("ok_jax");
    assert_eq!(ok["device_used"], "cpu");
    assert_eq!(ok["jax"]["devices"][0], "cpu:0");
    assert_eq!(ok["device_mismatch"], false);
}

#[test]
fn persistent_cache_hits_are_counted() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    let cache = t.root().join("cache");
    for _ in 0..2 {
        let out = t
            .cmd()
            .arg("--compilation-cache")
            .arg(&cache)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let jax = &t.result("ok_jax")["jax"];
    assert!(jax["cache_hits"].as_u64().unwrap() >= 1, "{jax}");
    assert_eq!(
        jax["cache_hits"], jax["compilations"],
        "every compilation came from the cache"
    );
}

#[test]
fn an_existing_sitecustomize_still_runs() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    let site = t.root().join("site");
    std::fs::create_dir_all(&site).unwrap();
    // Only the script's process has GNN_OUTPUT_DIR, so the marker proves the chained
    // sitecustomize ran there (the interpreter probe runs it too, elsewhere).
    std::fs::write(
        site.join("sitecustomize.py"),
        "import os\nd = os.environ.get('GNN_OUTPUT_DIR')\nif d:\n    open(os.path.join(d, 'chained.txt'), 'w').write('yes')\n",
    )
    .unwrap();
    let out = t.cmd().env("PYTHONPATH", &site).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let data = std::path::PathBuf::from(t.result("ok_jax")["data_dir"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(data.join("chained.txt")).unwrap(),
        "yes"
    );
    assert_eq!(t.result("ok_jax")["jax"]["backend"], "cpu");
}

/// Python runs a `sitecustomize` from its path at start-up, before it adds the
/// script's folder: one lying beside the script is just a module there. Warm starts
/// hold to that as cold ones do.
#[test]
fn a_sitecustomize_beside_the_script_is_not_run_warm_or_cold() {
    for warm in ["on", "off"] {
        let t = Tree::new();
        t.write(
            "m/jax/sitecustomize.py",
            "import os\nopen(os.path.join(os.environ['GNN_OUTPUT_DIR'], 'ran.txt'), 'w')\n",
        );
        t.write("m/jax/s.py", "print('ok')\n");
        let out = t.run(&["--warm-start", warm, "-k", "s.py"]);
        assert_eq!(code(&out), 0, "{warm}: {}", stderr(&out));
        let r = t.result("s");
        assert_eq!(r["status"], "succeeded", "{warm}: {r}");
        let data = std::path::PathBuf::from(r["data_dir"].as_str().unwrap());
        assert!(!data.join("ran.txt").exists(), "{warm}: {r}");
    }
}

#[test]
fn a_detached_grandchild_is_killed_and_reported() {
    let t = Tree::new();
    t.fixture("grandchild.py", "m/jax/grandchild.py");
    // Unsandboxed: the grandchild escapes into its own session and must be hunted
    // down. (In the sandbox it dies with the PID namespace: see tests/sandbox.rs.)
    let out = t.run(&["--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("grandchild");
    let data = std::path::PathBuf::from(r["data_dir"].as_str().unwrap());
    let pid: u32 = std::fs::read_to_string(data.join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let leaks = r["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 1, "{r}");
    assert_eq!(leaks[0]["pid"], pid);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "grandchild is gone"
    );
    assert_eq!(t.metrics()["totals"]["leaks"], 1);
}

#[test]
fn output_floods_stream_to_disk_and_the_cap_keeps_head_and_tail() {
    let t = Tree::new();
    t.fixture("output_flood.py", "m/jax/flood.py");
    let out = t.run(&["--env", "FLOOD_MB=300"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("flood");
    assert!(r["stdout_bytes"].as_u64().unwrap() >= 300 << 20);
    let runner_mb = t.metrics()["run"]["runner_peak_rss_mb"].as_f64().unwrap();
    assert!(
        runner_mb > 1.0 && runner_mb < 100.0,
        "runner peak {runner_mb} MiB for 300 MiB of output"
    );

    let out = t
        .cmd()
        .env("FLOOD_MB", "50")
        .args(["--max-log-size", "1M"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("flood");
    assert_eq!(r["log_truncated"], true);
    let log = std::fs::read(r["stdout_log"].as_str().unwrap()).unwrap();
    assert!(log.len() < (1 << 20) + 200, "{}", log.len());
    assert!(String::from_utf8_lossy(&log[log.len() - 200..]).contains("flood done"));
}

#[test]
fn a_second_runner_on_the_same_results_folder_is_refused() {
    let t = Tree::new();
    t.fixture("hang.py", "m/jax/hang.py");
    let mut first = t.spawn(&["--timeout", "60s"]);
    let log = t.results_dir().join("logs/hang.stdout.log");
    wait_for_output(&log);
    let out = t.run(&[]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("another jax-runner"),
        "{}",
        stderr(&out)
    );
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    assert_eq!(first.wait().unwrap().code(), Some(130));
}

#[test]
fn a_second_ctrl_c_kills_at_once() {
    let t = Tree::new();
    t.fixture("ignore_sigterm.py", "m/jax/stubborn.py");
    let mut child = t.spawn(&["--grace", "60s"]);
    wait_for_output(&t.results_dir().join("logs/stubborn.stdout.log"));
    let started = std::time::Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // The second only once the runner took the first (two at once could be one).
    wait_for_line(
        &t.results_dir().join("execution_log.txt"),
        "interrupted: stopping running scripts",
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(
        started.elapsed().as_secs() < 20,
        "did not wait out the 60 s grace"
    );
    let r = t.result("stubborn");
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["signal_name"], "SIGKILL");
}

/// A telemetry file that claims a GPU no process of the script ever opened is not
/// believed: `device_used` stays empty and the result says why.
#[test]
fn a_forged_gpu_claim_is_not_believed() {
    let t = Tree::new();
    t.fixture("forges_gpu.py", "m/jax/forges_gpu.py");
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    for sandbox in ["on", "off"] {
        let out = t.run(&["--sandbox", sandbox]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let r = t.result("forges_gpu");
        assert_eq!(r["jax"]["backend"], "gpu", "the forged file was read: {r}");
        assert_eq!(r["device_used"], Value::Null, "{sandbox}: {r}");
        assert!(
            r["device_check"]
                .as_str()
                .unwrap()
                .contains("no process of the script"),
            "{r}"
        );
        // An honest CPU run is untouched.
        let honest = t.result("ok_jax");
        assert_eq!(honest["device_used"], "cpu");
        assert!(honest.get("device_check").is_none(), "{honest}");
    }
}
