//! A running script's GPU use, sampled with its memory: the GPU memory of its own
//! processes when NVML's process list can be matched to the script's process tree,
//! else the growth of the GPU's used memory while it ran (which also counts anyone
//! else on that GPU, so the result says which figure it is), and the GPU's mean
//! utilisation.

use std::collections::HashSet;
use std::sync::Arc;

use super::Nvml;
use crate::model::GpuMemorySource;

/// Which GPUs an attempt may use, and how to read them.
#[derive(Debug, Clone)]
pub struct GpuWatch {
    pub nvml: Arc<dyn Nvml>,
    /// NVML indices; empty means every GPU the driver has.
    pub indices: Vec<u32>,
}

/// What one sample saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuReading {
    /// GPU memory attributed to the script now, MiB.
    pub memory_mb: f64,
    /// Mean utilisation of its GPUs now, percent.
    pub utilization_pct: Option<f64>,
}

/// An attempt's GPU figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuUsage {
    /// Peak GPU memory, MiB.
    pub peak_memory_mb: f64,
    /// Where that figure comes from.
    pub memory_source: GpuMemorySource,
    /// Mean utilisation over the samples, percent.
    pub utilization_pct: Option<f64>,
}

/// Samples one attempt's GPUs.
#[derive(Debug)]
pub struct GpuSampler {
    watch: GpuWatch,
    /// Used memory of each watched GPU before the script started, MiB.
    baseline: Vec<(u32, f64)>,
    peak_process_mb: Option<f64>,
    peak_device_mb: Option<f64>,
    util_sum: f64,
    util_count: u32,
    /// The last reading error, when readings failed.
    pub error: Option<String>,
}

impl GpuSampler {
    /// Reads the watched GPUs' used memory before the script starts.
    pub fn start(mut watch: GpuWatch) -> GpuSampler {
        if watch.indices.is_empty() {
            watch.indices = (0u32..)
                .zip(&watch.nvml.report().gpus)
                .map(|(i, _)| i)
                .collect();
        }
        let mut error = None;
        let baseline = watch
            .indices
            .iter()
            .filter_map(|&i| match watch.nvml.device(i) {
                Ok(g) => Some((i, g.memory_used_mb)),
                Err(e) => {
                    error = Some(e);
                    None
                }
            })
            .collect();
        GpuSampler {
            watch,
            baseline,
            peak_process_mb: None,
            peak_device_mb: None,
            util_sum: 0.0,
            util_count: 0,
            error,
        }
    }

    /// One sample, given the PIDs of the script's tree as the runner sees them.
    /// `None` when no watched GPU could be read.
    pub fn sample(&mut self, tree: &[u32]) -> Option<GpuReading> {
        let pids = namespace_pids(tree);
        let (mut process_mb, mut matched, mut device_mb) = (0.0, false, 0.0);
        let (mut util, mut util_n, mut read) = (0.0, 0u32, false);
        for &index in &self.watch.indices {
            let gpu = match self.watch.nvml.device(index) {
                Ok(g) => g,
                Err(e) => {
                    self.error = Some(e);
                    continue;
                }
            };
            read = true;
            for p in gpu.processes.iter().filter(|p| pids.contains(&p.pid)) {
                matched = true;
                process_mb += p.used_memory_mb.unwrap_or(0.0);
            }
            let before = self.baseline.iter().find(|(i, _)| *i == index);
            device_mb += (gpu.memory_used_mb - before.map_or(0.0, |b| b.1)).max(0.0);
            if let Some(u) = gpu.utilization_gpu_pct {
                util += f64::from(u);
                util_n += 1;
            }
        }
        if !read {
            return None;
        }
        if matched {
            self.peak_process_mb = Some(self.peak_process_mb.unwrap_or(0.0).max(process_mb));
        }
        self.peak_device_mb = Some(self.peak_device_mb.unwrap_or(0.0).max(device_mb));
        let utilization_pct = (util_n > 0).then(|| util / f64::from(util_n));
        if let Some(u) = utilization_pct {
            self.util_sum += u;
            self.util_count += 1;
        }
        Some(GpuReading {
            memory_mb: if matched { process_mb } else { device_mb },
            utilization_pct,
        })
    }

    /// The attempt's figures: the processes' peak when NVML ever listed one of the
    /// script's processes, else the device's growth; `None` when nothing was read.
    pub fn usage(&self) -> Option<GpuUsage> {
        let (peak_memory_mb, memory_source) = match (self.peak_process_mb, self.peak_device_mb) {
            (Some(p), _) => (p, GpuMemorySource::Process),
            (None, Some(d)) => (d, GpuMemorySource::Device),
            (None, None) => return None,
        };
        Some(GpuUsage {
            peak_memory_mb,
            memory_source,
            utilization_pct: (self.util_count > 0)
                .then(|| self.util_sum / f64::from(self.util_count)),
        })
    }
}

/// The tree's PIDs in every PID namespace the kernel shows for them (`NSpid` in
/// `/proc/<pid>/status`): NVML names processes as seen from its own namespace, which
/// need not be the runner's (a sandboxed script lives in a namespace of its own).
fn namespace_pids(tree: &[u32]) -> HashSet<u32> {
    let mut pids: HashSet<u32> = tree.iter().copied().collect();
    for pid in tree {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("NSpid:")) {
            pids.extend(
                line.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids
}

#[cfg(test)]
mod tests;
