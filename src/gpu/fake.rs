//! A fake NVML read from a JSON file, re-read at every reading so a test (or a test's
//! script) can change what the GPUs show while a run goes on. A testing hook:
//! `JAX_RUNNER_FAKE_NVML=<file>` makes the runner believe in these GPUs.
//!
//! ```json
//! {"driver_version": "550.54.15", "cuda_driver_version": "12.4",
//!  "gpus": [{"name": "NVIDIA H100", "memory_total_mb": 81559, "memory_used_mb": 0,
//!            "utilization_gpu_pct": 40,
//!            "processes": [{"pid": 4242, "used_memory_mb": 512}]}]}
//! ```
//!
//! Errors are injected with `"error"` (NVML cannot be initialised at all),
//! `"sample_error"` (every reading during a run fails) or a GPU's own `"error"`
//! (that GPU's readings fail).

use std::path::PathBuf;

use serde::Deserialize;

use super::{GpuInfo, GpuProcess, Nvml, NvmlReport};

/// The fake's file.
#[derive(Debug, Clone)]
pub struct FakeNvml {
    path: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeFile {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    sample_error: Option<String>,
    #[serde(default)]
    driver_version: Option<String>,
    #[serde(default)]
    cuda_driver_version: Option<String>,
    #[serde(default)]
    gpus: Vec<FakeGpu>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeGpu {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    memory_total_mb: f64,
    #[serde(default)]
    memory_used_mb: f64,
    #[serde(default)]
    utilization_gpu_pct: Option<u32>,
    #[serde(default)]
    compute_capability: Option<String>,
    #[serde(default)]
    processes: Vec<GpuProcess>,
    #[serde(default)]
    error: Option<String>,
}

impl FakeNvml {
    /// A fake whose GPUs are described by the JSON file at `path`.
    pub fn new(path: PathBuf) -> FakeNvml {
        FakeNvml { path }
    }

    fn read(&self) -> Result<FakeFile, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("failed to read the fake NVML {}: {e}", self.path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("failed to parse the fake NVML {}: {e}", self.path.display()))
    }
}

impl FakeGpu {
    fn info(&self, index: u32) -> GpuInfo {
        GpuInfo {
            index,
            name: self.name.clone().unwrap_or_else(|| "Fake GPU".into()),
            uuid: self.uuid.clone(),
            memory_total_mb: self.memory_total_mb,
            memory_used_mb: self.memory_used_mb,
            memory_free_mb: (self.memory_total_mb - self.memory_used_mb).max(0.0),
            utilization_gpu_pct: self.utilization_gpu_pct,
            utilization_memory_pct: None,
            compute_capability: self.compute_capability.clone(),
            processes: self.processes.clone(),
        }
    }
}

impl Nvml for FakeNvml {
    fn report(&self) -> NvmlReport {
        let file = match self.read() {
            Ok(f) => f,
            Err(e) => FakeFile {
                error: Some(e),
                ..Default::default()
            },
        };
        if let Some(error) = file.error {
            return NvmlReport {
                error: Some(error),
                ..Default::default()
            };
        }
        NvmlReport {
            available: true,
            error: None,
            driver_version: file.driver_version,
            cuda_driver_version: file.cuda_driver_version,
            gpus: (0u32..).zip(&file.gpus).map(|(i, g)| g.info(i)).collect(),
            count_override: None,
        }
    }

    fn device(&self, index: u32) -> Result<GpuInfo, String> {
        let file = self.read()?;
        if let Some(e) = file.error.or(file.sample_error) {
            return Err(e);
        }
        let gpu = file
            .gpus
            .get(index as usize)
            .ok_or_else(|| format!("failed to read GPU {index}: no such GPU"))?;
        match &gpu.error {
            Some(e) => Err(e.clone()),
            None => Ok(gpu.info(index)),
        }
    }
}
