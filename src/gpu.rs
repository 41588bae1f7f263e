//! What the host's NVIDIA driver reports, through NVML loaded at run time, so the
//! binary also works on machines without NVIDIA drivers.

// The report's types are the output contract's (`model::doctor`); this keeps the
// `gpu::…` paths other code uses.
pub use crate::model::doctor::{GpuInfo, GpuProcess, NvmlReport};

// Reading a report is behaviour, so it stays beside the code that fills one.
impl NvmlReport {
    /// GPUs the run may use.
    pub fn gpu_count(&self) -> usize {
        self.count_override.unwrap_or(self.gpus.len())
    }

    /// The CUDA major version the driver supports.
    pub fn cuda_major(&self) -> Option<u32> {
        self.cuda_driver_version
            .as_deref()?
            .split('.')
            .next()?
            .parse()
            .ok()
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Asks NVML about the driver and every GPU. `JAX_RUNNER_NO_NVML=1` makes NVML count
/// as absent; `JAX_RUNNER_GPU_COUNT=N` overrides the count (containers whose GPUs NVML
/// cannot see, and tests of the GPU paths on machines without one).
pub fn inspect() -> NvmlReport {
    let count_override = std::env::var("JAX_RUNNER_GPU_COUNT")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut report = if std::env::var_os("JAX_RUNNER_NO_NVML").is_some_and(|v| v == "1") {
        NvmlReport {
            error: Some("disabled by JAX_RUNNER_NO_NVML=1".into()),
            ..Default::default()
        }
    } else {
        query()
    };
    report.count_override = count_override;
    report
}

fn query() -> NvmlReport {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            let text = e.to_string();
            let error = if text.contains("cannot open shared object file") {
                "libnvidia-ml.so.1, the NVIDIA driver's management library, is not installed".into()
            } else {
                format!("NVML could not be initialised: {text}")
            };
            return NvmlReport {
                error: Some(error),
                ..Default::default()
            };
        }
    };
    let cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let count = nvml.device_count().unwrap_or(0);
    let gpus = (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d)))
        .map(|(index, d)| {
            let mem = d.memory_info().ok();
            let util = d.utilization_rates().ok();
            GpuInfo {
                index,
                name: d.name().unwrap_or_else(|_| "unknown".into()),
                uuid: d.uuid().ok(),
                memory_total_mb: mem.as_ref().map_or(0.0, |m| m.total as f64 / MIB),
                memory_used_mb: mem.as_ref().map_or(0.0, |m| m.used as f64 / MIB),
                memory_free_mb: mem.as_ref().map_or(0.0, |m| m.free as f64 / MIB),
                utilization_gpu_pct: util.as_ref().map(|u| u.gpu),
                utilization_memory_pct: util.as_ref().map(|u| u.memory),
                compute_capability: d
                    .cuda_compute_capability()
                    .ok()
                    .map(|c| format!("{}.{}", c.major, c.minor)),
                processes: d
                    .running_compute_processes()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        used_memory_mb: match p.used_gpu_memory {
                            nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => {
                                Some(b as f64 / MIB)
                            }
                            nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect(),
            }
        })
        .collect();
    NvmlReport {
        available: true,
        error: None,
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: cuda,
        gpus,
        count_override: None,
    }
}

/// The NVIDIA GPUs NVML sees (or the override), or `None` when NVML is absent and no
/// override is set.
pub fn nvidia_gpu_count() -> Option<usize> {
    let report = inspect();
    (report.available || report.count_override.is_some()).then(|| report.gpu_count())
}
