//! The Slurm [`Backend`]: an attempt's request and batch script written beside the
//! run's results (the file system the nodes share), the job submitted and waited for,
//! and the node's record (or Slurm's account) made the attempt's outcome.

use std::path::{Path, PathBuf};

use tokio::sync::watch;

use super::job::{self, NodeRecord, NodeRequest, Submission};
use super::wait::{self, Progress};
use super::{outcome, SlurmClient};
use crate::error::SlurmError;
use crate::model::{Platform, SlurmJob};
use crate::runner::attempt::{AttemptError, AttemptFuture, AttemptRequest, Backend, StoppedBy};
use crate::runner::backends::sanitize;
use crate::runner::Stop;

/// Scripts as Slurm batch jobs.
#[derive(Debug)]
pub struct Slurm {
    pub client: SlurmClient,
    pub options: crate::config::SlurmOptions,
    /// This binary, run by every job on its node.
    pub exe: PathBuf,
    /// The run's folder of requests, batch scripts and records.
    pub jobs_dir: PathBuf,
    /// Every job's `--comment`: which runner it belongs to.
    pub marker: String,
    /// The node's run options as a command line, without `--device`.
    pub node_argv: Vec<String>,
    /// `--grace`.
    pub grace: std::time::Duration,
    /// The run's one reader of the queue.
    pub queue: super::queue::Queue,
}

impl Drop for Slurm {
    /// The run's jobs folder goes with it (each attempt's files are removed as it
    /// ends), and `.slurm` when no other run's is in it.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.jobs_dir);
        if let Some(parent) = self.jobs_dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// One attempt's files in the jobs folder.
struct Files {
    request: PathBuf,
    record: PathBuf,
    script: PathBuf,
    slurm_out: PathBuf,
    marker: PathBuf,
}

impl Files {
    fn of(jobs_dir: &Path, req: &AttemptRequest<'_>) -> Files {
        let base = format!("{}.{}", sanitize(&req.script.id), req.number);
        let at = |ext: &str| jobs_dir.join(format!("{base}.{ext}"));
        Files {
            request: at("request.json"),
            record: at("record.json"),
            script: at("sh"),
            slurm_out: at("slurm.out"),
            marker: req.data_dir.join(format!(".jax-runner-slurm-{base}")),
        }
    }

    fn remove(&self) {
        for f in [
            &self.request,
            &self.record,
            &self.script,
            &self.slurm_out,
            &self.marker,
        ] {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Slurm {
    fn request(&self, req: &AttemptRequest<'_>, files: &Files) -> NodeRequest {
        let mut argv = self.node_argv.clone();
        argv.extend(["--device".into(), req.platform.as_str().to_string()]);
        NodeRequest {
            version: env!("CARGO_PKG_VERSION").into(),
            argv,
            id: req.script.id.clone(),
            script: req.script.path.clone(),
            relative_path: req.script.relative_path.clone(),
            number: req.number,
            platform: req.platform,
            data_dir: req.data_dir.to_path_buf(),
            stdout_log: req.stdout_log.to_path_buf(),
            stderr_log: req.stderr_log.to_path_buf(),
            timeout_s: req.settings.timeout.as_secs_f64(),
            memory_limit: req.settings.memory_limit,
            env: req.settings.env.clone(),
            marker: files.marker.clone(),
            record: files.record.clone(),
        }
    }

    /// Writes the attempt's files; the job's `sbatch` arguments.
    fn write(&self, req: &AttemptRequest<'_>, files: &Files) -> Result<(), SlurmError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SlurmError::Files { path, source }
        };
        files.remove();
        let request =
            serde_json::to_vec_pretty(&self.request(req, files)).expect("a request serializes");
        job::write_new(&files.request, &request).map_err(err(&files.request))?;
        let script = job::batch_script(&self.exe, &files.request);
        job::write_new(&files.script, script.as_bytes()).map_err(err(&files.script))?;
        job::write_new(&files.marker, b"").map_err(err(&files.marker))?;
        Ok(())
    }
}

/// The node's record, when it left one; a shared file system may show it a moment
/// after the job's end.
async fn read_record(path: &Path, wait: bool) -> Option<NodeRecord> {
    for _ in 0..if wait { 20 } else { 1 } {
        if let Ok(bytes) = crate::confined::read_in(path, 64 * 1024 * 1024) {
            if let Ok(r) = serde_json::from_slice(&bytes) {
                return Some(r);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    None
}

/// The job ran on a node that does not see the runner's files: jax-runner there said
/// so (its own exit code), or the job failed with no output file here, which Slurm
/// opens on the node before anything runs (the job's `--output` is in the jobs
/// folder, beside the request).
fn not_shared(job: &SlurmJob, slurm_out: &Path) -> bool {
    let said = job.exit_code.as_deref() == Some(&format!("{}:0", job::NOT_SHARED_EXIT));
    said || (job.state == "FAILED" && !slurm_out.exists())
}

impl Backend for Slurm {
    fn run<'a>(
        &'a self,
        req: AttemptRequest<'a>,
        stop: watch::Receiver<Stop>,
    ) -> AttemptFuture<'a> {
        Box::pin(async move {
            let files = Files::of(&self.jobs_dir, &req);
            self.write(&req, &files).map_err(AttemptError::Slurm)?;
            let cwd = req.script.path.parent().unwrap_or(Path::new("/"));
            let args = job::sbatch_args(&Submission {
                name: format!("jax-runner:{}", req.script.id),
                comment: &self.marker,
                script: &files.script,
                slurm_out: &files.slurm_out,
                cwd,
                limit: req.settings.timeout + self.grace,
                memory_limit: req.settings.memory_limit,
                gpu: req.platform == Platform::Gpu,
                options: &self.options,
            });
            let progress = Progress {
                events: req.events,
                id: &req.script.id,
                attempt: req.number,
            };
            let waited =
                wait::submit_and_wait(&self.client, &self.queue, args, stop, progress).await;
            let waited = match waited {
                Ok(w) => w,
                Err(e) => {
                    files.remove();
                    return Err(AttemptError::Slurm(e));
                }
            };
            let field = |k: &str| waited.fields.get(k).cloned().filter(|v| v != "(null)");
            let job = SlurmJob {
                job_id: waited.id.clone(),
                state: field("JobState").unwrap_or_else(|| "UNKNOWN".into()),
                reason: field("Reason"),
                node: field("BatchHost").or_else(|| field("NodeList")),
                exit_code: field("ExitCode"),
                queued_s: waited.queued.as_secs_f64(),
                cancelled: waited.cancelled,
                ..Default::default()
            };
            let ran = !matches!(job.state.as_str(), "CANCELLED" | "UNKNOWN")
                || waited.ran > std::time::Duration::ZERO;
            let record = read_record(&files.record, ran).await;
            let done = match record {
                Some(r) if r.error.is_some() => Err(AttemptError::Slurm(SlurmError::Refused {
                    command: format!("jax-runner on {}", r.node),
                    stderr: r.error.unwrap_or_default(),
                })),
                Some(r) => {
                    let mut done = outcome::from_record(r, req.stderr_log, job);
                    // Slurm signals every process of a job it cancels, the script's
                    // too: what the node saw end it was this run's stop.
                    if waited.cancelled {
                        done.outcome.stopped_by = Some(StoppedBy::Interrupt);
                    }
                    Ok(done)
                }
                None if not_shared(&job, &files.slurm_out) => {
                    Err(AttemptError::Slurm(SlurmError::NotShared {
                        node: job.node.clone().unwrap_or_else(|| "?".into()),
                        path: req.data_dir.to_path_buf(),
                    }))
                }
                None => Ok(outcome::from_state(
                    job,
                    &files.slurm_out,
                    req.stderr_log,
                    waited.ran,
                    waited.started_at,
                    waited.cancelled,
                )),
            };
            files.remove();
            done
        })
    }
}
