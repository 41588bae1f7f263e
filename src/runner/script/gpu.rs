//! A script's GPU side: the GPU each attempt got and what it used, the retry alone on
//! the GPU after running out of its memory, and the result's GPU figures and device
//! times (what `--device auto` learns from next time).

use crate::gpu::sample::GpuUsage;
use crate::gpu::share::GpuSlot;
use crate::model::{Attempt, FailureClass, Platform, ScriptResult, Status};
use crate::runner::RunContext;

/// Lines of XLA and CUDA that say the GPU, not the host, ran out of memory.
const GPU_OOM: &[&str] = &[
    "RESOURCE_EXHAUSTED: Out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "cudaErrorMemoryAllocation",
];

/// Whether an attempt of class `class` that ended on `line` ran out of GPU memory.
pub(super) fn out_of_gpu_memory(class: FailureClass, line: Option<&str>) -> bool {
    class == FailureClass::OutOfMemory
        && line.is_some_and(|l| GPU_OOM.iter().any(|p| l.contains(p)))
}

/// Whether scripts share a GPU in this run: more slots than GPUs.
pub(super) fn shared(ctx: &RunContext) -> bool {
    ctx.plan
        .gpu
        .as_ref()
        .is_some_and(|g| ctx.plan.jobs > g.devices.len().max(1))
}

/// Records which GPU the attempt got.
pub(super) fn place(attempt: &mut Attempt, slot: Option<&GpuSlot>) {
    if let Some(s) = slot.filter(|_| attempt.device == Platform::Gpu) {
        attempt.gpu.gpu_index = Some(s.index);
        attempt.gpu_mem_fraction = s.mem_fraction;
    }
}

/// Records what the attempt used of its GPU.
pub(super) fn usage(attempt: &mut Attempt, usage: Option<&GpuUsage>) {
    if let Some(u) = usage {
        attempt.gpu.peak_gpu_memory_mb = Some(u.peak_memory_mb);
        attempt.gpu.gpu_memory_source = Some(u.memory_source);
        attempt.gpu.gpu_utilization_pct = u.utilization_pct;
    }
}

/// The result's GPU figures from its attempts, the preset its GPU attempts got, and
/// its device times with this run's success added.
pub(super) fn finish(ctx: &RunContext, r: &mut ScriptResult) {
    let Some(last) = r.attempts.last() else {
        return;
    };
    r.gpu.gpu_index = last.gpu.gpu_index;
    r.gpu.gpu_utilization_pct = last.gpu.gpu_utilization_pct;
    let peak = r
        .attempts
        .iter()
        .filter_map(|a| Some((a.gpu.peak_gpu_memory_mb?, a.gpu.gpu_memory_source)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((mb, source)) = peak {
        r.gpu.peak_gpu_memory_mb = Some(mb);
        r.gpu.gpu_memory_source = source;
    }
    let on_gpu = r.attempts.iter().any(|a| a.device == Platform::Gpu);
    r.xla_preset = ctx.config.xla_preset.filter(|_| on_gpu);
    if last.status == Status::Succeeded {
        // The device jax really used; the environment's when jax did not say.
        let device = r.device_used.unwrap_or(last.device);
        let before = r.device_times.unwrap_or_default();
        r.device_times = Some(before.with(device, last.duration_s));
    }
}

#[cfg(test)]
mod tests;
