//! Attempts that never started: the runner waits out its own shortage of descriptors
//! or processes instead of failing a script for it, and an attempt that could not
//! start at all is recorded with the reason.

use std::path::Path;

use crate::model::{Attempt, FailureClass, Platform, ScriptResult, Status};
use crate::runner::attempt::{AttemptError, AttemptRequest, Attempted};
use crate::runner::{RunContext, Stop};

/// Runs the attempt; when the runner itself has no descriptor or process to spare
/// (`EMFILE`, `EAGAIN`), waits for running scripts to give some back and tries again,
/// rather than fail a script for the runner's own shortage.
pub(super) async fn run_when_the_runner_can(
    ctx: &RunContext,
    request: AttemptRequest<'_>,
    stop: &tokio::sync::watch::Receiver<Stop>,
) -> Result<Attempted, AttemptError> {
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        match ctx.backend.run(request.clone(), stop.clone()).await {
            Err(e)
                if runner_exhausted(&e) && wait.as_secs() < 30 && *stop.borrow() == Stop::Run =>
            {
                tracing::debug!(id = %request.script.id, "the runner is out of descriptors or processes: waiting {wait:?}");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            other => return other,
        }
    }
}

/// The attempt could not start because the runner ran out of something of its own.
fn runner_exhausted(e: &AttemptError) -> bool {
    matches!(e, AttemptError::Spawn { source, .. } if crate::runner::capacity::is_exhaustion(source))
}

/// An attempt that could not run because no later one could either raises the halt:
/// the runner's file system is full, or a Slurm job's node does not share the tree.
pub(super) fn halt_on(halt: &crate::halt::Halt, e: &AttemptError) {
    match e {
        AttemptError::Prepare { path, source } => {
            halt.check(path, source);
        }
        AttemptError::Slurm(crate::error::SlurmError::NotShared { node, path }) => {
            let error = format!("its job ran on {node}");
            halt.raise_for(crate::halt::HaltKind::NotShared, path, error);
        }
        _ => {}
    }
}

pub(super) fn spawn_failure(
    number: u32,
    device: Platform,
    stdout_log: &Path,
    stderr_log: &Path,
    e: &AttemptError,
    r: &mut ScriptResult,
) -> Attempt {
    let chain = crate::error::chain(e).join(": ");
    r.stderr_tail = vec![format!("[jax-runner] {chain}")];
    // The runner's own shortage is no failure of the script's: it never ran.
    let (status, class) = if runner_exhausted(e) {
        (Status::Interrupted, FailureClass::Interrupted)
    } else {
        (Status::Failed, FailureClass::ScriptError)
    };
    Attempt {
        gpu: Default::default(),
        gpu_mem_fraction: None,
        device_check: None,
        number,
        device,
        slot: 0,
        started_at: crate::model::Timestamp::now(),
        duration_s: 0.0,
        status,
        return_code: None,
        signal: None,
        peak_memory_mb: 0.0,
        memory_source: None,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        class,
        matched_line: Some(chain),
        exception: None,
        user_frame: None,
        jax: None,
        stdout_log: stdout_log.to_string_lossy().into_owned(),
        stderr_log: stderr_log.to_string_lossy().into_owned(),
        log_cut_bytes: 0,
        leaks: Vec::new(),
        refused_forks: 0,
        ray: None,
        slurm: None,
        start: "cold".into(),
        cold_start_reason: None,
    }
}
