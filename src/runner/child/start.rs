//! Starting one attempt's process: cold (the interpreter; sandboxed, through `jax-runner
//! __sandbox-exec`, under bwrap or alone, with the cgroup joined before exec) or warm
//! (forked by the zygote, in a view of its own or not). Either way the result is a PID
//! that is the runner's child, and the read ends of its output pipes.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::error::ZygoteError;
use crate::runner::attempt::{AttemptError, AttemptSpec, Start};
use crate::runner::reaper;
use crate::runner::sys;
use crate::runner::zygote::{self, Zygote};
use crate::sandbox::bwrap;

/// Runs a script whose path is not valid UTF-8 (see the file for why).
const LAUNCH_ODD_NAME: &str = include_str!("../launch.py");

/// What a cold start holds open until the spawn: the sandbox's plan and the seccomp
/// programs, whose descriptors `__sandbox-exec` reads (bwrap passes them on).
type Held = Vec<OwnedFd>;

/// The command of a cold start. Sandboxed, the program is `jax-runner
/// __sandbox-exec` (inside bwrap, or in its place for the built-in layer alone), which
/// applies the attempt's confinement and execs the interpreter.
fn command(spec: &AttemptSpec) -> Result<(Command, Held), std::io::Error> {
    let mut held: Held = Vec::new();
    let mut cmd = match &spec.sandbox {
        Some(sb) => {
            let mut c = match &sb.bwrap {
                Some((bwrap, args)) => {
                    let mut c = Command::new(bwrap);
                    c.args(args).arg(&sb.helper);
                    c
                }
                None => Command::new(&sb.helper),
            };
            c.arg(bwrap::EXEC_ARG);
            let plan = sb.confine.to_memfd()?;
            c.arg("--plan-fd").arg(plan.as_raw_fd().to_string());
            held.push(plan);
            for file in spec.seccomp.to_memfds()? {
                c.arg("--seccomp-fd").arg(file.as_raw_fd().to_string());
                held.push(file);
            }
            c.arg("--").arg(&spec.python);
            c
        }
        None => Command::new(&spec.python),
    };
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
    if spec.env_clear {
        cmd.env_clear();
    }
    for key in spec.env_remove {
        cmd.env_remove(key);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    cmd.env(reaper::TOKEN_VAR, &spec.token);
    let parent = std::process::id() as libc::pid_t;
    let cgroup = spec.cgroup.clone();
    let passed: Vec<i32> = held.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure makes system calls only (prctl, getppid, open, write, fcntl)
    // and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Joined as the runner (root owns the cgroup files), before anything else.
            if let Some(cg) = &cgroup {
                cg.join_from_child()?;
            }
            // `__sandbox-exec` reads these: they must survive the exec.
            for fd in &passed {
                if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            reaper::die_with_parent(parent)
        });
    }
    Ok((cmd, held))
}

/// Starts the script, warm when a zygote is there and can honour everything the
/// attempt needs, cold otherwise. Returns its PID (our child either way), its stdout
/// and stderr read ends, and how it started.
pub(super) async fn start(
    spec: &AttemptSpec,
    zygote: Option<&Arc<Zygote>>,
) -> Result<(libc::pid_t, OwnedFd, OwnedFd, Start), AttemptError> {
    let spawn_error = |source| AttemptError::Spawn {
        python: spec.python.clone(),
        script: spec.script.clone(),
        source,
    };
    let mut start = Start::Cold;
    if let Some(zygote) = zygote {
        match zygote::warm_request(spec, zygote) {
            Err(reason) => start = Start::ColdFallback(reason.to_string()),
            Ok(request) => match start_warm(spec, zygote, request).await {
                Ok(Ok((pid, out, err))) => {
                    // The log's timestamps then show how long the first scripts waited
                    // after the zygote's ready (`bench/turns.sh` reads them).
                    tracing::debug!("warm start: forked {} as pid {pid}", spec.script.display());
                    return Ok((pid, out, err, Start::Warm));
                }
                Ok(Err(reason)) => {
                    start = Start::ColdFallback(format!("the zygote failed: {reason}"))
                }
                Err(e) => return Err(spawn_error(e)),
            },
        }
    }
    let (mut cmd, _filter) = command(spec).map_err(spawn_error)?;
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let pid = child.id() as libc::pid_t;
    let out = child.stdout.take().expect("piped").into();
    let err = child.stderr.take().expect("piped").into();
    // std's Child neither waits nor kills on drop; wait4 reaps it with its rusage.
    drop(child);
    Ok((pid, out, err, start))
}

/// Asks the zygote for the script. Inside the sandbox the new process waits for the
/// runner's go: the runner first places it in the attempt's cgroup (the script cannot
/// reach the cgroup files), so everything it starts is counted; a slot's zygote forked
/// it there already.
async fn start_warm(
    spec: &AttemptSpec,
    zygote: &Arc<Zygote>,
    request: zygote::WarmRequest,
) -> std::io::Result<Result<(libc::pid_t, OwnedFd, OwnedFd), ZygoteError>> {
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let null = std::fs::File::open("/dev/null")?;
    let (go_r, go_w) = match request.waits_for_go() {
        true => sys::pipe().map(|(r, w)| (Some(r), Some(w)))?,
        false => (None, None),
    };
    let resident = zygote.resident();
    let zygote = zygote.clone();
    // The zygote has its copies once the request is sent: ours close with the closure.
    let asked = tokio::task::spawn_blocking(move || {
        let mut fds = vec![null.as_fd(), out_w.as_fd(), err_w.as_fd()];
        fds.extend(go_r.as_ref().map(|r| r.as_fd()));
        zygote.spawn(&request.borrow(), &fds)
    })
    .await
    .unwrap_or_else(|e| Err(ZygoteError::Refused(e.to_string())));
    let pid = match asked {
        Ok(pid) => pid,
        Err(reason) => return Ok(Err(reason)),
    };
    if let Some(go_w) = go_w {
        let placed = match &spec.cgroup {
            Some(cg) if !resident => cg.join(pid),
            _ => Ok(()),
        };
        if let Err(e) = placed {
            // Without its go the process exits at once; reap it and start cold.
            drop(go_w);
            let _ = tokio::task::spawn_blocking(move || sys::wait4(pid)).await;
            return Ok(Err(ZygoteError::Cgroup(e)));
        }
        std::fs::File::from(go_w).write_all(b"g")?;
    }
    Ok(Ok((pid, out_r, err_r)))
}
