//! GPU runs on a machine without a GPU: the runner's fake NVML (`JAX_RUNNER_FAKE_NVML`)
//! stands in for the driver, and a fixture script that never starts jax records the
//! environment it was given and adds its own process to the fake GPU it was sent to.
//! What is checked: the environment each script gets (its GPU, its memory fraction,
//! the XLA preset merged into the user's flags), the GPU memory the runner matched by
//! PID, the retry alone after running out of GPU memory, `--device auto` learning
//! from recorded times, and the reports' GPU columns.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// A fake NVML file with `n` idle GPUs of 40000 MiB.
fn fake_gpus(t: &Tree, n: usize) -> PathBuf {
    let gpus: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": "Fake H100", "uuid": format!("GPU-fake-{i}"),
                "memory_total_mb": 40000.0, "memory_used_mb": 1000.0,
                "utilization_gpu_pct": 30 + 10 * i, "processes": []})
        })
        .collect();
    let path = t.root().join("nvml.json");
    std::fs::write(
        &path,
        json!({"driver_version": "550.54.15",
        "cuda_driver_version": "12.4", "gpus": gpus})
        .to_string(),
    )
    .unwrap();
    path
}

fn gpu_run(t: &Tree, nvml: &Path, args: &[&str]) -> std::process::Output {
    t.cmd()
        .env("JAX_RUNNER_FAKE_NVML", nvml)
        .env_remove("JAX_RUNNER_GPU_COUNT")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .args(["--device", "gpu", "--no-preflight", "--sandbox", "off"])
        .args(["--warm-start", "off"])
        .args(args)
        .output()
        .unwrap()
}

/// The environment attempt `attempt` of `id` saw, as the probe wrote it: in the data
/// folder for the script's last attempt, in the run's history for an earlier one
/// (each attempt starts in an empty data folder).
fn env_of(t: &Tree, id: &str, attempt: u32) -> Value {
    let name = format!("env.attempt{attempt}.json");
    let data = t.results_dir().join("data").join(id).join(&name);
    if data.exists() {
        return read_json(&data);
    }
    let run_id = t.metrics()["run"]["run_id"].as_str().unwrap().to_string();
    let kept = t
        .results_dir()
        .join("history")
        .join(run_id)
        .join("attempts")
        .join(id);
    read_json(&kept.join(format!("attempt{attempt}")).join(name))
}

#[test]
fn shared_gpus_pin_each_script_cap_its_memory_and_record_what_it_used() {
    let t = Tree::new();
    let ids = ["a", "b", "c", "d"];
    for id in ids {
        t.fixture("gpu_probe.py", &format!("m/jax/{id}.py"));
    }
    let nvml = fake_gpus(&t, 2);
    let out = t
        .cmd()
        .env("JAX_RUNNER_FAKE_NVML", &nvml)
        .env(
            "XLA_FLAGS",
            "--xla_dump_to=/tmp/dump --xla_gpu_triton_gemm_any=False",
        )
        .env_remove("JAX_ENABLE_PGLE")
        .env_remove("JAX_RUNNER_GPU_COUNT")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .args(["--device", "gpu", "--no-preflight", "--sandbox", "off"])
        .args([
            "--warm-start",
            "off",
            "--gpu-share",
            "2",
            "--xla-preset",
            "perf",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["run"]["jobs"], 4, "two GPUs, two scripts on each");
    assert_eq!(m["run"]["gpu_share"], 2);
    assert_eq!(m["run"]["xla_preset"], "perf");
    let said = stderr(&out);
    assert!(
        said.contains("--xla_gpu_triton_gemm_any=False, which wins"),
        "the user's conflicting flag is kept, and the run says so: {said}"
    );
    let mut per_gpu = [0, 0];
    for id in ids {
        let r = t.result(id);
        let env = env_of(&t, id, 1);
        let index = r["gpu_index"].as_u64().expect("the GPU is recorded") as usize;
        per_gpu[index] += 1;
        assert_eq!(
            env["CUDA_VISIBLE_DEVICES"],
            format!("GPU-fake-{index}"),
            "{id}"
        );
        assert_eq!(env["JAX_PLATFORMS"], "cuda");
        assert_eq!(env["XLA_PYTHON_CLIENT_PREALLOCATE"], "false");
        assert_eq!(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.47");
        assert_eq!(
            env["XLA_FLAGS"],
            "--xla_dump_to=/tmp/dump --xla_gpu_triton_gemm_any=False \
             --xla_gpu_enable_latency_hiding_scheduler=true"
        );
        assert_eq!(env["JAX_ENABLE_PGLE"], "true");
        assert_eq!(r["xla_preset"], "perf");
        // The fixture put its own PID on its GPU with 256 + 64 * index MiB.
        assert_eq!(r["gpu_memory_source"], "process", "{id}: {r}");
        assert_eq!(r["peak_gpu_memory_mb"], 256.0 + 64.0 * index as f64, "{id}");
        assert_eq!(r["attempts"][0]["gpu_mem_fraction"], 0.47);
        let util = r["gpu_utilization_pct"].as_f64().unwrap();
        assert_eq!(util, 30.0 + 10.0 * index as f64, "{id}");
        let line = m["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap();
        assert_eq!(line["peak_gpu_memory_mb"], r["peak_gpu_memory_mb"]);
    }
    assert_eq!(per_gpu, [2, 2]);
    // The reports show the GPU column from the recorded figures.
    let md = std::fs::read_to_string(t.results_dir().join("execution_report.md")).unwrap();
    assert!(md.contains("peak GPU (MiB)"), "{md}");
    assert!(md.contains("| 320 (GPU 1) |"), "{md}");
    let html = std::fs::read_to_string(t.results_dir().join("report.html")).unwrap();
    assert!(
        html.contains("GPU MiB") && html.contains(">256.0<"),
        "GPU column"
    );
    assert!(
        html.contains("GPU memory over"),
        "a GPU sparkline from the samples"
    );
}

#[test]
fn out_of_gpu_memory_on_a_shared_gpu_runs_again_alone() {
    let t = Tree::new();
    t.fixture("gpu_probe.py", "m/jax/oom.py");
    let nvml = fake_gpus(&t, 1);
    let out = gpu_run(&t, &nvml, &["--gpu-share", "3", "--retries", "0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("oom");
    let a = r["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2, "{r}");
    assert_eq!(a[0]["class"], "out_of_memory");
    assert_eq!(a[0]["gpu_mem_fraction"], 0.31);
    assert_eq!(a[1]["device"], "gpu");
    assert!(
        a[1].get("gpu_mem_fraction").is_none(),
        "alone: the whole GPU"
    );
    assert_eq!(
        env_of(&t, "oom", 1)["XLA_PYTHON_CLIENT_MEM_FRACTION"],
        "0.31"
    );
    assert_eq!(
        env_of(&t, "oom", 2)["XLA_PYTHON_CLIENT_MEM_FRACTION"],
        Value::Null
    );
    assert_eq!(r["status"], "succeeded");
    assert!(r.get("fallback").is_none());
    // One GPU: nothing to pin.
    assert_eq!(env_of(&t, "oom", 2)["CUDA_VISIBLE_DEVICES"], Value::Null);
    assert_eq!(r["gpu_index"], 0);
}

#[test]
fn auto_takes_the_cpu_for_a_script_the_history_says_is_faster_there() {
    let t = Tree::new();
    t.fixture("gpu_probe.py", "m/jax/small.py");
    t.fixture("gpu_probe.py", "m/jax/fresh.py");
    let nvml = fake_gpus(&t, 1);
    // A CPU run records each success's time on the CPU.
    let out = t.cmd().env("GPU_PROBE_SECONDS", "0").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let cpu_s = t.result("small")["device_times"]["cpu_s"].as_f64();
    assert!(cpu_s.is_some_and(|s| s > 0.0), "{}", t.result("small"));
    assert!(t.result("small")["device_times"].get("gpu_s").is_none());
    // Say an earlier GPU run of `small` took longer than the CPU; `fresh` has no GPU time.
    let path = t.results_dir().join("performance_metrics.json");
    let mut m = read_json(&path);
    for s in m["scripts"].as_array_mut().unwrap() {
        if s["id"] == "small" {
            s["device_times"] = json!({"cpu_s": 1.2, "gpu_s": 3.4});
        }
    }
    std::fs::write(&path, m.to_string()).unwrap();
    let out = t
        .cmd()
        .env("JAX_RUNNER_FAKE_NVML", &nvml)
        .env("GPU_PROBE_SECONDS", "0")
        .env_remove("JAX_RUNNER_GPU_COUNT")
        .args([
            "--device",
            "auto",
            "--no-preflight",
            "--sandbox",
            "off",
            "--warm-start",
            "off",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let small = t.result("small");
    assert_eq!(small["attempts"][0]["device"], "cpu", "{small}");
    assert_eq!(small["device_reason"], "history: cpu 1.2 s < gpu 3.4 s");
    assert_eq!(
        small["device_times"]["gpu_s"], 3.4,
        "the GPU's time is kept"
    );
    let fresh = t.result("fresh");
    assert_eq!(fresh["attempts"][0]["device"], "gpu", "{fresh}");
    assert_eq!(fresh["device_reason"], "auto: the GPU works");
    assert_eq!(env_of(&t, "fresh", 1)["JAX_PLATFORMS"], "cuda");
    assert!(fresh["device_times"]["gpu_s"].as_f64().is_some());
    assert!(
        fresh["device_times"]["cpu_s"].as_f64().is_some(),
        "the CPU run's stays"
    );
}

/// The user's own `CUDA_VISIBLE_DEVICES` reaches a sandboxed GPU script, though the
/// sandbox passes no other variable of theirs unasked: as given where it names no GPU
/// of the host (a script told to see none sees none), as the GPU's UUID where it
/// names one.
#[test]
fn the_users_cuda_visible_devices_reaches_sandboxed_scripts() {
    let t = Tree::new();
    t.fixture("gpu_probe.py", "m/jax/probe.py");
    let nvml = fake_gpus(&t, 1);
    for (given, seen) in [("999", "999"), ("0", "GPU-fake-0")] {
        let out = t
            .cmd()
            .env("JAX_RUNNER_FAKE_NVML", &nvml)
            .env_remove("JAX_RUNNER_GPU_COUNT")
            .env("CUDA_VISIBLE_DEVICES", given)
            .args(["--device", "gpu", "--no-preflight", "--fallback", "none"])
            .args(["--env", "GPU_PROBE_SECONDS=0"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{given}: {}", stderr(&out));
        let r = t.result("probe");
        assert_eq!(r["sandbox"]["environment"], "allowlist", "{r}");
        assert_eq!(
            env_of(&t, "probe", 1)["CUDA_VISIBLE_DEVICES"],
            seen,
            "{given}"
        );
    }
}

#[test]
fn nvml_errors_during_the_run_leave_the_gpu_figures_out() {
    let t = Tree::new();
    t.fixture("gpu_probe.py", "m/jax/lost.py");
    let nvml = t.root().join("nvml.json");
    std::fs::write(
        &nvml,
        json!({"sample_error": "NVML_ERROR_GPU_IS_LOST",
        "gpus": [{"name": "Fake", "memory_total_mb": 40000.0}]})
        .to_string(),
    )
    .unwrap();
    let out = gpu_run(&t, &nvml, &["--retries", "0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("lost");
    assert_eq!(r["gpu_index"], 0, "the GPU was given");
    assert!(r.get("peak_gpu_memory_mb").is_none(), "{r}");
    assert!(r.get("gpu_memory_source").is_none(), "{r}");
}
