//! One `squeue -j <ids>` for all of a run's jobs in flight, once a second, instead of a
//! call per job: a cluster's controller is asked the same however wide the run. Each job's
//! waiter gets what every poll saw of it; how a job ended is then asked once, with
//! `scontrol show job`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::{is_terminal, SlurmClient};

/// How often the queue is read.
const POLL: Duration = Duration::from_secs(1);
/// Failed reads in a row before every waiter is told the controller is gone.
const MAX_ERRORS: u32 = 30;

/// What a poll saw of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Submitted; no poll has read the queue since.
    Submitted,
    /// Waiting in the queue, with Slurm's reason (`Resources`, `Priority`, …).
    Pending(String),
    /// On its node (running, or being set up or torn down there).
    Running,
    /// No longer among this user's jobs in the queue: it ended.
    Left,
    /// The queue could not be read [`MAX_ERRORS`] times in a row: why.
    Unreadable(String),
}

type Waiters = Mutex<HashMap<String, watch::Sender<Seen>>>;

/// The run's reader of the queue, started at the first job it is asked to watch and
/// ended when the backend goes.
#[derive(Debug, Default)]
pub struct Queue {
    waiters: Arc<Waiters>,
    started: std::sync::OnceLock<()>,
}

impl Queue {
    /// What the polls see of job `id`, from the next one on.
    pub fn watch(&self, id: &str) -> watch::Receiver<Seen> {
        let (tx, rx) = watch::channel(Seen::Submitted);
        self.waiters
            .lock()
            .expect("the waiters' lock")
            .insert(id.to_string(), tx);
        self.started.get_or_init(|| {
            tokio::spawn(read_queue(Arc::downgrade(&self.waiters)));
        });
        rx
    }

    /// Job `id` is no longer waited for.
    pub fn forget(&self, id: &str) {
        self.waiters.lock().expect("the waiters' lock").remove(id);
    }
}

/// Reads the queue once a second while jobs are waited for, until the [`Queue`] goes.
async fn read_queue(waiters: Weak<Waiters>) {
    let client = SlurmClient;
    let mut errors = 0;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        let ids: Vec<String> = (waiters.lock().expect("the waiters' lock").keys())
            .cloned()
            .collect();
        if ids.is_empty() {
            continue;
        }
        let read = listed(&client, &ids).await;
        let waiters = waiters.lock().expect("the waiters' lock");
        match read {
            Ok(jobs) => {
                errors = 0;
                for (id, tx) in waiters.iter() {
                    tx.send_replace(seen(jobs.get(id.as_str())));
                }
            }
            Err(e) => {
                errors += 1;
                if errors >= MAX_ERRORS {
                    for tx in waiters.values() {
                        tx.send_replace(Seen::Unreadable(e.clone()));
                    }
                }
            }
        }
    }
}

/// The jobs `ids` that are still in the queue: id → (state, reason). By their ids,
/// not by user: a login node that cannot name the user still answers.
async fn listed(
    client: &SlurmClient,
    ids: &[String],
) -> Result<HashMap<String, (String, String)>, String> {
    let args: Vec<OsString> = vec![
        "-h".into(),
        "-j".into(),
        ids.join(",").into(),
        "-o".into(),
        "%i|%T|%r".into(),
    ];
    match client.command("squeue", &args).await {
        Ok(out) => Ok(parse(&out)),
        // Every one of them is gone (squeue refuses a list of none it knows).
        Err(crate::error::SlurmError::Refused { stderr, .. })
            if stderr.contains("Invalid job id") =>
        {
            Ok(HashMap::new())
        }
        Err(e) => Err(e.to_string()),
    }
}

fn parse(out: &str) -> HashMap<String, (String, String)> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            let (id, state, reason) = (f.next()?, f.next()?, f.next().unwrap_or(""));
            Some((
                id.trim().into(),
                (state.trim().into(), reason.trim().into()),
            ))
        })
        .collect()
}

fn seen(job: Option<&(String, String)>) -> Seen {
    match job {
        None => Seen::Left,
        Some((state, reason)) if state == "PENDING" => Seen::Pending(reason.clone()),
        Some((state, _)) if is_terminal(state) => Seen::Left,
        Some(_) => Seen::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_reads_each_jobs_state_and_a_job_gone_from_the_queue_left_it() {
        let jobs =
            parse("41|PENDING|Resources\n42|RUNNING|None\n43|COMPLETING|None\n44|COMPLETED|None\n");
        assert_eq!(seen(jobs.get("41")), Seen::Pending("Resources".into()));
        assert_eq!(seen(jobs.get("42")), Seen::Running);
        assert_eq!(seen(jobs.get("43")), Seen::Running);
        assert_eq!(seen(jobs.get("44")), Seen::Left);
        assert_eq!(seen(jobs.get("45")), Seen::Left);
    }
}
