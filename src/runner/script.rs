//! One script from first attempt to final result: retries by policy, the GPU→CPU
//! fallback, telemetry, classification and leak reports, and the runner's own halt
//! when a log of the script cannot be written for lack of space.

use std::path::PathBuf;

use tokio::sync::watch;

use super::attempt::{AttemptError, AttemptRequest};
use super::slots::{Lease, Slots};
use super::{sys, RunContext, Stop};
use crate::discovery::Script;
use crate::events::{EventSender, RunEvent};
use crate::model::{FailureClass, Fallback, Platform, ScriptResult};
use crate::model::{ScriptSummary, Status, SCHEMA_VERSION};

pub use finish::explain;
use finish::finish;
use record::recorded;
use unstarted::{halt_on, run_when_the_runner_can, spawn_failure};

/// Runs one script to its final result, reports it, and returns its summary line.
/// The loop decides retries, the GPU→CPU fallback and the retry alone on the GPU; how
/// an attempt runs is the backend's business.
pub async fn run_script(
    ctx: &RunContext,
    script: &Script,
    lease: Lease,
    slots: &Slots,
    events: &EventSender,
    mut stop: watch::Receiver<Stop>,
) -> ScriptSummary {
    let mut lease = Some(lease);
    let config = &ctx.config;
    let settings = ctx.settings_of(script);
    let retry = settings.retry_policy(&config.retry);
    let mut result = base_result(ctx, script, &settings);
    let data_dir = ctx.data_dir(&script.id);
    // Before anything of this run's is written: the earlier record goes to the
    // history, so the attempt starts in an empty data folder and claims no old file.
    ctx.archive_record(&script.id, &data_dir, &mut result);
    let mut prepared = leftovers::ready(ctx, &script.id, &data_dir, 1, &mut result);
    let mut platform = starting_platform(ctx, script, &settings, &mut result, events);
    let mut retries_done = 0;
    // Set for the retry, alone on the GPU, of an attempt that ran out of GPU memory.
    let mut alone = false;
    for number in 1.. {
        if number > 1 && prepared.is_ok() {
            prepared = leftovers::ready(ctx, &script.id, &data_dir, number, &mut result);
        }
        let slot = lease.as_ref().map_or(0, Lease::slot);
        let gpu_slot = (platform == Platform::Gpu)
            .then(|| ctx.plan.gpu.as_ref()?.slot(slot, alone))
            .flatten();
        let (stdout_log, stderr_log) = ctx.log_paths(&script.id, number);
        events.emit(started(script, number, platform, slot));
        let request = AttemptRequest {
            script,
            number,
            platform,
            data_dir: &data_dir,
            stdout_log: &stdout_log,
            stderr_log: &stderr_log,
            events,
            settings: &settings,
            gpu: gpu_slot.as_ref(),
            slot: lease.as_ref().map(Lease::slot),
        };
        let outcome = match &prepared {
            Ok(()) => run_when_the_runner_can(ctx, request, &stop).await,
            Err(e) => Err(AttemptError::Prepare {
                path: data_dir.clone(),
                source: std::io::Error::new(e.kind(), e.to_string()),
            }),
        };
        let logs = (stdout_log.as_path(), stderr_log.as_path());
        let mut attempt = attempt_of(ctx, number, platform, logs, outcome, &mut result);
        // Before anything reads the folder, or the next attempt moves it to the history.
        leftovers::tidy(&data_dir, &mut result);
        attempt.slot = slot;
        gpu::place(&mut attempt, gpu_slot.as_ref());
        let class = attempt.class;
        let reason = attempt.matched_line.clone();
        events.emit(RunEvent::AttemptFinished {
            id: script.id.clone(),
            attempt: attempt.number,
            details: Box::new(attempt.clone()),
        });
        result.attempts.push(attempt);
        if *stop.borrow() != Stop::Run {
            break;
        }
        let (delay, all) =
            match next_step(ctx, class, reason, platform, alone, retries_done, &retry) {
                Next::Done => break,
                Next::FallBack(reason) => {
                    platform = Platform::Cpu;
                    fall_back(&mut result, events, reason);
                    continue;
                }
                // Others on the GPU may have taken the memory: once more, alone on it.
                Next::Alone => {
                    alone = true;
                    (std::time::Duration::ZERO, true)
                }
                Next::Retry => {
                    retries_done += 1;
                    (retry.delay(retries_done), false)
                }
            };
        events.emit(RunEvent::RetryScheduled {
            id: script.id.clone(),
            attempt: number,
            class,
            delay_s: delay.as_secs_f64(),
        });
        drop(lease.take());
        match wait_for_retry(delay, slots, all, &mut stop).await {
            Some(l) => lease = Some(l),
            None => break,
        }
    }
    conclude(ctx, result, &data_dir, events)
}

/// The event that attempt `number` starts.
fn started(script: &Script, number: u32, platform: Platform, slot: usize) -> RunEvent {
    RunEvent::ScriptStarted {
        id: script.id.clone(),
        attempt: number,
        device: platform,
        path: script.relative_path.to_string_lossy().into_owned(),
        slot,
    }
}

/// How many of a data folder's files a result names (`data_files`).
const DATA_FILES_NAMED: usize = 10_000;

/// The script's result made whole (its data files, as the last attempt's tidying
/// left them, what it left, why it failed), counted and sent.
fn conclude(
    ctx: &RunContext,
    mut result: ScriptResult,
    data_dir: &std::path::Path,
    events: &EventSender,
) -> ScriptSummary {
    finish(&mut result);
    gpu::finish(ctx, &mut result);
    let listing = crate::confined::relative_files(data_dir, DATA_FILES_NAMED);
    if let Some(cut) = listing.cut("data_files") {
        result.note_problem(cut);
    }
    result.data_files = listing.files;
    leftovers::check_leftovers(data_dir, &mut result);
    explain(&mut result);
    let summary = ScriptSummary::of(&result);
    // Counted while this script still holds its slot, so the next script cannot take
    // the slot before the failure counts.
    ctx.fail_budget.record(summary.status);
    events.emit(RunEvent::ScriptFinished {
        result: Box::new(result),
    });
    summary
}

/// The attempt's record: from what the backend brought back, or from why it could
/// not start (a file system that cannot take the logs halts the run).
fn attempt_of(
    ctx: &RunContext,
    number: u32,
    platform: Platform,
    (stdout_log, stderr_log): (&std::path::Path, &std::path::Path),
    outcome: Result<super::attempt::Attempted, AttemptError>,
    result: &mut ScriptResult,
) -> crate::model::Attempt {
    match outcome {
        Ok(done) => recorded(
            ctx,
            number,
            platform,
            (stdout_log, stderr_log),
            done,
            result,
        ),
        Err(e) => {
            halt_on(&ctx.halt, &e);
            spawn_failure(number, platform, stdout_log, stderr_log, &e, result)
        }
    }
}

/// What follows an attempt that did not succeed.
enum Next {
    /// The script's result is final.
    Done,
    /// To the CPU, for this reason.
    FallBack(String),
    /// Once more, alone on the GPU.
    Alone,
    /// A retry by the policy.
    Retry,
}

/// Decides what follows an attempt of class `class` (ended on `line`): nothing after
/// success or a halt (the caller ends the loop on a stop); the CPU after a broken GPU environment (for the rest of
/// the run) or after running out of GPU memory (first alone on a shared GPU); else
/// the retry policy.
fn next_step(
    ctx: &RunContext,
    class: FailureClass,
    line: Option<String>,
    platform: Platform,
    alone: bool,
    retries_done: u32,
    retry: &crate::retry::RetryPolicy,
) -> Next {
    let config = &ctx.config;
    if class == FailureClass::Succeeded || ctx.halt.is_raised() {
        return Next::Done;
    }
    let to_cpu = platform == Platform::Gpu && config.fallback_to_cpu;
    if class == FailureClass::GpuEnvironment && to_cpu {
        let reason = line.unwrap_or_else(|| "the GPU environment failed".into());
        ctx.mark_gpu_unusable(&reason);
        return Next::FallBack(reason);
    }
    if platform == Platform::Gpu && gpu::out_of_gpu_memory(class, line.as_deref()) {
        if !alone && gpu::shared(ctx) {
            return Next::Alone;
        }
        if to_cpu {
            let on = if alone { " alone on the GPU" } else { "" };
            return Next::FallBack(format!(
                "out of GPU memory{on}: {}",
                line.unwrap_or_default()
            ));
        }
    }
    if retry.should_retry(class, retries_done) {
        Next::Retry
    } else {
        Next::Done
    }
}

/// The platform a script starts on: a profile override's device, else `--device
/// auto`'s choice for it (the history may send it to the CPU); the CPU when the GPU
/// already failed in this run.
fn starting_platform(
    ctx: &RunContext,
    script: &Script,
    settings: &crate::config::ScriptSettings,
    result: &mut ScriptResult,
    events: &EventSender,
) -> Platform {
    let mut platform = settings.platform(ctx.plan.platform);
    let times = ctx.device_times.get(&script.id);
    let learned = match settings.overridden.contains_key("device") {
        true => None,
        false => crate::plan::device_for(&ctx.config, &ctx.plan, times),
    };
    if let Some((learned, why)) = learned {
        platform = learned;
        result.device_reason = Some(why);
    }
    if platform == Platform::Gpu && ctx.config.fallback_to_cpu {
        if let Some(reason) = ctx.gpu_unusable() {
            platform = Platform::Cpu;
            fall_back(result, events, reason);
        }
    }
    platform
}

/// The wait before a retry, holding no slot (the queue goes on meanwhile), then the
/// wait for a slot like any other script, or for every slot (`all`: to run alone).
/// `None` when the run is stopped meanwhile.
async fn wait_for_retry(
    delay: std::time::Duration,
    slots: &Slots,
    all: bool,
    stop: &mut watch::Receiver<Stop>,
) -> Option<Lease> {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = stop.wait_for(|s| *s != Stop::Run) => return None,
    }
    let lease = async {
        if all {
            slots.acquire_all().await
        } else {
            slots.acquire().await
        }
    };
    tokio::select! {
        l = lease => Some(l),
        _ = stop.wait_for(|s| *s != Stop::Run) => None,
    }
}

fn fall_back(result: &mut ScriptResult, events: &EventSender, reason: String) {
    let fallback = Fallback {
        from: Platform::Gpu,
        to: Platform::Cpu,
        reason,
    };
    events.emit(RunEvent::Fallback {
        id: result.id.clone(),
        fallback: fallback.clone(),
    });
    result.fallback = Some(fallback);
}

/// The status of an attempt from its class.
pub fn status_of(class: FailureClass) -> Status {
    match class {
        FailureClass::Succeeded => Status::Succeeded,
        FailureClass::TimedOut => Status::TimedOut,
        FailureClass::Interrupted => Status::Interrupted,
        _ => Status::Failed,
    }
}

/// A result before any attempt: what the run never got to stays like this.
pub fn base_result(
    ctx: &RunContext,
    script: &Script,
    settings: &crate::config::ScriptSettings,
) -> ScriptResult {
    let (stdout_log, stderr_log) = ctx.log_paths(&script.id, 1);
    let lossy = |p: PathBuf| p.to_string_lossy().into_owned();
    let fingerprint = ctx
        .fingerprints
        .get(&script.id)
        .cloned()
        .unwrap_or_default();
    ScriptResult {
        schema_version: SCHEMA_VERSION,
        run_id: ctx.config.run_id.clone(),
        resumed_from: None,
        id: script.id.clone(),
        script_path: script.path.to_string_lossy().into_owned(),
        script_path_hex: crate::model::lossless_hex(&script.path),
        relative_path: script.relative_path.to_string_lossy().into_owned(),
        discovered_by: script.discovered_by,
        success: false,
        status: Status::Interrupted,
        class: FailureClass::Interrupted,
        matched_line: None,
        exception: None,
        user_frame: None,
        return_code: None,
        signal: None,
        signal_name: None,
        device_requested: settings.device,
        device_reason: None,
        device_used: None,
        fallback: None,
        device_mismatch: false,
        device_check: None,
        jax: None,
        time_breakdown: None,
        attempts: Vec::new(),
        execution_time_s: 0.0,
        peak_memory_mb: 0.0,
        memory_source: None,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        timeout_s: settings.timeout.as_secs_f64(),
        started_at: None,
        finished_at: None,
        stdout_log: lossy(stdout_log),
        stderr_log: lossy(stderr_log),
        stdout_bytes: 0,
        stderr_bytes: 0,
        stderr_tail: Vec::new(),
        stdout_tail: Vec::new(),
        reason: None,
        log_truncated: false,
        leaks: Vec::new(),
        data_dir: lossy(ctx.data_dir(&script.id)),
        data_files: Vec::new(),
        problems: Vec::new(),
        sandbox: crate::model::SandboxInfo {
            memory_limit_mb: settings.memory_limit.map(|b| b as f64 / (1024.0 * 1024.0)),
            ..ctx.sandbox_info.clone()
        },
        xla_preset: None,
        device_times: ctx.device_times.get(&script.id).copied(),
        gpu: Default::default(),
        fingerprint: fingerprint.digest,
        inputs: fingerprint.parts,
        overrides: settings.overridden.clone(),
    }
}

mod finish;
mod gpu;
mod leftovers;
mod record;
mod unstarted;

#[cfg(test)]
mod tests;
