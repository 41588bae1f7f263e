//! One script from first attempt to final result: retries by policy, the GPU→CPU
//! fallback, telemetry, classification and leak reports.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::child::{self, AttemptOutcome, AttemptSpec, SpawnError, StoppedBy};
use super::classify::{classify, Ending, FailureClass};
use super::{env, limits, ray, sandbox, sys, telemetry, RunContext, Stop};
use crate::config::Platform;
use crate::discovery::Script;
use crate::events::{EventSender, RunEvent};
use crate::model::{
    Attempt, Fallback, JaxTelemetry, ScriptResult, ScriptSummary, Status, SCHEMA_VERSION,
};
use crate::paths::rfc3339;

/// Runs one script to its final result, reports it, and returns its summary line.
pub async fn run_script(
    ctx: &RunContext,
    script: &Script,
    slot: usize,
    events: &EventSender,
    mut stop: watch::Receiver<Stop>,
) -> ScriptSummary {
    let mut result = base_result(ctx, script);
    let data_dir = ctx.data_dir(&script.id);
    let prepared =
        std::fs::create_dir_all(ctx.logs_dir()).and_then(|_| std::fs::create_dir_all(&data_dir));
    let mut platform = ctx.platform;
    if platform == Platform::Gpu && ctx.fallback_to_cpu {
        if let Some(reason) = ctx.gpu_unusable() {
            platform = Platform::Cpu;
            fall_back(&mut result, events, reason);
        }
    }
    let mut retries_done = 0;
    for number in 1.. {
        let (stdout_log, stderr_log) = ctx.log_paths(&script.id, number);
        // In the data folder: the one place a sandboxed script may write.
        let report = data_dir.join(format!(".jax-runner-telemetry.{number}.json"));
        let _ = std::fs::remove_file(&report);
        let cwd = script.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let profile_dir = ctx
            .profile
            .then(|| data_dir.join(format!("profile-attempt{number}")));
        let runner_env = env::child_env(&env::EnvSpec {
            platform,
            data_dir: &data_dir,
            attempt: number,
            compilation_cache: ctx.compilation_cache.as_deref(),
            telemetry: ctx
                .shim_dir
                .as_ref()
                .map(|dir| (report.as_path(), telemetry::python_path(dir))),
            profile_dir: profile_dir.as_deref(),
        });
        let cgroup = ctx.max_procs.and_then(|max| {
            let name = format!("{}-{}-{number}", std::process::id(), script.id);
            limits::PidsCgroup::create(&sanitize_cgroup(&name), max).map(Arc::new)
        });
        result.sandbox.max_procs_enforced_by = ctx.max_procs.map(|_| {
            if cgroup.is_some() {
                "cgroup"
            } else {
                "watchdog"
            }
            .to_string()
        });
        let spec = AttemptSpec {
            python: ctx.python.clone(),
            script: script.path.clone(),
            sandbox: ctx.sandbox.as_ref().map(|sb| {
                let mut readable = sb.python_paths.clone();
                readable.push(cwd.clone());
                // The parent's PYTHONPATH passes in, so its folders must stay visible.
                if let Some(pp) = std::env::var_os("PYTHONPATH") {
                    readable.extend(std::env::split_paths(&pp).filter(|p| p.is_absolute()));
                }
                readable.extend(ctx.shim_dir.clone());
                let mut writable = vec![data_dir.clone()];
                writable.extend(ctx.compilation_cache.clone());
                let mounts = sandbox::Mounts {
                    home: sb.home.clone(),
                    readable,
                    writable,
                    cwd: cwd.clone(),
                    gpu: platform == Platform::Gpu,
                };
                (sb.bwrap.path.clone(), sandbox::args(&mounts))
            }),
            cwd,
            env: full_env(ctx, runner_env),
            env_clear: ctx.sandbox.is_some(),
            env_remove: env::REMOVED,
            memory_limit: ctx.memory_limit,
            max_procs: ctx.max_procs,
            cgroup,
            zygote: ctx.zygote.clone(),
            samples: Some(child::SampleSink {
                events: events.clone(),
                id: script.id.clone(),
                attempt: number,
            }),
            stdout_log,
            stderr_log,
            timeout: ctx.timeout,
            grace: ctx.grace,
            max_log_bytes: ctx.max_log_bytes,
            token: format!("{}:{}:{number}", ctx.run_token, script.id),
        };
        events.emit(RunEvent::ScriptStarted {
            id: script.id.clone(),
            attempt: number,
            device: platform,
            path: script.relative_path.to_string_lossy().into_owned(),
            slot,
        });
        let mut job = None;
        let outcome = match (&prepared, &ctx.ray) {
            (Ok(()), Some(client)) => {
                let spec = ray::JobSpec {
                    script: &script.path,
                    env: remote_env(&spec.env),
                    gpu: platform == Platform::Gpu,
                    submission_id: format!(
                        "jax-runner-{}-{}-{number}",
                        sanitize_cgroup(&ctx.run_token),
                        script.id
                    ),
                    stdout_log: &spec.stdout_log,
                    stderr_log: &spec.stderr_log,
                    timeout: ctx.timeout,
                };
                match ray::run_attempt(client, &spec, stop.clone()).await {
                    Ok((o, j)) => {
                        job = Some(j);
                        Ok(o)
                    }
                    Err(e) => Err(SpawnError::Spawn {
                        python: PathBuf::from("ray job"),
                        script: script.path.clone(),
                        source: std::io::Error::other(e.to_string()),
                    }),
                }
            }
            (Ok(()), None) => child::run_attempt(&spec, stop.clone()).await,
            (Err(e), _) => Err(SpawnError::Prepare {
                path: data_dir.clone(),
                source: std::io::Error::new(e.kind(), e.to_string()),
            }),
        };
        let mut attempt = match outcome {
            Ok(o) => record(
                number,
                platform,
                &spec,
                &o,
                telemetry::take(&report),
                &mut result,
            ),
            Err(e) => spawn_failure(number, platform, &spec, &e, &mut result),
        };
        attempt.slot = slot;
        attempt.ray = job;
        let class = attempt.class;
        let reason = attempt.matched_line.clone();
        events.emit(RunEvent::AttemptFinished {
            id: script.id.clone(),
            attempt: Box::new(attempt.clone()),
        });
        result.attempts.push(attempt);
        if class == FailureClass::Succeeded || *stop.borrow() != Stop::Run {
            break;
        }
        if class == FailureClass::GpuEnvironment && platform == Platform::Gpu && ctx.fallback_to_cpu
        {
            let reason = reason.unwrap_or_else(|| "the GPU environment failed".into());
            ctx.mark_gpu_unusable(&reason);
            platform = Platform::Cpu;
            fall_back(&mut result, events, reason);
            continue;
        }
        if !ctx.retry.should_retry(class, retries_done) {
            break;
        }
        retries_done += 1;
        let delay = ctx.retry.delay(retries_done);
        events.emit(RunEvent::RetryScheduled {
            id: script.id.clone(),
            attempt: number,
            class,
            delay_s: delay.as_secs_f64(),
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s != Stop::Run) => break,
        }
    }
    finish(&mut result);
    result.data_files = data_files(&data_dir);
    let summary = ScriptSummary::of(&result);
    events.emit(RunEvent::ScriptFinished {
        result: Box::new(result),
    });
    summary
}

/// The variables a script gets on top of (or, sandboxed, instead of) the parent's:
/// sandboxed runs start from the allowlist and `--env-pass`; both get the runner's
/// settings and `--env`, which win.
fn full_env(ctx: &RunContext, runner: Vec<(&'static str, OsString)>) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = Vec::new();
    if ctx.sandbox.is_some() {
        for (k, v) in std::env::vars_os() {
            let name = k.to_string_lossy();
            if env::allowlisted(&name) || ctx.pass_env.iter().any(|p| *p == name) {
                vars.push((k, v));
            }
        }
    }
    vars.extend(runner.into_iter().map(|(k, v)| (OsString::from(k), v)));
    vars.extend(
        ctx.extra_env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    vars
}

/// A job's environment on the cluster: the runner's variables for the script, less
/// what only makes sense on this machine (the telemetry shim's paths).
fn remote_env(env: &[(OsString, OsString)]) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, _)| k != "PYTHONPATH" && k != "JAX_RUNNER_TELEMETRY")
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// cgroup names: letters, digits, `-`, `_`, `.` only, and not too long.
fn sanitize_cgroup(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect()
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

fn record(
    number: u32,
    device: Platform,
    spec: &AttemptSpec,
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
        scan: &o.stderr.scan,
    });
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
    Attempt {
        number,
        device,
        slot: 0,
        started_at: rfc3339(o.started_at),
        duration_s: o.duration.as_secs_f64(),
        status: status_of(verdict.class),
        return_code: o.exit.code,
        signal: o.exit.signal,
        peak_memory_mb: o.peak_rss_bytes as f64 / (1024.0 * 1024.0),
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
        exception: verdict.exception,
        jax,
        stdout_log: spec.stdout_log.to_string_lossy().into_owned(),
        stderr_log: spec.stderr_log.to_string_lossy().into_owned(),
        log_cut_bytes: o.stdout.cut_bytes + o.stderr.cut_bytes,
        leaks: o.leaks.clone(),
        refused_forks: o.refused_forks,
        ray: None,
        start: if o.start == child::Start::Warm {
            "warm"
        } else {
            "cold"
        }
        .into(),
        cold_start_reason: match &o.start {
            child::Start::ColdFallback(reason) => Some(reason.clone()),
            _ => None,
        },
    }
}

fn spawn_failure(
    number: u32,
    device: Platform,
    spec: &AttemptSpec,
    e: &SpawnError,
    r: &mut ScriptResult,
) -> Attempt {
    let mut chain = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push_str(&format!(": {s}"));
        source = s.source();
    }
    r.stderr_tail = vec![format!("[jax-runner] {chain}")];
    Attempt {
        number,
        device,
        slot: 0,
        started_at: rfc3339(std::time::SystemTime::now()),
        duration_s: 0.0,
        status: Status::Failed,
        return_code: None,
        signal: None,
        peak_memory_mb: 0.0,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        class: FailureClass::ScriptError,
        matched_line: Some(chain),
        exception: None,
        jax: None,
        stdout_log: spec.stdout_log.to_string_lossy().into_owned(),
        stderr_log: spec.stderr_log.to_string_lossy().into_owned(),
        log_cut_bytes: 0,
        leaks: Vec::new(),
        refused_forks: 0,
        ray: None,
        start: "cold".into(),
        cold_start_reason: None,
    }
}

/// A result before any attempt: what the run never got to stays like this.
pub fn base_result(ctx: &RunContext, script: &Script) -> ScriptResult {
    let (stdout_log, stderr_log) = ctx.log_paths(&script.id, 1);
    let lossy = |p: PathBuf| p.to_string_lossy().into_owned();
    ScriptResult {
        schema_version: SCHEMA_VERSION,
        id: script.id.clone(),
        script_path: script.path.to_string_lossy().into_owned(),
        relative_path: script.relative_path.to_string_lossy().into_owned(),
        discovered_by: script.discovered_by,
        success: false,
        status: Status::Interrupted,
        class: FailureClass::Interrupted,
        matched_line: None,
        exception: None,
        return_code: None,
        signal: None,
        signal_name: None,
        device_requested: ctx.device_requested,
        device_used: None,
        fallback: None,
        device_mismatch: false,
        jax: None,
        attempts: Vec::new(),
        execution_time_s: 0.0,
        peak_memory_mb: 0.0,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        timeout_s: ctx.timeout.as_secs_f64(),
        started_at: None,
        finished_at: None,
        stdout_log: lossy(stdout_log),
        stderr_log: lossy(stderr_log),
        stdout_bytes: 0,
        stderr_bytes: 0,
        stderr_tail: Vec::new(),
        log_truncated: false,
        leaks: Vec::new(),
        data_dir: lossy(ctx.data_dir(&script.id)),
        data_files: Vec::new(),
        sandbox: ctx.sandbox_info.clone(),
        fingerprint: ctx
            .fingerprints
            .get(&script.id)
            .cloned()
            .unwrap_or_default(),
    }
}

/// What the script left in its data folder, relative to it.
fn data_files(data_dir: &Path) -> Vec<String> {
    let (files, _) = crate::paths::list_files(data_dir, 10_000);
    files
        .iter()
        .filter_map(|f| f.strip_prefix(data_dir).ok())
        .map(|f| f.to_string_lossy().into_owned())
        .collect()
}

/// Fills the summary fields from the attempts.
fn finish(r: &mut ScriptResult) {
    let Some(last) = r.attempts.last() else {
        return;
    };
    r.status = last.status;
    r.class = last.class;
    r.matched_line = last.matched_line.clone();
    r.exception = last.exception.clone();
    r.success = last.status == Status::Succeeded;
    r.return_code = last.return_code;
    r.signal = last.signal;
    r.signal_name = last.signal.map(sys::signal_name);
    r.jax = last.jax.clone();
    // Truth comes from jax itself, never from what the environment asked for.
    r.device_used = last.jax.as_ref().and_then(JaxTelemetry::platform);
    r.device_mismatch = r.device_used.is_some_and(|used| used != last.device);
    r.stdout_log = last.stdout_log.clone();
    r.stderr_log = last.stderr_log.clone();
    r.log_truncated = last.log_cut_bytes > 0;
    r.execution_time_s = r.attempts.iter().map(|a| a.duration_s).sum();
    r.cpu_user_s = r.attempts.iter().map(|a| a.cpu_user_s).sum();
    r.cpu_system_s = r.attempts.iter().map(|a| a.cpu_system_s).sum();
    r.peak_memory_mb = r
        .attempts
        .iter()
        .map(|a| a.peak_memory_mb)
        .fold(0.0, f64::max);
    r.started_at = r.attempts.first().map(|a| a.started_at.clone());
    let end = humantime::parse_rfc3339(&last.started_at)
        .map(|t| t + std::time::Duration::from_secs_f64(last.duration_s))
        .unwrap_or_else(|_| std::time::SystemTime::now());
    r.finished_at = Some(rfc3339(end));
}
