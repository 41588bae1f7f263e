//! The GPU decisions of the retry loop against the fake backend: the retry alone on
//! the GPU after running out of GPU memory, the CPU after that, the GPU each slot
//! gets, and `--device auto` learning from the history.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::super::tests::{context_with, fake, run, script, Ending, Fake};
use crate::config::test_options;
use crate::events::EventSender;
use crate::gpu::share::GpuPlan;
use crate::model::{Device, DeviceTimes, FailureClass, Platform, Status};
use crate::plan::Plan;
use crate::runner::{RunContext, Stop};

/// A GPU context: `gpus` GPUs, `share` scripts on each.
fn gpu_context(dir: &std::path::Path, f: Arc<Fake>, gpus: u32, share: usize) -> RunContext {
    let mut opts = test_options(dir);
    opts.retries = 0;
    opts.retry_delay = Duration::ZERO;
    opts.device = Device::Gpu;
    let mut ctx = context_with(opts, f, Platform::Gpu);
    let gpu = GpuPlan {
        devices: (0..gpus).map(|i| (i, Some(format!("GPU-{i}")))).collect(),
        share,
        reason: "test".into(),
        pin_always: false,
    };
    ctx.plan = Arc::new(Plan {
        jobs: gpu.jobs(),
        gpu: Some(gpu),
        ..(*ctx.plan).clone()
    });
    ctx
}

#[tokio::test]
async fn out_of_memory_on_a_shared_gpu_is_retried_alone_then_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("fits_alone", &[Ending::GpuOom, Ending::Exit(0)]),
        (
            "too_big",
            &[Ending::GpuOom, Ending::GpuOom, Ending::Exit(0)],
        ),
    ]));
    let ctx = gpu_context(tmp.path(), f.clone(), 1, 2);
    let (_tx, stop) = watch::channel(Stop::Run);
    let r = run(&ctx, "fits_alone", stop.clone()).await;
    assert_eq!(r.status, Status::Succeeded);
    let a = &r.attempts;
    assert_eq!(
        a.len(),
        2,
        "no retries were asked for, yet it ran alone once more"
    );
    assert_eq!(a[0].class, FailureClass::OutOfMemory);
    assert_eq!(
        (a[0].device, a[0].gpu_mem_fraction),
        (Platform::Gpu, Some(0.47))
    );
    assert_eq!((a[1].device, a[1].gpu_mem_fraction), (Platform::Gpu, None));
    assert!(r.fallback.is_none());
    let r = run(&ctx, "too_big", stop).await;
    assert_eq!(r.status, Status::Succeeded);
    let devices: Vec<Platform> = r.attempts.iter().map(|a| a.device).collect();
    assert_eq!(devices, [Platform::Gpu, Platform::Gpu, Platform::Cpu]);
    let why = r.fallback.unwrap().reason;
    assert!(
        why.contains("out of GPU memory alone on the GPU: "),
        "{why}"
    );
    assert!(why.contains("RESOURCE_EXHAUSTED"), "{why}");
}

#[tokio::test]
async fn out_of_memory_on_an_unshared_gpu_goes_to_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[("big", &[Ending::GpuOom, Ending::Exit(0)])]));
    let ctx = gpu_context(tmp.path(), f.clone(), 1, 1);
    let (_tx, stop) = watch::channel(Stop::Run);
    let r = run(&ctx, "big", stop).await;
    let devices: Vec<Platform> = r.attempts.iter().map(|a| a.device).collect();
    assert_eq!(devices, [Platform::Gpu, Platform::Cpu]);
    assert_eq!(r.gpu.gpu_index, None, "the final attempt ran on the CPU");
    assert_eq!(r.attempts[0].gpu.gpu_index, Some(0));
}

#[tokio::test]
async fn each_slot_gets_its_own_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = ["a", "b", "c", "d"];
    let plays: Vec<(&str, &[Ending])> =
        ids.iter().map(|id| (*id, &[Ending::Exit(0)][..])).collect();
    let f = Arc::new(fake(&plays));
    let ctx = Arc::new(gpu_context(tmp.path(), f.clone(), 2, 2));
    assert_eq!(ctx.plan.jobs, 4);
    let (_tx, stop) = watch::channel(Stop::Run);
    let (events, _rx) = EventSender::channel();
    let scripts = ids.iter().map(|id| script(id)).collect();
    let lines = crate::runner::run_all(ctx, scripts, events, stop).await;
    assert!(lines.iter().all(|l| l.status == Status::Succeeded));
    let slots = f.gpus.lock().unwrap().clone();
    for slot in slots
        .iter()
        .map(|s| s.as_ref().expect("a GPU attempt gets a GPU"))
    {
        assert_eq!(
            slot.visible.as_deref(),
            Some(format!("GPU-{}", slot.index).as_str())
        );
        assert_eq!(slot.mem_fraction, Some(0.47));
    }
    let mut indices: Vec<u32> = lines.iter().map(|l| l.gpu_index.unwrap()).collect();
    indices.sort();
    assert_eq!(indices, [0, 0, 1, 1], "two scripts on each GPU");
}

#[tokio::test]
async fn auto_learns_from_each_devices_time() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("small", &[Ending::Exit(0)]),
        ("large", &[Ending::Exit(0)]),
        ("new", &[Ending::Exit(0)]),
    ]));
    let mut opts = test_options(tmp.path());
    opts.device = Device::Auto;
    let mut ctx = context_with(opts, f.clone(), Platform::Gpu);
    let times = |cpu, gpu| DeviceTimes {
        cpu_s: Some(cpu),
        gpu_s: Some(gpu),
    };
    ctx.device_times.insert("small".into(), times(1.2, 3.4));
    ctx.device_times.insert("large".into(), times(30.0, 3.0));
    let (_tx, stop) = watch::channel(Stop::Run);
    let small = run(&ctx, "small", stop.clone()).await;
    assert_eq!(small.attempts[0].device, Platform::Cpu);
    assert_eq!(
        small.device_reason.as_deref(),
        Some("history: cpu 1.2 s < gpu 3.4 s")
    );
    // This run's CPU time replaces the old one; the GPU's stays for next time.
    let learned = small.device_times.unwrap();
    assert!(
        learned.cpu_s.unwrap() < 1.0 && learned.gpu_s == Some(3.4),
        "{learned:?}"
    );
    let large = run(&ctx, "large", stop.clone()).await;
    assert_eq!(large.attempts[0].device, Platform::Gpu);
    assert_eq!(
        large.device_reason.as_deref(),
        Some("history: gpu 3.0 s <= cpu 30.0 s")
    );
    // No history: the plan's choice, and its reason.
    let new = run(&ctx, "new", stop).await;
    assert_eq!(new.attempts[0].device, Platform::Gpu);
    assert_eq!(new.device_reason.as_deref(), Some("test"));
    assert_eq!(
        new.device_times.unwrap().gpu_s,
        Some(new.attempts[0].duration_s)
    );
}
