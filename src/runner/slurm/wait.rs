//! One job from submission to its end: polled with `scontrol show job`, cancelled
//! with `scancel` by its id when the run stops, its queue wait told apart from its run.

use std::ffi::OsString;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::{is_terminal, JobFields, SlurmClient};
use crate::error::SlurmError;
use crate::events::{EventSender, RunEvent};
use crate::runner::Stop;

/// The first poll comes this soon; each next one a little later, up to [`POLL_MAX`].
const POLL_MIN: Duration = Duration::from_millis(200);
const POLL_MAX: Duration = Duration::from_secs(3);
/// How long a cancelled job may take to end before the runner stops asking.
const CANCEL_WAIT: Duration = Duration::from_secs(60);
/// Failed polls in a row before the attempt gives up on the controller.
const MAX_POLL_ERRORS: u32 = 30;

/// Reasons a pending job gives when it can never start as submitted (a limit of the
/// partition, the account or the QOS it asks past): waiting would be forever.
const NEVER_STARTS: &[&str] = &[
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionConfig",
    "InvalidAccount",
    "InvalidQOS",
    "QOSMaxWallDurationPerJobLimit",
    "AssocMaxWallDurationPerJobLimit",
    "BadConstraints",
];

/// A job that ended (or was given up on after a cancel).
#[derive(Debug)]
pub struct Waited {
    pub id: String,
    /// Its last fields; empty when Slurm had already forgotten it.
    pub fields: JobFields,
    /// This run cancelled it.
    pub cancelled: bool,
    /// Time in the queue, and time running.
    pub queued: Duration,
    pub ran: Duration,
    /// When it started running (else when it ended).
    pub started_at: SystemTime,
}

/// Where a job's state changes are told, for the progress display.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    pub events: &'a EventSender,
    pub id: &'a str,
    pub attempt: u32,
}

/// Submits `args` and waits for the job's end. A stop (Ctrl-C, `--fail-fast=now`)
/// cancels it, and the wait goes on until Slurm says it ended.
pub async fn submit_and_wait(
    client: &SlurmClient,
    args: Vec<OsString>,
    mut stop: watch::Receiver<Stop>,
    progress: Progress<'_>,
) -> Result<Waited, SlurmError> {
    let id = client.submit(args).await?;
    let submitted = Instant::now();
    let mut running_since: Option<(Instant, SystemTime)> = None;
    let mut cancelled_at: Option<Instant> = None;
    let mut poll = POLL_MIN;
    let mut errors = 0;
    let mut last = JobFields::new();
    progress.events.emit(RunEvent::JobQueued {
        id: progress.id.to_string(),
        attempt: progress.attempt,
        job_id: id.clone(),
    });
    loop {
        if *stop.borrow() != Stop::Run && cancelled_at.is_none() {
            let _ = client.cancel(&id).await;
            cancelled_at = Some(Instant::now());
        }
        match client.show(&id).await {
            Ok(Some(fields)) => {
                errors = 0;
                let state = fields.get("JobState").cloned().unwrap_or_default();
                if state == "RUNNING" && running_since.is_none() {
                    running_since = Some((Instant::now(), SystemTime::now()));
                    progress.events.emit(RunEvent::JobRunning {
                        id: progress.id.to_string(),
                        attempt: progress.attempt,
                    });
                }
                let reason = fields.get("Reason").cloned().unwrap_or_default();
                last = fields;
                if is_terminal(&state) {
                    break;
                }
                if state == "PENDING" && NEVER_STARTS.contains(&reason.as_str()) {
                    let _ = client.cancel(&id).await;
                    return Err(SlurmError::Refused {
                        command: format!("Slurm job {id}"),
                        stderr: format!(
                            "it can never start: PENDING ({reason}); see `scontrol show partition` and --slurm-arg, --timeout"
                        ),
                    });
                }
            }
            // Forgotten: it ended long enough ago (`MinJobAge`).
            Ok(None) => break,
            Err(e) => {
                errors += 1;
                if errors >= MAX_POLL_ERRORS {
                    if cancelled_at.is_none() {
                        let _ = client.cancel(&id).await;
                    }
                    return Err(e);
                }
            }
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > CANCEL_WAIT) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = stop.changed(), if cancelled_at.is_none() => {}
        }
        poll = (poll * 3 / 2).min(POLL_MAX);
    }
    let now = Instant::now();
    let (queued, ran, started_at) = match running_since {
        Some((i, t)) => (i - submitted, now - i, t),
        // Ended between two polls, or never ran: its whole life counts as the queue's
        // unless it ran (it has a node and an exit code then).
        None => (now - submitted, Duration::ZERO, SystemTime::now()),
    };
    Ok(Waited {
        id,
        fields: last,
        cancelled: cancelled_at.is_some(),
        queued,
        ran,
        started_at,
    })
}
