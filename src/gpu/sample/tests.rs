//! The sampler against the fake NVML: processes matched by PID, the device fallback
//! when none match, several GPUs, and NVML errors.

use std::process::Command;

use super::*;
use crate::gpu::FakeNvml;

/// A fake NVML over `json`, written to a temporary file the test can rewrite.
fn fake(json: serde_json::Value) -> (tempfile::TempDir, std::path::PathBuf, Arc<dyn Nvml>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvml.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let nvml: Arc<dyn Nvml> = Arc::new(FakeNvml::new(path.clone()));
    (dir, path, nvml)
}

fn gpu(used: f64, util: u32, processes: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"memory_total_mb": 80000.0, "memory_used_mb": used,
        "utilization_gpu_pct": util, "processes": processes})
}

#[test]
fn the_scripts_own_processes_are_matched_by_pid() {
    let mut child = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = child.id();
    let (_dir, path, nvml) =
        fake(serde_json::json!({"gpus": [gpu(1000.0, 10, serde_json::json!([]))]}));
    let mut s = GpuSampler::start(GpuWatch {
        nvml,
        indices: vec![],
    });
    // Someone else's process and the script's own, at two samples.
    let write = |mine: f64, util: u32| {
        let procs = serde_json::json!([{"pid": 1, "used_memory_mb": 9000.0},
            {"pid": pid, "used_memory_mb": mine}]);
        std::fs::write(
            &path,
            serde_json::json!({"gpus": [gpu(12000.0, util, procs)]}).to_string(),
        )
        .unwrap();
    };
    write(512.0, 40);
    assert_eq!(s.sample(&[pid]).unwrap().memory_mb, 512.0);
    write(300.0, 80);
    s.sample(&[pid]);
    let u = s.usage().unwrap();
    assert_eq!(u.memory_source, GpuMemorySource::Process);
    assert_eq!(u.peak_memory_mb, 512.0);
    assert_eq!(u.utilization_pct, Some(60.0));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn unmatched_processes_fall_back_to_the_devices_growth() {
    let (_dir, path, nvml) = fake(serde_json::json!({"gpus": [
        gpu(1000.0, 0, serde_json::json!([])), gpu(500.0, 0, serde_json::json!([]))]}));
    // Only GPU 1 is the script's: GPU 0's growth is someone else's.
    let mut s = GpuSampler::start(GpuWatch {
        nvml,
        indices: vec![1],
    });
    let foreign = serde_json::json!([{"pid": 999_999_999u32, "used_memory_mb": 700.0}]);
    std::fs::write(
        &path,
        serde_json::json!({"gpus": [
        gpu(30000.0, 90, serde_json::json!([])), gpu(1200.0, 20, foreign)]})
        .to_string(),
    )
    .unwrap();
    let r = s.sample(&[std::process::id()]).unwrap();
    assert_eq!(r.memory_mb, 700.0, "1200 now - 500 before");
    let u = s.usage().unwrap();
    assert_eq!(u.memory_source, GpuMemorySource::Device);
    assert_eq!(u.peak_memory_mb, 700.0);
    assert_eq!(u.utilization_pct, Some(20.0), "GPU 1's, not GPU 0's");
}

#[test]
fn nvml_errors_leave_no_figures_and_say_why() {
    let (_dir, path, nvml) = fake(
        serde_json::json!({"gpus": [gpu(0.0, 0, serde_json::json!([]))],
        "sample_error": "NVML_ERROR_GPU_IS_LOST"}),
    );
    let mut s = GpuSampler::start(GpuWatch {
        nvml: nvml.clone(),
        indices: vec![],
    });
    assert_eq!(s.sample(&[1]), None);
    assert_eq!(s.usage(), None);
    assert_eq!(s.error.as_deref(), Some("NVML_ERROR_GPU_IS_LOST"));
    // One GPU failing: the other still counts.
    std::fs::write(
        &path,
        serde_json::json!({"gpus": [
        {"error": "NVML_ERROR_UNKNOWN"}, gpu(64.0, 5, serde_json::json!([]))]})
        .to_string(),
    )
    .unwrap();
    let mut s = GpuSampler::start(GpuWatch {
        nvml: nvml.clone(),
        indices: vec![0, 1],
    });
    assert_eq!(s.sample(&[1]).unwrap().utilization_pct, Some(5.0));
    assert_eq!(s.error.as_deref(), Some("NVML_ERROR_UNKNOWN"));
    // NVML not there at all.
    std::fs::write(&path, r#"{"error": "libnvidia-ml.so.1 is not installed"}"#).unwrap();
    assert!(!nvml.report().available);
    assert_eq!(
        GpuSampler::start(GpuWatch {
            nvml,
            indices: vec![]
        })
        .sample(&[1]),
        None
    );
}
