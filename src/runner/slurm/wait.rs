//! One job from submission to its end: followed through the run's reader of the queue
//! (`queue.rs`), asked how it ended with `scontrol show job`, cancelled with `scancel`
//! by its id when the run stops, its queue wait told apart from its run.

use std::ffi::OsString;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::queue::{Queue, Seen};
use super::{is_terminal, JobFields, SlurmClient};
use crate::error::SlurmError;
use crate::events::{EventSender, RunEvent};
use crate::runner::Stop;

/// How long a cancelled job may take to end before the runner stops asking.
const CANCEL_WAIT: Duration = Duration::from_secs(60);

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

/// Submits `args` and waits for the job's end, as `queue`'s polls see it. A stop
/// (Ctrl-C, `--fail-fast=now`) cancels it, and the wait goes on until Slurm says it
/// ended.
pub async fn submit_and_wait(
    client: &SlurmClient,
    queue: &Queue,
    args: Vec<OsString>,
    stop: watch::Receiver<Stop>,
    progress: Progress<'_>,
) -> Result<Waited, SlurmError> {
    let id = client.submit(args).await?;
    let mut seen = queue.watch(&id);
    let waited = wait(client, &id, &mut seen, stop, &progress).await;
    queue.forget(&id);
    if waited.is_err() {
        let _ = client.cancel(&id).await;
    }
    waited
}

async fn wait(
    client: &SlurmClient,
    id: &str,
    seen: &mut watch::Receiver<Seen>,
    mut stop: watch::Receiver<Stop>,
    progress: &Progress<'_>,
) -> Result<Waited, SlurmError> {
    let submitted = Instant::now();
    let mut running_since: Option<(Instant, SystemTime)> = None;
    let mut cancelled_at: Option<Instant> = None;
    let mut cancelled = false;
    let mut last = JobFields::new();
    let mut show_errors = 0;
    progress.events.emit(RunEvent::JobQueued {
        id: progress.id.to_string(),
        attempt: progress.attempt,
        job_id: id.to_string(),
    });
    let running = |since: &mut Option<(Instant, SystemTime)>| {
        if since.is_none() {
            *since = Some((Instant::now(), SystemTime::now()));
            progress.events.emit(RunEvent::JobRunning {
                id: progress.id.to_string(),
                attempt: progress.attempt,
            });
        }
    };
    loop {
        if *stop.borrow() != Stop::Run && cancelled_at.is_none() {
            // A job that had already ended refuses the cancel: it was not stopped.
            cancelled = client.cancel(id).await.is_ok();
            cancelled_at = Some(Instant::now());
        }
        let now = seen.borrow_and_update().clone();
        match now {
            Seen::Submitted => {}
            Seen::Pending(reason) if NEVER_STARTS.contains(&reason.as_str()) => {
                return Err(SlurmError::Refused {
                    command: format!("Slurm job {id}"),
                    stderr: format!(
                        "it can never start: PENDING ({reason}); see `scontrol show partition` and --slurm-arg, --timeout"
                    ),
                });
            }
            // Back in the queue with a start time to wait for, though the runner asks
            // for none and no requeue: its node failed to launch it.
            Seen::Pending(reason) if reason == "BeginTime" => {
                if let Ok(Some(fields)) = client.show(id).await {
                    let restarts = fields.get("Restarts").and_then(|r| r.parse().ok());
                    if restarts.is_some_and(|n: u32| n > 0) {
                        return Err(SlurmError::Refused {
                            command: format!("Slurm job {id}"),
                            stderr: format!(
                                "its node failed to launch it ({} tries, now PENDING (BeginTime)): check that your user, its groups and the tree exist on the compute nodes (the controller's log says why)",
                                restarts.unwrap_or(0) + 1
                            ),
                        });
                    }
                }
            }
            Seen::Pending(_) => {}
            Seen::Running => running(&mut running_since),
            Seen::Unreadable(e) => {
                return Err(SlurmError::Refused {
                    command: "squeue".into(),
                    stderr: e,
                })
            }
            // Out of the queue: how it ended is asked once.
            Seen::Left => match client.show(id).await {
                Err(e) => {
                    show_errors += 1;
                    if show_errors >= 30 {
                        return Err(e);
                    }
                }
                Ok(None) => break,
                Ok(Some(fields)) => {
                    let state = fields.get("JobState").cloned().unwrap_or_default();
                    let ran = fields.get("BatchHost").is_some_and(|h| h != "(null)");
                    last = fields;
                    if is_terminal(&state) {
                        if ran {
                            running(&mut running_since);
                        }
                        break;
                    }
                }
            },
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > CANCEL_WAIT) {
            break;
        }
        tokio::select! {
            _ = seen.changed() => {}
            _ = stop.changed(), if cancelled_at.is_none() => {}
            // The queue's reader is gone only with the backend; never wait blind.
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
    }
    let now = Instant::now();
    let (mut queued, ran, started_at) = match running_since {
        Some((i, t)) => (i - submitted, now - i, t),
        None => (now - submitted, Duration::ZERO, SystemTime::now()),
    };
    // Slurm's own clock says how long it waited, whatever the polls saw.
    if let Some(q) = queue_wait(&last) {
        queued = q;
    }
    Ok(Waited {
        id: id.to_string(),
        fields: last,
        cancelled,
        queued,
        ran,
        started_at,
    })
}

/// `StartTime - SubmitTime`, both in the controller's local time, when the job started.
fn queue_wait(fields: &JobFields) -> Option<Duration> {
    let at =
        |k: &str| chrono::NaiveDateTime::parse_from_str(fields.get(k)?, "%Y-%m-%dT%H:%M:%S").ok();
    let waited = at("StartTime")? - at("SubmitTime")?;
    waited.to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_wait_is_slurms_own_start_less_submit() {
        let f = crate::runner::slurm::parse_fields(
            "JobId=1 SubmitTime=2026-11-26T10:38:15 StartTime=2026-11-26T10:39:17",
        );
        assert_eq!(queue_wait(&f), Some(Duration::from_secs(62)));
        let never = crate::runner::slurm::parse_fields(
            "JobId=1 SubmitTime=2026-11-26T10:38:15 StartTime=Unknown",
        );
        assert_eq!(queue_wait(&never), None);
    }
}
