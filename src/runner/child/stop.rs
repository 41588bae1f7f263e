//! How the runner stops a script (its timeout, Ctrl-C): its Python stacks first, then
//! SIGTERM, then SIGKILL once the grace period is over. The stacks come on a signal of
//! their own, which the telemetry shim hands to faulthandler, so a script that handles,
//! ignores or blocks SIGTERM (a checkpoint saved on the way out, a framework's or a C
//! library's own handler) still says where its time ran out, and says it before any
//! handler of its own has run.

use std::time::Duration;

use tokio::time::Instant;

use crate::runner::attempt::AttemptSpec;
use crate::runner::{sys, tree};

/// The signal the shim registers with faulthandler (`faulthandler.register(62, …)` in
/// `telemetry/sitecustomize.py`): a real-time signal near the top of the range, which
/// neither glibc (it keeps the bottom two) nor the libraries jax scripts load take.
/// Its default action would kill, so it goes only to a process that catches it.
pub const STACKS_SIGNAL: libc::c_int = 62;
/// The longest the stacks may keep SIGTERM waiting: a process in uninterruptible sleep,
/// or one that blocks the signal, never takes it.
const STACKS_WAIT: Duration = Duration::from_millis(500);
/// How often delivery is looked at.
const POLL: Duration = Duration::from_millis(10);
/// From the signal's delivery until SIGTERM: faulthandler's handler masks no signal,
/// so a SIGTERM that came while it wrote would cut the stacks short. Writing them takes
/// microseconds to a few milliseconds.
const WRITE_TIME: Duration = Duration::from_millis(50);

/// Where a stop is: asking for the stacks, then SIGTERM sent and SIGKILL due.
#[derive(Debug)]
pub enum Stopping {
    /// Nothing asked yet.
    Running,
    /// The stacks were asked of `asked`; SIGTERM follows once they have taken it.
    Asking {
        asked: Vec<u32>,
        since: Instant,
        delivered: bool,
        next: Instant,
    },
    /// SIGTERM sent; SIGKILL to the group at `kill_at`.
    Terminated { kill_at: Instant },
    /// SIGKILL sent.
    Killed,
}

impl Stopping {
    /// Begins the polite stop of the script whose first process is `pid`: the stacks
    /// are asked of every process of its tree that catches the signal (`plumbing`, a
    /// warm sandbox's init, is the runner's). With none to ask, SIGTERM goes at once.
    pub fn begin(pid: libc::pid_t, spec: &AttemptSpec, plumbing: Option<u32>) -> Stopping {
        let now = Instant::now();
        let asked: Vec<u32> = script_pids(pid, spec)
            .into_iter()
            .filter(|p| Some(*p) != plumbing && catches(*p, STACKS_SIGNAL))
            .filter(|p| sys::signal_raw(*p as libc::pid_t, STACKS_SIGNAL))
            .collect();
        if asked.is_empty() {
            return terminate(pid, spec);
        }
        tracing::debug!(
            pid,
            asked = asked.len(),
            "stop: the script's stacks asked for"
        );
        Stopping::Asking {
            asked,
            since: now,
            delivered: false,
            next: now + POLL,
        }
    }

    /// When the next step is due; `None` while running or once killed.
    pub fn due(&self) -> Option<Instant> {
        match self {
            Stopping::Asking { next, .. } => Some(*next),
            Stopping::Terminated { kill_at } => Some(*kill_at),
            Stopping::Running | Stopping::Killed => None,
        }
    }

    /// The step that is due: looks at the stacks' delivery again, or sends SIGTERM once
    /// they are written (or waited for long enough), or SIGKILL at the grace's end.
    pub fn advance(&mut self, pid: libc::pid_t, spec: &AttemptSpec) {
        let now = Instant::now();
        *self = match std::mem::replace(self, Stopping::Killed) {
            Stopping::Asking {
                asked,
                since,
                delivered,
                ..
            } => {
                let waiting = asked
                    .iter()
                    .any(|p| !sys::ended(*p) && pending(*p, STACKS_SIGNAL));
                if now >= since + STACKS_WAIT || (delivered && !waiting) {
                    terminate(pid, spec)
                } else {
                    Stopping::Asking {
                        delivered: !waiting,
                        next: now + if waiting { POLL } else { WRITE_TIME },
                        asked,
                        since,
                    }
                }
            }
            Stopping::Terminated { .. } => self::kill(pid),
            other => other,
        };
    }
}

/// SIGKILL to the script's process group, at once.
pub fn kill(pid: libc::pid_t) -> Stopping {
    sys::kill_group(pid, libc::SIGKILL);
    Stopping::Killed
}

/// SIGTERM to the script's processes, SIGKILL due after the grace period.
fn terminate(pid: libc::pid_t, spec: &AttemptSpec) -> Stopping {
    tracing::debug!(pid, "stop: SIGTERM to the script's processes");
    match spec.sandbox.as_ref().and_then(|sb| sb.bwrap_path()) {
        None => sys::kill_group(pid, libc::SIGTERM),
        Some(_) => script_pids(pid, spec)
            .into_iter()
            .for_each(|p| sys::kill_pid(p as libc::pid_t, libc::SIGTERM)),
    }
    Stopping::Terminated {
        kill_at: Instant::now() + spec.grace,
    }
}

/// The script's processes: its tree, less bubblewrap itself, which must not be
/// signalled: it would die at once and its PID namespace with it, taking the script's
/// grace period and stacks away.
fn script_pids(pid: libc::pid_t, spec: &AttemptSpec) -> Vec<u32> {
    let bwrap = spec.sandbox.as_ref().and_then(|sb| sb.bwrap_path());
    let mut pids = tree::tree_pids(pid as u32);
    if let Some(bwrap) = bwrap {
        pids.retain(|p| {
            std::fs::read_link(format!("/proc/{p}/exe")).ok().as_deref() != Some(bwrap)
        });
    }
    pids
}

/// Whether `pid` has a handler for `signal` (`SigCgt` in its status).
pub fn catches(pid: u32, signal: libc::c_int) -> bool {
    status(pid).is_some_and(|s| sys::status_has_signal(&s, "SigCgt:", signal))
}

/// Whether `signal` waits, undelivered, for `pid` or its main thread.
fn pending(pid: u32, signal: libc::c_int) -> bool {
    status(pid).is_some_and(|s| sys::signal_pending_in(&s, signal))
}

fn status(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

#[cfg(test)]
mod tests;
