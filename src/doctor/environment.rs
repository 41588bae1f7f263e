//! Findings from the environment: variables that hurt jax, hidden GPUs, and cuDNN or
//! cuBLAS libraries on `LD_LIBRARY_PATH` that shadow the CUDA wheels.

use std::collections::BTreeMap;

use super::finding::{major_minor, ALL, GPU};
use crate::model::doctor::{Finding, NvmlReport, PythonReport, Severity};
use crate::model::{Device, Platform};

pub(super) fn environment_findings(
    env: &BTreeMap<String, String>,
    nvml: &NvmlReport,
    device: Device,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(v) = env.get("JAX_PLATFORM_NAME") {
        out.push(Finding::new(
            "jax-platform-name",
            Severity::Warning,
            ALL,
            format!("JAX_PLATFORM_NAME={v} is deprecated, and `gpu` there also means ROCm; jax-runner removes it from scripts, other runs still see it"),
            Some("unset JAX_PLATFORM_NAME   # choose the device with --device or JAX_PLATFORMS".into()),
        ));
    }
    if let Some(v) = env.get("JAX_PLATFORMS") {
        let known = ["cpu", "cuda", "gpu", "rocm", "tpu", "metal", ""];
        let unknown: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|p| !known.contains(p))
            .collect();
        if !unknown.is_empty() {
            out.push(Finding::new(
                "jax-platforms-unknown",
                Severity::Warning,
                ALL,
                format!("JAX_PLATFORMS={v} names unknown platforms ({}); jax fails to start outside jax-runner, which sets its own", unknown.join(", ")),
                Some("unset JAX_PLATFORMS".into()),
            ));
        } else if v.contains(',') {
            out.push(Finding::new(
                "jax-platforms-fallback",
                Severity::Warning,
                GPU,
                format!("JAX_PLATFORMS={v} lets jax fall back to a later platform without a word; jax-runner sets one platform per run"),
                Some("unset JAX_PLATFORMS".into()),
            ));
        }
    }
    out.extend(xla_findings(env, nvml, device));
    out.extend(memory_findings(env));
    if let (Some(v), true) = (env.get("CUDA_VISIBLE_DEVICES"), nvml.gpu_count() > 0) {
        if hides_every_gpu(v, nvml) {
            out.push(Finding::new(
                "cuda-visible-devices-hides-all",
                Severity::Error,
                GPU,
                format!(
                    "CUDA_VISIBLE_DEVICES={v:?} hides every one of the {} GPU(s)",
                    nvml.gpu_count()
                ),
                Some("unset CUDA_VISIBLE_DEVICES   # or: export CUDA_VISIBLE_DEVICES=0".into()),
            ));
        }
    }
    out
}

/// `XLA_FLAGS` that XLA does not know, or that only apply to GPUs.
fn xla_findings(env: &BTreeMap<String, String>, nvml: &NvmlReport, device: Device) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(flags) = env.get("XLA_FLAGS") {
        let tokens: Vec<&str> = flags.split_whitespace().collect();
        let unknown: Vec<&str> = tokens
            .iter()
            .copied()
            .filter(|t| !t.starts_with("--xla_"))
            .collect();
        let gpu_only: Vec<&str> = tokens
            .iter()
            .copied()
            .filter(|t| t.starts_with("--xla_gpu_"))
            .collect();
        let keep = |drop: &[&str]| {
            tokens
                .iter()
                .filter(|t| !drop.contains(t))
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !unknown.is_empty() {
            out.push(Finding::new(
                "xla-flags-unknown",
                Severity::Warning,
                ALL,
                format!(
                    "XLA_FLAGS holds entries XLA does not know ({}); XLA aborts on unknown flags",
                    unknown.join(" ")
                ),
                Some(format!("export XLA_FLAGS='{}'", keep(&unknown))),
            ));
        }
        if !gpu_only.is_empty() && (device == Device::Cpu || nvml.gpu_count() == 0) {
            out.push(Finding::new(
                "xla-flags-gpu-on-cpu",
                Severity::Warning,
                &[Platform::Cpu],
                format!(
                    "XLA_FLAGS sets GPU-only flags ({}) that do nothing on a CPU run",
                    gpu_only.join(" ")
                ),
                Some(format!("export XLA_FLAGS='{}'", keep(&gpu_only))),
            ));
        }
    }
    out
}

/// The XLA client's GPU memory settings.
fn memory_findings(env: &BTreeMap<String, String>) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(v) = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION") {
        if !v.parse::<f64>().is_ok_and(|f| f > 0.0 && f <= 1.0) {
            out.push(Finding::new(
                "xla-mem-fraction",
                Severity::Error,
                GPU,
                format!("XLA_PYTHON_CLIENT_MEM_FRACTION={v} is not a fraction in (0, 1]"),
                Some("unset XLA_PYTHON_CLIENT_MEM_FRACTION".into()),
            ));
        }
    }
    if env
        .get("XLA_PYTHON_CLIENT_PREALLOCATE")
        .is_some_and(|v| v == "true" || v == "1")
    {
        out.push(Finding::new(
            "xla-preallocate",
            Severity::Warning,
            GPU,
            "XLA_PYTHON_CLIENT_PREALLOCATE=true makes every process take 75% of GPU memory; jax-runner sets false for its scripts".into(),
            Some("unset XLA_PYTHON_CLIENT_PREALLOCATE".into()),
        ));
    }
    if env
        .get("XLA_PYTHON_CLIENT_ALLOCATOR")
        .is_some_and(|v| v == "platform")
    {
        out.push(Finding::new(
            "xla-allocator-platform",
            Severity::Warning,
            GPU,
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates on demand and is slow".into(),
            Some("unset XLA_PYTHON_CLIENT_ALLOCATOR".into()),
        ));
    }
    out
}

/// CUDA stops at the first entry that names no device, so only a valid prefix counts.
pub(super) fn hides_every_gpu(value: &str, nvml: &NvmlReport) -> bool {
    let first = value.split(',').next().unwrap_or("").trim();
    if first.is_empty() {
        return true;
    }
    if let Ok(i) = first.parse::<i64>() {
        return i < 0 || i as usize >= nvml.gpu_count();
    }
    if first.starts_with("GPU-") || first.starts_with("MIG-") {
        let uuids: Vec<&str> = nvml.gpus.iter().filter_map(|g| g.uuid.as_deref()).collect();
        return !uuids.is_empty()
            && !uuids
                .iter()
                .any(|u| u.starts_with(first) || first.starts_with(u));
    }
    true
}

pub(super) fn library_findings(py: &PythonReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(wheel) = &py.cudnn_wheel_version else {
        return out;
    };
    if let Some(dir) = py.ld_library_path.iter().find(|d| !d.cudnn.is_empty()) {
        let found = &dir.cudnn[0];
        if major_minor(found) != major_minor(wheel) {
            let others: Vec<&str> = py
                .ld_library_path
                .iter()
                .filter(|d| d.cudnn.is_empty())
                .map(|d| d.path.as_str())
                .collect();
            out.push(Finding::new(
                "cudnn-mismatch",
                Severity::Error,
                GPU,
                format!(
                    "LD_LIBRARY_PATH puts cuDNN {found} from {} ahead of the {wheel} the CUDA wheels bring: jax fails with `Loaded runtime CuDNN library: {found} but source was compiled with: {wheel}`",
                    dir.path
                ),
                Some(format!("export LD_LIBRARY_PATH='{}'", others.join(":"))),
            ));
        }
    }
    out
}
