//! The real NVML, through nvml-wrapper: loaded once, then asked per reading.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Device;

use super::{GpuInfo, GpuProcess, Nvml, NvmlReport};

const MIB: f64 = 1024.0 * 1024.0;

/// The driver's library, or why it could not be loaded.
#[derive(Debug)]
pub struct RealNvml(Result<nvml_wrapper::Nvml, String>);

impl RealNvml {
    /// Loads and initialises `libnvidia-ml.so.1`.
    pub fn load() -> RealNvml {
        RealNvml(nvml_wrapper::Nvml::init().map_err(|e| {
            let text = e.to_string();
            if text.contains("cannot open shared object file") {
                "libnvidia-ml.so.1, the NVIDIA driver's management library, is not installed".into()
            } else {
                format!("NVML could not be initialised: {text}")
            }
        }))
    }
}

impl Nvml for RealNvml {
    fn report(&self) -> NvmlReport {
        let nvml = match &self.0 {
            Ok(n) => n,
            Err(e) => {
                return NvmlReport {
                    error: Some(e.clone()),
                    ..Default::default()
                }
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
            .filter_map(|i| nvml.device_by_index(i).ok().map(|d| reading(i, &d, true)))
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

    fn device(&self, index: u32) -> Result<GpuInfo, String> {
        let nvml = self.0.as_ref().map_err(Clone::clone)?;
        let d = nvml
            .device_by_index(index)
            .map_err(|e| format!("failed to read GPU {index}: {e}"))?;
        Ok(reading(index, &d, false))
    }
}

/// One GPU's figures; `full` adds what does not change while a script runs (name,
/// UUID, compute capability), which sampling skips.
fn reading(index: u32, d: &Device<'_>, full: bool) -> GpuInfo {
    let mem = d.memory_info().ok();
    let util = d.utilization_rates().ok();
    GpuInfo {
        index,
        name: if full {
            d.name().unwrap_or_else(|_| "unknown".into())
        } else {
            String::new()
        },
        uuid: full.then(|| d.uuid().ok()).flatten(),
        memory_total_mb: mem.as_ref().map_or(0.0, |m| m.total as f64 / MIB),
        memory_used_mb: mem.as_ref().map_or(0.0, |m| m.used as f64 / MIB),
        memory_free_mb: mem.as_ref().map_or(0.0, |m| m.free as f64 / MIB),
        utilization_gpu_pct: util.as_ref().map(|u| u.gpu),
        utilization_memory_pct: util.as_ref().map(|u| u.memory),
        compute_capability: full
            .then(|| d.cuda_compute_capability().ok())
            .flatten()
            .map(|c| format!("{}.{}", c.major, c.minor)),
        processes: d
            .running_compute_processes()
            .unwrap_or_default()
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_mb: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b as f64 / MIB),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect(),
    }
}
