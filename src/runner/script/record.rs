//! An attempt that ran, as the result records it: its class from its ending, its
//! figures (time, memory, CPU, GPU), jax's own report and the runner's check of it.

use std::path::Path;

use super::{gpu, status_of};
use crate::model::{Attempt, ExceptionInfo, JaxTelemetry, Platform, ScriptResult, SourceFrame};
use crate::runner::attempt::{AttemptOutcome, Attempted, Start, StoppedBy};
use crate::runner::classify::{classify, Ending};
use crate::runner::RunContext;

/// An attempt that ran, recorded: its logs' problems raise the halt, its limits'
/// enforcers go into the result.
pub(super) fn recorded(
    ctx: &RunContext,
    number: u32,
    platform: Platform,
    (stdout_log, stderr_log): (&Path, &Path),
    done: Attempted,
    result: &mut ScriptResult,
) -> Attempt {
    if let Some(by) = done.enforced.max_procs {
        result.sandbox.max_procs_enforced_by = Some(by.into());
    }
    if let Some(by) = done.enforced.memory_limit {
        result.sandbox.memory_limit_enforced_by = Some(by.into());
    }
    let o = &done.outcome;
    for (log, d) in [(stdout_log, &o.stdout), (stderr_log, &o.stderr)] {
        if d.disk_full {
            ctx.halt
                .raise(log, d.write_error.clone().unwrap_or_default());
        }
    }
    if let Some(problem) = done.jax.problem {
        result.note_problem(problem);
    }
    let mut a = record(
        number,
        platform,
        stdout_log,
        stderr_log,
        o,
        done.jax.report,
        result,
    );
    // A job its cluster ended before the script's end could be recorded (Slurm's state,
    // Ray's error type): the cluster's words decided the class, and the reader needs them.
    let slurm = (done.slurm.as_ref().filter(|j| !j.reported)).map(crate::runner::slurm::slurm_line);
    let ray = done.ray.as_ref().and_then(crate::runner::ray::lost_line_of);
    if let Some(line) = slurm.or(ray) {
        a.matched_line = Some(line);
    }
    a.ray = done.ray;
    a.slurm = done.slurm;
    gpu::usage(&mut a, o.gpu.as_ref());
    a
}

fn record(
    number: u32,
    device: Platform,
    stdout_log: &Path,
    stderr_log: &Path,
    o: &AttemptOutcome,
    jax: Option<JaxTelemetry>,
    r: &mut ScriptResult,
) -> Attempt {
    let verdict = classify(&Ending {
        platform: device,
        code: o.exit.code,
        signal: o.exit.signal,
        timed_out: o.stopped_by == Some(StoppedBy::Timeout),
        interrupted: o.stopped_by == Some(StoppedBy::Interrupt),
        memory_limit_hit: o.stopped_by == Some(StoppedBy::MemoryLimit),
        process_limit_hit: o.stopped_by == Some(StoppedBy::ProcessLimit),
        kernel_oom_kill: o.kernel_oom_kill,
        memory_cgroup_hit: o.stopped_by == Some(StoppedBy::MemoryCgroup),
        peak: crate::runner::scratch::Held {
            rss: o.peak_rss_bytes.saturating_sub(o.peak_scratch_bytes),
            scratch: o.peak_scratch_bytes,
        },
        scan: &o.stderr.scan,
    });
    if let Some(caps) = o.capabilities {
        r.sandbox.capabilities = Some(format!("{caps:016x}"));
    }
    r.stdout_bytes = o.stdout.bytes;
    r.stderr_bytes = o.stderr.bytes;
    r.stderr_tail = o.stderr.tail.clone();
    for problem in [&o.stdout.write_error, &o.stderr.write_error]
        .into_iter()
        .flatten()
    {
        r.stderr_tail
            .push(format!("[jax-runner] failed to write log: {problem}"));
    }
    r.leaks.extend(o.leaks.iter().cloned());
    // jax's report is trusted where the runner's own view does not contradict it.
    let claims_gpu = jax.as_ref().and_then(JaxTelemetry::platform) == Some(Platform::Gpu);
    let device_check = (claims_gpu && o.gpu_device_opened == Some(false)).then(|| {
        "jax reported the GPU, but no process of the script held a GPU device open when \
         the runner looked"
            .to_string()
    });
    Attempt {
        gpu: Default::default(),
        gpu_mem_fraction: None,
        device_check,
        number,
        device,
        slot: 0,
        started_at: o.started_at.into(),
        duration_s: o.duration.as_secs_f64(),
        status: status_of(verdict.class),
        return_code: o.exit.code,
        signal: o.exit.signal,
        peak_memory_mb: o.peak_rss_bytes as f64 / (1024.0 * 1024.0),
        memory_source: Some(o.memory_source),
        // wait4 is exact when the runner waits for the script itself; sandboxed it only
        // sees bwrap, so Python's own report and /proc sampling set floors.
        cpu_user_s: [o.exit.user_cpu.as_secs_f64(), o.sampled_cpu.0]
            .into_iter()
            .chain(jax.as_ref().and_then(|j| j.cpu_user_s))
            .fold(0.0, f64::max),
        cpu_system_s: [o.exit.system_cpu.as_secs_f64(), o.sampled_cpu.1]
            .into_iter()
            .chain(jax.as_ref().and_then(|j| j.cpu_system_s))
            .fold(0.0, f64::max),
        class: verdict.class,
        matched_line: verdict.matched_line,
        // A script whose traceback never reached its stderr (it closed or replaced the
        // stream) still names its exception's type, from the shim's hook.
        exception: verdict.exception.or_else(|| {
            let kind = jax.as_ref()?.uncaught_exception.clone()?;
            (o.exit.code != Some(0)).then(|| ExceptionInfo {
                kind,
                message: String::new(),
            })
        }),
        // A stopped script's own stack dump says where it was; a script that exited
        // with an error, its last traceback; a crash by a signal, faulthandler's dump
        // after `Fatal Python error:` (a traceback it logged earlier is not where it
        // died, so only that dump counts).
        user_frame: match (o.stopped_by, o.exit.code) {
            (Some(StoppedBy::Timeout | StoppedBy::Interrupt), _) => {
                let scan = &o.stderr.scan;
                scan.hung_at.clone().or_else(|| scan.user_frame.clone())
            }
            (None, Some(code)) if code != 0 => o.stderr.scan.user_frame.clone(),
            // A fatal signal: where faulthandler's crash dump says it died.
            (None, None) => o.stderr.scan.crashed_at.clone(),
            _ => None,
        }
        .map(|f| with_source(f, r)),
        jax,
        stdout_log: stdout_log.to_string_lossy().into_owned(),
        stderr_log: stderr_log.to_string_lossy().into_owned(),
        log_cut_bytes: o.stdout.cut_bytes + o.stderr.cut_bytes,
        leaks: o.leaks.clone(),
        refused_forks: o.refused_forks,
        ray: None,
        slurm: None,
        start: if o.start == Start::Warm {
            "warm"
        } else {
            "cold"
        }
        .into(),
        cold_start_reason: match &o.start {
            Start::ColdFallback(reason) => Some(reason.clone()),
            _ => None,
        },
    }
}

/// Largest file a frame's source line is read from.
const SOURCE_MAX_BYTES: u64 = 1 << 20;

/// `frame` with its source line, read from its file where the output named none (a
/// stack dump prints no source): only from a regular file inside the script's tree,
/// whatever path the script's stderr named.
fn with_source(mut frame: SourceFrame, r: &ScriptResult) -> SourceFrame {
    if frame.source.is_some() || frame.line == 0 {
        return frame;
    }
    let inside = crate::model::reason::tree_root(r)
        .and_then(|root| root.canonicalize().ok())
        .zip(Path::new(&frame.file).canonicalize().ok())
        .filter(|(root, file)| file.starts_with(root))
        .map(|(_, file)| file);
    let text = inside
        .and_then(|file| crate::confined::open_followed(&file).ok())
        .filter(|f| f.size() <= SOURCE_MAX_BYTES)
        .and_then(|f| f.read_to_end(SOURCE_MAX_BYTES).ok());
    frame.source = text.and_then(|bytes| {
        let line = bytes.split(|b| *b == b'\n').nth(frame.line as usize - 1)?;
        let line = String::from_utf8_lossy(line).trim().to_string();
        (!line.is_empty()).then_some(line)
    });
    frame
}
