//! The Slurm backend: each attempt is one batch job, submitted with `sbatch
//! --parsable`, watched with `scontrol show job`, cancelled with `scancel` by its id.
//! The job runs `jax-runner __slurm-job REQUEST` on the compute node, which runs the
//! attempt as a local run would (the node's sandbox, the telemetry shim, the kernel's
//! figures) and leaves its record beside the request on the shared file system, so a
//! result has the same fields and classes as a local one (see `slurm/job.rs`).
//!
//! One job per attempt rather than one array per run: retries, the GPU→CPU fallback
//! and `--fail-fast` decide each next attempt from the last one's end, and a GPU
//! attempt retried on the CPU needs other resources than its array would hold.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use crate::error::SlurmError;

mod backend;
mod job;
mod outcome;
mod queue;
mod wait;

pub use backend::Slurm;
pub use job::{
    parse_marker, run_marker, write_new, NodeRecord, NodeRequest, JOB_ARG, NOT_SHARED_EXIT,
};
pub use outcome::{slurm_line, to_record};

/// `scontrol show job -o`'s fields for one job.
pub type JobFields = BTreeMap<String, String>;

/// The Slurm client commands, as found on `PATH`.
#[derive(Debug, Clone, Default)]
pub struct SlurmClient;

impl SlurmClient {
    /// Runs a client command to its end; its stdout, or why it failed.
    pub async fn command(&self, program: &str, args: &[OsString]) -> Result<String, SlurmError> {
        let shown = || {
            let mut s = program.to_string();
            for a in args.iter().take(6) {
                s.push(' ');
                s.push_str(&a.to_string_lossy());
            }
            s
        };
        let out = tokio::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), out)
            .await
            .map_err(|_| SlurmError::Refused {
                command: shown(),
                stderr: "no answer in 120 s (is slurmctld up?)".into(),
            })?
            .map_err(|source| SlurmError::Missing {
                command: shown(),
                source,
            })?;
        if !out.status.success() {
            return Err(SlurmError::Refused {
                command: shown(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits a batch script; the job's id.
    pub async fn submit(&self, args: Vec<OsString>) -> Result<String, SlurmError> {
        let mut all: Vec<OsString> = vec!["--parsable".into()];
        all.extend(args);
        let out = self.command("sbatch", &all).await?;
        // `--parsable` prints `id` or `id;cluster`.
        let id = out.trim().split(';').next().unwrap_or_default().to_string();
        match id.chars().all(|c| c.is_ascii_digit() || c == '_') && !id.is_empty() {
            true => Ok(id),
            false => Err(SlurmError::Refused {
                command: "sbatch --parsable".into(),
                stderr: format!("unexpected answer {:?}", out.trim()),
            }),
        }
    }

    /// The job's fields, or `None` once Slurm has forgotten it (`MinJobAge`).
    pub async fn show(&self, id: &str) -> Result<Option<JobFields>, SlurmError> {
        let args: Vec<OsString> = vec!["show".into(), "job".into(), "-o".into(), id.into()];
        match self.command("scontrol", &args).await {
            Ok(out) => Ok(out.lines().next().map(parse_fields)),
            Err(SlurmError::Refused { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Cancels one job by its id (never by name or user).
    pub async fn cancel(&self, id: &str) -> Result<(), SlurmError> {
        self.command("scancel", &[id.into()]).await.map(|_| ())
    }

    /// The jobs of this user still in the queue: (id, comment).
    pub async fn mine(&self) -> Result<Vec<(String, String)>, SlurmError> {
        let args: Vec<OsString> = vec!["-h".into(), "--me".into(), "-o".into(), "%i|%k".into()];
        let out = self.command("squeue", &args).await?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(id, comment)| (id.trim().to_string(), comment.trim().to_string()))
            .collect())
    }
}

/// `Key=Value Key=Value …` as `scontrol show job -o` prints it. A value may hold
/// spaces (a command, a reason): a word that does not start a `Key=` continues the
/// value before it.
pub fn parse_fields(line: &str) -> JobFields {
    let mut fields = JobFields::new();
    let mut last: Option<String> = None;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        let key = word.split_once('=').map(|(k, _)| k).filter(|k| {
            k.starts_with(|c: char| c.is_ascii_alphabetic())
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":/_".contains(c))
        });
        match (key, &last) {
            (Some(k), _) => {
                let value = &word[k.len() + 1..];
                fields.insert(k.to_string(), value.to_string());
                last = Some(k.to_string());
            }
            (None, Some(k)) => {
                if let Some(v) = fields.get_mut(k) {
                    v.push(' ');
                    v.push_str(word);
                }
            }
            (None, None) => {}
        }
    }
    fields
}

/// A job state Slurm will not leave.
pub fn is_terminal(state: &str) -> bool {
    !matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "CONFIGURING"
            | "COMPLETING"
            | "SUSPENDED"
            | "REQUEUED"
            | "REQUEUE_HOLD"
            | "REQUEUE_FED"
            | "RESIZING"
            | "SIGNALING"
            | "STAGE_OUT"
            | "STOPPED"
            | "RESV_DEL_HOLD"
            | ""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_values_with_spaces_whole() {
        let f = parse_fields(
            "JobId=12 JobName=jax-runner:a b JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 Command=/tmp/my dir/job.sh TRES=cpu=1,mem=10M ReqB:S:C:T=0:0:*:*",
        );
        assert_eq!(f["JobId"], "12");
        assert_eq!(f["JobName"], "jax-runner:a b");
        assert_eq!(f["JobState"], "FAILED");
        assert_eq!(f["ExitCode"], "3:0");
        assert_eq!(f["Command"], "/tmp/my dir/job.sh");
        assert_eq!(f["TRES"], "cpu=1,mem=10M");
        assert_eq!(f["ReqB:S:C:T"], "0:0:*:*");
    }

    #[test]
    fn only_ending_states_are_terminal() {
        for s in [
            "PENDING",
            "RUNNING",
            "COMPLETING",
            "CONFIGURING",
            "REQUEUED",
        ] {
            assert!(!is_terminal(s), "{s}");
        }
        for s in [
            "COMPLETED",
            "FAILED",
            "TIMEOUT",
            "CANCELLED",
            "NODE_FAIL",
            "PREEMPTED",
            "OUT_OF_MEMORY",
            "BOOT_FAIL",
            "DEADLINE",
        ] {
            assert!(is_terminal(s), "{s}");
        }
    }
}
