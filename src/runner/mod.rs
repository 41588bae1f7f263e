//! Stage 2, run: execute every discovered script in its own process group, in
//! parallel up to the job limit, and turn each into a [`ScriptResult`]. Progress goes
//! out as [`RunEvent`]s; nothing here prints.

mod child;
pub mod env;
mod output;
pub mod sys;
pub mod tree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use child::{AttemptOutcome, AttemptSpec, SpawnError, StoppedBy};

use crate::config::{Device, Platform};
use crate::discovery::Script;
use crate::events::{EventSender, RunEvent};
use crate::model::{Attempt, ScriptResult, Status, SCHEMA_VERSION};
use crate::paths::rfc3339;

/// A request to stop, escalating: the controller only ever raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    /// Keep going.
    Run,
    /// Start nothing new; SIGTERM running scripts, SIGKILL after the grace period.
    Graceful,
    /// SIGKILL running scripts now.
    Kill,
}

/// What every script of a run shares.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub python: PathBuf,
    pub device_requested: Device,
    pub platform: Platform,
    pub jobs: usize,
    pub timeout: Duration,
    pub grace: Duration,
    pub results_dir: PathBuf,
    pub compilation_cache: Option<PathBuf>,
}

impl RunContext {
    fn logs_dir(&self) -> PathBuf {
        self.results_dir.join("logs")
    }

    fn data_dir(&self, id: &str) -> PathBuf {
        self.results_dir.join("data").join(id)
    }
}

/// Runs all scripts and returns their results in the order given.
pub async fn run_all(
    ctx: Arc<RunContext>,
    scripts: Vec<Script>,
    events: EventSender,
    stop: watch::Receiver<Stop>,
) -> Vec<ScriptResult> {
    let slots = Arc::new(Semaphore::new(ctx.jobs.max(1)));
    let mut tasks = JoinSet::new();
    let mut results: Vec<Option<ScriptResult>> = vec![None; scripts.len()];
    let mut not_started = Vec::new();

    for (index, script) in scripts.into_iter().enumerate() {
        let mut stop_rx = stop.clone();
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("semaphore never closes"),
            _ = stop_rx.wait_for(|s| *s != Stop::Run) => {
                not_started.push((index, script));
                continue;
            }
        };
        if *stop.borrow() != Stop::Run {
            not_started.push((index, script));
            continue;
        }
        let (ctx, events, stop) = (ctx.clone(), events.clone(), stop.clone());
        tasks.spawn(async move {
            let result = run_script(&ctx, &script, &events, stop).await;
            drop(permit);
            (index, result)
        });
    }
    for (index, script) in not_started {
        let result = never_started(&ctx, &script);
        events.emit(RunEvent::ScriptFinished {
            result: Box::new(result.clone()),
        });
        results[index] = Some(result);
    }
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined.expect("script task does not panic");
        results[index] = Some(result);
    }
    results
        .into_iter()
        .map(|r| r.expect("every script has a result"))
        .collect()
}

/// Runs one script (one attempt for now) and reports it.
async fn run_script(
    ctx: &RunContext,
    script: &Script,
    events: &EventSender,
    stop: watch::Receiver<Stop>,
) -> ScriptResult {
    let mut result = base_result(ctx, script);
    let attempt_no = 1;
    let data_dir = ctx.data_dir(&script.id);
    let prepared =
        std::fs::create_dir_all(ctx.logs_dir()).and_then(|_| std::fs::create_dir_all(&data_dir));
    let spec = AttemptSpec {
        python: ctx.python.clone(),
        script: script.path.clone(),
        cwd: script.path.parent().unwrap_or(Path::new("/")).to_path_buf(),
        env: env::child_env(&env::EnvSpec {
            platform: ctx.platform,
            data_dir: &data_dir,
            attempt: attempt_no,
            compilation_cache: ctx.compilation_cache.as_deref(),
        }),
        env_remove: env::REMOVED,
        stdout_log: PathBuf::from(&result.stdout_log),
        stderr_log: PathBuf::from(&result.stderr_log),
        timeout: ctx.timeout,
        grace: ctx.grace,
    };
    events.emit(RunEvent::ScriptStarted {
        id: script.id.clone(),
        attempt: attempt_no,
        device: ctx.platform,
        path: script.relative_path.to_string_lossy().into_owned(),
    });
    let outcome = match prepared {
        Ok(()) => child::run_attempt(&spec, stop).await,
        Err(source) => Err(SpawnError::Log {
            path: data_dir.clone(),
            source,
        }),
    };
    let attempt = match outcome {
        Ok(o) => attempt_from(attempt_no, ctx.platform, &o, &mut result),
        Err(e) => spawn_failure(attempt_no, ctx.platform, &e, &mut result),
    };
    events.emit(RunEvent::AttemptFinished {
        id: script.id.clone(),
        attempt: attempt.clone(),
    });
    result.attempts.push(attempt);
    finish(&mut result);
    events.emit(RunEvent::ScriptFinished {
        result: Box::new(result.clone()),
    });
    result
}

/// The status of an attempt from how it ended.
pub fn classify(o: &AttemptOutcome) -> Status {
    match (o.stopped_by, o.exit.code) {
        (Some(StoppedBy::Timeout), _) => Status::TimedOut,
        (Some(StoppedBy::Interrupt), _) => Status::Interrupted,
        (None, Some(0)) => Status::Succeeded,
        _ => Status::Failed,
    }
}

fn attempt_from(
    number: u32,
    device: Platform,
    o: &AttemptOutcome,
    r: &mut ScriptResult,
) -> Attempt {
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
    if o.pipes_left_open {
        r.stderr_tail.push(
            "[jax-runner] a process left behind by the script held its output open and was killed"
                .into(),
        );
    }
    Attempt {
        number,
        device,
        started_at: rfc3339(o.started_at),
        duration_s: o.duration.as_secs_f64(),
        status: classify(o),
        return_code: o.exit.code,
        signal: o.exit.signal,
        peak_memory_mb: o.peak_rss_bytes as f64 / (1024.0 * 1024.0),
        cpu_user_s: o.exit.user_cpu.as_secs_f64(),
        cpu_system_s: o.exit.system_cpu.as_secs_f64(),
    }
}

fn spawn_failure(number: u32, device: Platform, e: &SpawnError, r: &mut ScriptResult) -> Attempt {
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
        started_at: rfc3339(std::time::SystemTime::now()),
        duration_s: 0.0,
        status: Status::Failed,
        return_code: None,
        signal: None,
        peak_memory_mb: 0.0,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
    }
}

fn base_result(ctx: &RunContext, script: &Script) -> ScriptResult {
    let logs = ctx.logs_dir();
    ScriptResult {
        schema_version: SCHEMA_VERSION,
        id: script.id.clone(),
        script_path: script.path.to_string_lossy().into_owned(),
        relative_path: script.relative_path.to_string_lossy().into_owned(),
        discovered_by: script.discovered_by,
        success: false,
        status: Status::Interrupted,
        return_code: None,
        signal: None,
        signal_name: None,
        device_requested: ctx.device_requested,
        device_used: ctx.platform,
        attempts: Vec::new(),
        execution_time_s: 0.0,
        peak_memory_mb: 0.0,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        timeout_s: ctx.timeout.as_secs_f64(),
        started_at: None,
        finished_at: None,
        stdout_log: logs
            .join(format!("{}.stdout.log", script.id))
            .to_string_lossy()
            .into_owned(),
        stderr_log: logs
            .join(format!("{}.stderr.log", script.id))
            .to_string_lossy()
            .into_owned(),
        stdout_bytes: 0,
        stderr_bytes: 0,
        stderr_tail: Vec::new(),
        data_dir: ctx.data_dir(&script.id).to_string_lossy().into_owned(),
    }
}

/// Fills the summary fields from the attempts.
fn finish(r: &mut ScriptResult) {
    let Some(last) = r.attempts.last() else {
        return;
    };
    r.status = last.status;
    r.success = last.status == Status::Succeeded;
    r.return_code = last.return_code;
    r.signal = last.signal;
    r.signal_name = last.signal.map(sys::signal_name);
    r.device_used = last.device;
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
        .map(|t| t + Duration::from_secs_f64(last.duration_s))
        .unwrap_or_else(|_| std::time::SystemTime::now());
    r.finished_at = Some(rfc3339(end));
}

/// The result of a script the run never got to (it was interrupted first).
fn never_started(ctx: &RunContext, script: &Script) -> ScriptResult {
    let mut r = base_result(ctx, script);
    r.stderr_tail = vec!["[jax-runner] not started: the run was interrupted".into()];
    r
}
