//! What the host's NVIDIA driver reports, through NVML loaded at run time, so the
//! binary also works on machines without NVIDIA drivers. NVML sits behind the small
//! [`Nvml`] interface: the real library, or a fake read from a JSON file
//! (`JAX_RUNNER_FAKE_NVML`, a testing hook) so the GPU decisions can be tested on
//! machines without a GPU.

mod fake;
mod real;
pub mod sample;
pub mod share;
pub mod xla;

use std::sync::{Arc, OnceLock};

// The report's types are the output contract's (`model::doctor`); this keeps the
// `gpu::…` paths other code uses.
pub use crate::model::doctor::{GpuInfo, GpuProcess, NvmlReport};
pub use fake::FakeNvml;

/// The variable naming a fake NVML's JSON file (see [`FakeNvml`]).
pub const FAKE_VAR: &str = "JAX_RUNNER_FAKE_NVML";

/// The few NVML readings the runner needs.
pub trait Nvml: Send + Sync + std::fmt::Debug {
    /// The driver and every GPU, or why NVML is not there.
    fn report(&self) -> NvmlReport;
    /// One GPU's memory, utilisation and compute processes, read while a script
    /// runs; `Err` says why it could not be read.
    fn device(&self, index: u32) -> Result<GpuInfo, String>;
}

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

/// NVML counted as absent (`JAX_RUNNER_NO_NVML=1`).
#[derive(Debug)]
struct Disabled;

impl Nvml for Disabled {
    fn report(&self) -> NvmlReport {
        NvmlReport {
            error: Some("disabled by JAX_RUNNER_NO_NVML=1".into()),
            ..Default::default()
        }
    }

    fn device(&self, _index: u32) -> Result<GpuInfo, String> {
        Err("disabled by JAX_RUNNER_NO_NVML=1".into())
    }
}

/// The process's NVML: the fake when `JAX_RUNNER_FAKE_NVML` names a file, none when
/// `JAX_RUNNER_NO_NVML=1`, else the driver's library, loaded once (every sample
/// reuses it).
pub fn system() -> Arc<dyn Nvml> {
    static SYSTEM: OnceLock<Arc<dyn Nvml>> = OnceLock::new();
    SYSTEM
        .get_or_init(|| {
            // The process's own switches, read once with the process-wide library it
            // chooses (no run, doctor or sampler has a snapshot of its own to hand).
            if let Some(path) = std::env::var_os(FAKE_VAR).filter(|p| !p.is_empty()) {
                Arc::new(FakeNvml::new(path.into()))
            } else if std::env::var_os("JAX_RUNNER_NO_NVML").is_some_and(|v| v == "1") {
                Arc::new(Disabled)
            } else {
                Arc::new(real::RealNvml::load())
            }
        })
        .clone()
}

/// Asks NVML about the driver and every GPU. `JAX_RUNNER_NO_NVML=1` makes NVML count
/// as absent; `JAX_RUNNER_GPU_COUNT=N` overrides the count (containers whose GPUs NVML
/// cannot see, and tests of the GPU paths on machines without one).
pub fn inspect() -> NvmlReport {
    inspect_with(system().as_ref())
}

/// [`inspect`] through a given NVML.
pub fn inspect_with(nvml: &dyn Nvml) -> NvmlReport {
    let mut report = nvml.report();
    // Beside the process-wide NVML switches above, and read the same way.
    report.count_override = std::env::var("JAX_RUNNER_GPU_COUNT")
        .ok()
        .and_then(|v| v.parse().ok());
    report
}

/// The NVIDIA GPUs NVML sees (or the override), or `None` when NVML is absent and no
/// override is set.
pub fn nvidia_gpu_count() -> Option<usize> {
    let report = inspect();
    (report.available || report.count_override.is_some()).then(|| report.gpu_count())
}
