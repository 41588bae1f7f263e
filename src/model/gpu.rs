//! What a script used of its GPU, recorded the same way by each attempt and by the
//! script's result (where the index and utilisation are the final attempt's and the
//! peak the highest of any attempt).

use serde::{Deserialize, Serialize};

use super::GpuMemorySource;

/// GPU figures from NVML; every field is absent for a CPU attempt or without NVML.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuUse {
    /// The GPU it ran on (NVML index), when it ran on one the runner knows.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_index: Option<u32>,
    /// Peak GPU memory, MiB (see `gpu_memory_source` for what it counts).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_gpu_memory_mb: Option<f64>,
    /// `process` (NVML's figure for the script's own processes) or `device` (the
    /// growth of the GPU's used memory while it ran, others on the GPU included).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_memory_source: Option<GpuMemorySource>,
    /// Mean GPU utilisation while it ran, percent (NVML, sampled with the memory).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_utilization_pct: Option<f64>,
}
