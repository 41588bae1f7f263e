//! Where and how a run goes, decided before the first script: the sandbox, the
//! pre-flight's device verdict, the platform, the number of parallel jobs, and the
//! warm-start zygote's environment.

use crate::config::{GpuShare, RunConfig};
use crate::gpu::share::{self, GpuPlan};
use crate::model::doctor::{DoctorReport, NvmlReport};
use crate::model::{Device, DeviceTimes, Platform};

impl Plan {
    /// The platform scripts really start on: the CPU when the GPU is unusable and
    /// `--fallback cpu` moves them there.
    pub fn starts_on(&self, fallback_to_cpu: bool) -> Platform {
        if self.gpu_unusable.is_some() && fallback_to_cpu {
            Platform::Cpu
        } else {
            self.platform
        }
    }
}

/// What a Ray cluster offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// What it is, for the plan's reason: `Ray cluster (Ray 2.9.0)`, `Slurm 22.05.8,
    /// partition debug`.
    pub what: String,
    pub gpus: f64,
    pub cpus: f64,
}

/// Where and how wide a run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The platform scripts are set up for.
    pub platform: Platform,
    pub jobs: usize,
    /// Slots the run may open beyond `jobs` once its scripts turn out very short
    /// (see `runner/spare.rs`): a local CPU run whose `--jobs` was not given, where
    /// memory allows; 0 otherwise.
    pub spare: usize,
    /// Why a GPU request will run on the CPU from the start, if it will.
    pub gpu_unusable: Option<String>,
    /// How the platform was chosen, in words.
    pub reason: String,
    /// Which GPUs scripts go to, and how many share one (local GPU runs).
    pub gpu: Option<GpuPlan>,
}

/// What the previous runs tell the plan.
#[derive(Debug, Clone, Copy, Default)]
pub struct Learned {
    /// The largest peak resident memory of a script, MiB.
    pub peak_mb: Option<f64>,
    /// The largest peak GPU memory of a script, MiB.
    pub gpu_peak_mb: Option<f64>,
}

/// The platform, the GPU verdict and the number of parallel jobs. With a pre-flight
/// report the GPU counts only when it really works; without one, when NVML sees it.
pub fn plan(config: &RunConfig, env: Option<&DoctorReport>, learned: Learned) -> Plan {
    let nvml = env.map_or_else(crate::gpu::inspect, |e| e.nvml.clone());
    let gpus = nvml.gpu_count();
    let gpu_works = match env {
        Some(e) => e.verdict(Platform::Gpu).is_some_and(|v| v.works),
        None => gpus > 0,
    };
    let why_not = || match env {
        Some(e) => e
            .why_not(Platform::Gpu)
            .unwrap_or_else(|| "the GPU does not work".into()),
        None if nvml.available => "NVML reports no NVIDIA GPU".into(),
        None => format!(
            "no NVIDIA driver: {}",
            nvml.error.as_deref().unwrap_or("NVML unavailable")
        ),
    };
    let (platform, reason) = match config.device {
        Device::Auto if gpu_works => (Platform::Gpu, "auto: the GPU works".to_string()),
        Device::Auto => (
            Platform::Cpu,
            format!("auto: the CPU, because {}", why_not()),
        ),
        Device::Cpu => (Platform::Cpu, "requested".into()),
        Device::Gpu => (Platform::Gpu, "requested".into()),
        Device::Tpu => (Platform::Tpu, "requested".into()),
    };
    let gpu_unusable = (platform == Platform::Gpu && !gpu_works).then(why_not);
    let on_cpu = platform == Platform::Cpu || (gpu_unusable.is_some() && config.fallback_to_cpu);
    let gpu = (platform == Platform::Gpu && !on_cpu)
        .then(|| gpu_plan(config, &nvml, learned.gpu_peak_mb));
    let (jobs, spare) = match config.jobs {
        Some(j) => (j.get(), 0),
        None if on_cpu => cpu_slots(learned.peak_mb),
        // One script per GPU unless asked to share: scripts on one GPU fight over its
        // memory.
        None => (gpu.as_ref().map_or(1, GpuPlan::jobs), 0),
    };
    Plan {
        platform,
        jobs,
        spare,
        gpu_unusable,
        reason,
        gpu,
    }
}

/// The GPUs scripts go to (those `CUDA_VISIBLE_DEVICES` names, when set) and how many
/// share each.
fn gpu_plan(config: &RunConfig, nvml: &NvmlReport, gpu_peak_mb: Option<f64>) -> GpuPlan {
    let visible = config
        .extra_env
        .iter()
        .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
        .map(|(_, v)| v.clone())
        .or_else(|| config.environment.var("CUDA_VISIBLE_DEVICES"));
    let devices = share::devices(&nvml.gpus, nvml.gpu_count().max(1), visible.as_deref());
    let (share, reason) = match config.gpu_share {
        None => (1, "one script per GPU".to_string()),
        Some(GpuShare::Fixed(n)) => (n.get(), format!("--gpu-share {n}")),
        Some(GpuShare::Auto) => share::auto_share(&nvml.gpus, &devices, gpu_peak_mb),
    };
    GpuPlan {
        pin_always: visible.is_some() && !devices.is_empty(),
        devices,
        share,
        reason,
    }
}

/// Where `--device auto` starts one script, and why: on the CPU when its history says
/// it ran faster there than on the GPU (small models, where the GPU's start-up costs
/// more than it saves); elsewhere where the plan says. `None` for a device asked for
/// by name.
pub fn device_for(
    config: &RunConfig,
    plan: &Plan,
    times: Option<&DeviceTimes>,
) -> Option<(Platform, String)> {
    if config.device != Device::Auto {
        return None;
    }
    let learned = times.and_then(|t| Some((t.cpu_s?, t.gpu_s?)));
    match learned {
        Some((cpu, gpu)) if plan.platform == Platform::Gpu && cpu < gpu => Some((
            Platform::Cpu,
            format!("history: cpu {cpu:.1} s < gpu {gpu:.1} s"),
        )),
        Some((cpu, gpu)) if plan.platform == Platform::Gpu => Some((
            Platform::Gpu,
            format!("history: gpu {gpu:.1} s <= cpu {cpu:.1} s"),
        )),
        _ => Some((plan.platform, plan.reason.clone())),
    }
}

/// CPU slots: one per core, fewer when free memory would not hold that many scripts at
/// the largest peak the previous run saw; and the spare slots a run of very short
/// scripts may open, where that memory holds them too.
fn cpu_slots(history_peak_mb: Option<f64>) -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let fit = history_peak_mb.filter(|p| *p > 0.0).map(|peak| {
        let mut sys = sysinfo::System::new();
        sys.refresh_memory();
        let free_mb = sys.available_memory() as f64 / (1024.0 * 1024.0);
        // Keep a tenth of free memory for everything else.
        (free_mb * 0.9 / peak).floor() as usize
    });
    slots_within(cores, fit)
}

/// One slot per core and its spare ones, within `fit` scripts of memory (none: no
/// history to size them by).
fn slots_within(cores: usize, fit: Option<usize>) -> (usize, usize) {
    let spare = spare_for_cores(cores);
    match fit {
        None => (cores, spare),
        Some(fit) => (cores.min(fit.max(1)), spare.min(fit.saturating_sub(cores))),
    }
}

/// The spare slots a CPU run of one slot per core may open once its scripts prove very
/// short (`runner/spare.rs`): one for every four cores, rounded up. The 12% of two
/// cores left idle by 1,000 `print(i)` scripts calls for a quarter of a slot a core; a
/// whole one is what two cores can have.
fn spare_for_cores(cores: usize) -> usize {
    cores.div_ceil(4)
}

/// A Ray or Slurm run: the cluster decides. `auto` takes a GPU when the cluster has one (the
/// check before the run refused `gpu` on a cluster without); jobs default to the
/// cluster's CPUs, or its GPUs for a GPU run.
pub fn ray_plan(config: &RunConfig, cluster: &Cluster) -> Plan {
    let platform = match config.device {
        Device::Auto if cluster.gpus > 0.0 => Platform::Gpu,
        Device::Auto | Device::Cpu => Platform::Cpu,
        Device::Gpu => Platform::Gpu,
        Device::Tpu => Platform::Tpu,
    };
    let slots = if platform == Platform::Gpu {
        cluster.gpus
    } else {
        cluster.cpus
    };
    Plan {
        platform,
        spare: 0,
        jobs: config.jobs.map_or((slots as usize).max(1), |j| j.get()),
        gpu_unusable: None,
        gpu: None,
        reason: format!(
            "{}: {} CPU, {} GPU",
            cluster.what, cluster.cpus, cluster.gpus
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_spare_slot_per_four_cores_rounded_up() {
        let spares: Vec<usize> = [1, 2, 4, 5, 8, 16]
            .iter()
            .map(|&c| super::spare_for_cores(c))
            .collect();
        assert_eq!(spares, vec![1, 1, 1, 2, 2, 4]);
    }

    #[test]
    fn memory_for_fewer_scripts_takes_the_spare_slots_first() {
        use super::slots_within;
        assert_eq!(slots_within(8, None), (8, 2), "no history: all of them");
        assert_eq!(slots_within(8, Some(100)), (8, 2));
        assert_eq!(slots_within(8, Some(9)), (8, 1));
        assert_eq!(slots_within(8, Some(8)), (8, 0));
        assert_eq!(slots_within(8, Some(3)), (3, 0));
        assert_eq!(slots_within(8, Some(0)), (1, 0), "always one");
    }
}
