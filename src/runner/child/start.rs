//! Starting one attempt's process: cold (the interpreter, under bwrap when sandboxed,
//! or in the built-in sandbox made between fork and exec, with the cgroup joined
//! before exec) or warm (forked by the zygote, inside the sandbox or not). Either way the result is a PID that is
//! the runner's child, and the read ends of its output pipes.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::error::ZygoteError;
use crate::runner::attempt::{AttemptError, AttemptSpec, Start};
use crate::runner::identity::become_user;
use crate::runner::mountns::MountNamespace;
use crate::runner::mounts::MountStep;
use crate::runner::sys;
use crate::runner::zygote::{self, Zygote};
use crate::runner::{reaper, sandbox, seccomp};

/// Runs a script whose path is not valid UTF-8 (see the file for why).
const LAUNCH_ODD_NAME: &str = include_str!("../launch.py");

/// What a cold start holds open until the spawn: the seccomp programs' files, whose
/// descriptors bwrap passes on to `__sandbox-exec`.
type Held = Vec<std::fs::File>;

/// The command of a cold start. Under bwrap the program is `jax-runner
/// __sandbox-exec`, which finishes the sandbox and execs the interpreter; in the
/// built-in sandbox the child does the same work itself between fork and exec.
fn command(spec: &AttemptSpec) -> Result<(Command, Held), std::io::Error> {
    let filters: Held = match &spec.sandbox {
        Some(_) => spec
            .seccomp
            .iter()
            .map(std::fs::File::open)
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let filter_fds: Vec<i32> = filters.iter().map(|f| f.as_raw_fd()).collect();
    let mut builtin = None;
    let mut cmd = match &spec.sandbox {
        Some(sb) => match &sb.bwrap {
            Some((bwrap, args)) => {
                let mut c = Command::new(bwrap);
                c.args(args).arg(&sb.helper).arg(sandbox::EXEC_ARG);
                if let Some(u) = sb.user {
                    c.arg("--user").arg(format!("{}:{}", u.uid, u.gid));
                    for step in &sb.steps {
                        if let MountStep::Scratch(dir) = step {
                            c.arg("--own").arg(dir);
                        }
                    }
                }
                for fd in &filter_fds {
                    c.arg("--seccomp-fd").arg(fd.to_string());
                }
                c.arg("--").arg(&spec.python);
                c
            }
            None => {
                let programs = filters
                    .iter()
                    .map(|mut f| {
                        let mut bytes = Vec::new();
                        f.read_to_end(&mut bytes).map(|_| bytes)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // No steps: a container that allows no namespaces (see
                // `Sandboxing::Builtin`); the script still becomes the sandbox user.
                let ns = match sb.steps.is_empty() {
                    true => None,
                    false => Some(MountNamespace::new(&sb.steps, &spec.cwd, sb.user)?),
                };
                builtin = Some((ns, programs, sb.user));
                Command::new(&spec.python)
            }
        },
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
    // SAFETY: the closure makes system calls only (prctl, getppid, mount, open, write,
    // setresuid…) on buffers made before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Joined as the runner (root owns the cgroup files), before anything else.
            if let Some(cg) = &cgroup {
                cg.join_from_child()?;
            }
            if let Some((ns, programs, user)) = builtin.as_mut() {
                if let Some(ns) = ns {
                    ns.apply()?;
                }
                if let Some(u) = user {
                    become_user(u.uid, u.gid)?;
                }
                seccomp::apply_prepared(programs)?;
                // Whatever the runner holds stays out of the script.
                let _ = sys::cloexec_range(3);
            }
            // bwrap passes these to `__sandbox-exec`: they must survive the exec.
            for fd in &filter_fds {
                if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Last: a change of uid clears the death signal.
            reaper::die_with_parent(parent)
        });
    }
    Ok((cmd, filters))
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
        match zygote::warm_request(spec, zygote.sandboxed()) {
            Err(reason) => start = Start::ColdFallback(reason.to_string()),
            Ok(request) => match start_warm(spec, zygote, request).await {
                Ok(Ok((pid, out, err))) => return Ok((pid, out, err, Start::Warm)),
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
/// reach the cgroup files), so everything it starts is counted.
async fn start_warm(
    spec: &AttemptSpec,
    zygote: &Arc<Zygote>,
    request: zygote::WarmRequest,
) -> std::io::Result<Result<(libc::pid_t, OwnedFd, OwnedFd), ZygoteError>> {
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let null = std::fs::File::open("/dev/null")?;
    let go = if request.sandboxed() {
        Some(sys::pipe()?)
    } else {
        None
    };
    let mut fds = vec![null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    fds.extend(go.as_ref().map(|(r, _)| r.as_raw_fd()));
    let zygote = zygote.clone();
    let asked = tokio::task::spawn_blocking(move || {
        let reply = zygote.spawn(&request.borrow(), &fds);
        drop((null, out_w, err_w));
        reply
    })
    .await
    .unwrap_or_else(|e| Err(ZygoteError::Refused(e.to_string())));
    let pid = match asked {
        Ok(pid) => pid,
        Err(reason) => return Ok(Err(reason)),
    };
    if let Some((go_r, go_w)) = go {
        drop(go_r);
        let placed = match &spec.cgroup {
            Some(cg) => cg.join(pid),
            None => Ok(()),
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
