//! What the host's NVIDIA driver reports, through NVML loaded at run time, so the
//! binary also works on machines without NVIDIA drivers.

/// The NVIDIA GPUs NVML sees, or `None` when NVML cannot be loaded (no driver).
/// `JAX_RUNNER_NO_NVML=1` makes NVML count as absent; `JAX_RUNNER_GPU_COUNT=N`
/// overrides the count (containers whose GPUs NVML cannot see, and tests of the GPU
/// paths on machines without one).
pub fn nvidia_gpu_count() -> Option<usize> {
    if let Some(n) = std::env::var("JAX_RUNNER_GPU_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Some(n);
    }
    if std::env::var_os("JAX_RUNNER_NO_NVML").is_some_and(|v| v == "1") {
        return None;
    }
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    nvml.device_count().ok().map(|n| n as usize)
}
