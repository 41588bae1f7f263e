//! One attempt of one script: the single place children are spawned. The child gets
//! null stdin, piped output streamed to log files, its own process group, and is
//! stopped as a group: SIGTERM, a grace period, then SIGKILL.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant as TokioInstant};

use super::output::{drain, Drained};
use super::sys::{self, Exit};
use super::tree::TreeSampler;
use super::Stop;

/// Runs a script whose path is not valid UTF-8 (see the file for why).
const LAUNCH_ODD_NAME: &str = include_str!("launch.py");
/// How often the tree's memory is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long to wait, after the script exits, for its output pipes to close.
const PIPE_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Everything one attempt needs.
#[derive(Debug, Clone)]
pub struct AttemptSpec {
    pub python: PathBuf,
    pub script: PathBuf,
    pub cwd: PathBuf,
    pub env: Vec<(&'static str, OsString)>,
    pub env_remove: &'static [&'static str],
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    pub timeout: Duration,
    pub grace: Duration,
}

/// Why the runner stopped the attempt, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoppedBy {
    Timeout,
    Interrupt,
}

/// What happened.
#[derive(Debug)]
pub struct AttemptOutcome {
    pub started_at: SystemTime,
    pub duration: Duration,
    pub exit: Exit,
    pub stopped_by: Option<StoppedBy>,
    /// Peak RSS of the tree (sampled), or of the process itself (kernel), if higher.
    pub peak_rss_bytes: u64,
    pub stdout: Drained,
    pub stderr: Drained,
    /// Output pipes were still held open after the script exited (a leftover process).
    pub pipes_left_open: bool,
}

/// The attempt could not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("failed to create log file {path}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to start {python} for {script}")]
    Spawn {
        python: PathBuf,
        script: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to wait for the script process")]
    Wait(#[source] std::io::Error),
}

fn open_log(path: &Path) -> Result<std::fs::File, SpawnError> {
    std::fs::File::create(path).map_err(|source| SpawnError::Log {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs one attempt to its end, honouring the timeout and stop requests.
pub async fn run_attempt(
    spec: &AttemptSpec,
    mut stop: watch::Receiver<Stop>,
) -> Result<AttemptOutcome, SpawnError> {
    let stdout_file = open_log(&spec.stdout_log)?;
    let stderr_file = open_log(&spec.stderr_log)?;
    let mut cmd = Command::new(&spec.python);
    if spec.script.to_str().is_some() {
        cmd.arg(&spec.script);
    } else {
        cmd.arg("-c").arg(LAUNCH_ODD_NAME).arg(&spec.script);
    }
    cmd.current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a stop reaches every process the script started.
        .process_group(0);
    for key in spec.env_remove {
        cmd.env_remove(key);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));

    let started_at = SystemTime::now();
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| SpawnError::Spawn {
        python: spec.python.clone(),
        script: spec.script.clone(),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    let out_task = drain(child.stdout.take().expect("piped"), stdout_file, 0);
    let err_task = drain(child.stderr.take().expect("piped"), stderr_file, 40);
    // std's Child neither waits nor kills on drop; wait4 reaps it with its rusage.
    drop(child);
    let mut waiter = tokio::task::spawn_blocking(move || sys::wait4(pid));

    let mut sampler = TreeSampler::default();
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    let deadline = TokioInstant::now() + spec.timeout;
    let mut stopped_by = None;
    let mut kill_at: Option<TokioInstant> = None;
    let far = TokioInstant::now() + Duration::from_secs(365 * 24 * 3600);

    let exit = loop {
        tokio::select! {
            res = &mut waiter => {
                break res
                    .map_err(|e| SpawnError::Wait(std::io::Error::other(e)))?
                    .map_err(SpawnError::Wait)?;
            }
            _ = ticker.tick() => {
                sampler.sample(pid as u32);
            }
            _ = sleep_until(deadline), if stopped_by.is_none() => {
                tracing::debug!(pid, "timeout: SIGTERM to the process group");
                stopped_by = Some(StoppedBy::Timeout);
                sys::kill_group(pid, libc::SIGTERM);
                kill_at = Some(TokioInstant::now() + spec.grace);
            }
            _ = sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                tracing::debug!(pid, "grace period over: SIGKILL to the process group");
                sys::kill_group(pid, libc::SIGKILL);
                kill_at = None;
            }
            changed = stop.changed() => {
                if changed.is_err() {
                    continue; // the controller is gone; nothing more will come
                }
                let level = *stop.borrow_and_update();
                match level {
                    Stop::Run => {}
                    Stop::Graceful => {
                        if stopped_by.is_none() {
                            stopped_by = Some(StoppedBy::Interrupt);
                            sys::kill_group(pid, libc::SIGTERM);
                            kill_at = Some(TokioInstant::now() + spec.grace);
                        }
                    }
                    Stop::Kill => {
                        stopped_by.get_or_insert(StoppedBy::Interrupt);
                        sys::kill_group(pid, libc::SIGKILL);
                        kill_at = None;
                    }
                }
            }
        }
    };
    let duration = started.elapsed();
    if stopped_by.is_some() {
        // Whatever the group left behind goes with it.
        sys::kill_group(pid, libc::SIGKILL);
    }

    let (stdout, stderr, pipes_left_open) = collect_output(pid, out_task, err_task).await;
    Ok(AttemptOutcome {
        started_at,
        duration,
        peak_rss_bytes: sampler.peak_bytes.max(exit.max_rss_bytes),
        exit,
        stopped_by,
        stdout,
        stderr,
        pipes_left_open,
    })
}

/// Waits for both pipes to reach end-of-file. A process that outlived the script and
/// still holds them is killed with the group so the logs end and the runner moves on.
async fn collect_output(
    pgid: libc::pid_t,
    mut out_task: tokio::task::JoinHandle<Drained>,
    mut err_task: tokio::task::JoinHandle<Drained>,
) -> (Drained, Drained, bool) {
    let both = async { ((&mut out_task).await, (&mut err_task).await) };
    let (out, err, left_open) = match tokio::time::timeout(PIPE_CLOSE_WAIT, both).await {
        Ok((o, e)) => (o, e, false),
        Err(_) => {
            sys::kill_group(pgid, libc::SIGKILL);
            match tokio::time::timeout(PIPE_CLOSE_WAIT, async {
                ((&mut out_task).await, (&mut err_task).await)
            })
            .await
            {
                Ok((o, e)) => (o, e, true),
                Err(_) => {
                    // Held by a process outside the group: stop reading and move on.
                    out_task.abort();
                    err_task.abort();
                    (Ok(Drained::default()), Ok(Drained::default()), true)
                }
            }
        }
    };
    (out.unwrap_or_default(), err.unwrap_or_default(), left_open)
}
