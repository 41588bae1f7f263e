//! The zygote's wire: a request as it goes out (with the run's baseline), the word on
//! what to make ahead said while it imports, the lines the zygote answers (ready, a
//! PID, how a slot's script ended) and the wait for them, the descriptors sent beside
//! a request, and the wait for a script whose zygote died before saying how it ended.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Deserialize;

use super::{Baseline, Request};
use crate::error::ZygoteError;

/// A request as it goes on the wire: the attempt's, and the run's baseline.
#[derive(serde::Serialize)]
pub(super) struct Wire<'a> {
    #[serde(flatten)]
    pub request: &'a Request<'a>,
    pub baseline: &'a Baseline,
    /// The zygote makes the MLIR context its scripts' lowerings share before this fork,
    /// if not yet (see `make_ir_context_ahead` in zygote.py and `app/ahead.rs`).
    pub ir_context: bool,
    /// The zygote moves its heap into 2 MiB pages before this fork, if not yet (a run
    /// of many scripts; see `collapse_into_huge_pages` in zygote.py).
    pub huge_pages: bool,
}

/// What a zygote makes before its next fork, once, for the run's scripts, shared by
/// the zygote's handle and its slots' (a clone, taken when the slot is made).
#[derive(Debug, Default)]
pub struct Ahead {
    /// The MLIR context its scripts' lowerings share.
    context: AtomicBool,
    /// Its heap in 2 MiB pages, for a run of enough scripts that the cheaper forks
    /// repay the move (see `HUGE_PAGES_FROM` in `app/ahead.rs`).
    huge_pages: AtomicBool,
}

impl Ahead {
    pub(super) fn add(&self, what: Made) {
        self.context.fetch_or(what.context, Ordering::Relaxed);
        self.huge_pages.fetch_or(what.huge_pages, Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> Made {
        Made {
            context: self.context.load(Ordering::Relaxed),
            huge_pages: self.huge_pages.load(Ordering::Relaxed),
        }
    }
}

impl Clone for Ahead {
    fn clone(&self) -> Ahead {
        let made = self.get();
        Ahead {
            context: AtomicBool::new(made.context),
            huge_pages: AtomicBool::new(made.huge_pages),
        }
    }
}

impl super::Zygote {
    /// Waits (blocking) for the end of `pid`, a script this slot's zygote forked as its
    /// own child: how it ended and its resource usage, as the zygote's `wait4` gave
    /// them. Should the zygote be gone, the script is the runner's now (a subreaper
    /// adopts it), and the runner waits for it itself.
    pub fn wait_exit(&self, pid: libc::pid_t) -> std::io::Result<crate::runner::sys::Exit> {
        let line = {
            let mut guard = self
                .channel
                .lock()
                .map_err(|_| std::io::Error::other("the zygote's channel is poisoned"))?;
            let reader = &mut guard.1;
            reader.get_ref().set_read_timeout(None).ok();
            let mut line = String::new();
            reader.read_line(&mut line).map(|_| line)
        };
        match line
            .ok()
            .and_then(|l| serde_json::from_str::<Ended>(&l).ok())
        {
            Some(Ended { exit: Some(e) }) => Ok(e.into_exit()),
            _ => wait_adopted(pid),
        }
    }

    /// Before its next fork the zygote makes `what`, once, so every script it (or a
    /// slot's zygote forked after) starts finds it made.
    pub fn prepare(&self, what: Made) {
        self.ahead.add(what);
    }

    /// Tells the zygote, while it still imports jax, what to make before its first
    /// fork, so it makes it as soon as it is ready instead of at the runner's first
    /// request: the history's sweep, the reporters' start and the slots' set-up then
    /// run beside its making, not before it. Once, before [`Zygote::wait_ready`]
    /// returns (the runner sends nothing else until then, so the line goes out whole);
    /// later calls, and a slot's zygote, send nothing. Each request still carries what
    /// [`Zygote::prepare`] is given once the zygote is ready, for a zygote that missed
    /// this line.
    pub fn announce(&self, what: Made) {
        if what == Made::default() {
            return;
        }
        let Some(socket) = self.early.lock().ok().and_then(|mut s| s.take()) else {
            return;
        };
        let line = serde_json::json!({
            "prepare": true,
            "ir_context": what.context,
            "huge_pages": what.huge_pages,
        });
        // A zygote that died is found by the next request, which says why.
        let _ = (&socket).write_all(format!("{line}\n").as_bytes());
    }
}

/// What a run asks its zygote to make ahead (see [`Ahead`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Made {
    /// The MLIR context the scripts' lowerings share, which each would otherwise make
    /// at its first lowering.
    pub context: bool,
    /// The heap moved into 2 MiB pages.
    pub huge_pages: bool,
}

/// The zygote's first line: ready, and (sandboxed) whether a test child could build
/// a script's namespaces, mounts and filter here.
#[derive(Deserialize)]
pub(super) struct Ready {
    pub ready: bool,
    pub sandbox: Option<String>,
}

/// A slot's zygote's word on how its script ended.
#[derive(Deserialize)]
pub(super) struct Ended {
    pub exit: Option<WaitStatus>,
}

/// A script's wait status and resource usage, as Python's `os.wait4` gives them.
#[derive(Deserialize)]
pub(super) struct WaitStatus {
    status: i32,
    utime: f64,
    stime: f64,
    maxrss_kib: u64,
    /// What the script held resident at its fork: the zygote's pages.
    inherited_kib: u64,
}

impl WaitStatus {
    pub fn into_exit(self) -> crate::runner::sys::Exit {
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        let (code, signal) = if libc::WIFEXITED(self.status) {
            (Some(libc::WEXITSTATUS(self.status)), None)
        } else if libc::WIFSIGNALED(self.status) {
            (None, Some(libc::WTERMSIG(self.status)))
        } else {
            (None, None)
        };
        crate::runner::sys::Exit {
            code,
            signal,
            user_cpu: secs(self.utime),
            system_cpu: secs(self.stime),
            // The pages a fork of the zygote starts with are the zygote's, not the
            // script's: its peak counts what it added.
            max_rss_bytes: (self.maxrss_kib.saturating_sub(self.inherited_kib))
                .saturating_mul(1024),
        }
    }
}

#[derive(Deserialize)]
struct Reply {
    pid: Option<i32>,
    error: Option<String>,
    /// A slot's zygote: whether it moved itself into the slot's cgroup (see
    /// `AttemptCgroup::self_move_files`).
    #[serde(default)]
    moved: bool,
}

/// The zygote's answer to one request: the PID of the process it forked.
pub(super) fn read_reply(reader: &mut BufReader<UnixStream>) -> Result<libc::pid_t, ZygoteError> {
    read_slot_reply(reader).map(|(pid, _)| pid)
}

/// A slot's zygote's first line: its PID, and whether it says it moved itself into
/// the slot's cgroup (the runner checks, see `AttemptCgroup::settle_moved`).
pub(super) fn read_slot_reply(
    reader: &mut BufReader<UnixStream>,
) -> Result<(libc::pid_t, bool), ZygoteError> {
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok();
    let mut reply = String::new();
    match reader.read_line(&mut reply) {
        Ok(n) if n > 0 => {}
        Ok(_) => return Err(ZygoteError::Gone),
        Err(e) => return Err(ZygoteError::Unreachable(e)),
    }
    let reply: Reply =
        serde_json::from_str(&reply).map_err(|e| ZygoteError::Protocol(e.to_string()))?;
    match (reply.pid, reply.error) {
        (Some(pid), _) if pid > 0 => Ok((pid, reply.moved)),
        (_, Some(e)) => Err(ZygoteError::Refused(e)),
        _ => Err(ZygoteError::NoFork),
    }
}

/// Sends `data` with `fds` attached (SCM_RIGHTS), then any rest of `data` plainly.
pub(super) fn send_with_fds(
    sock: &mut UnixStream,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    }
    let sent = sendmsg(
        &*sock,
        &[std::io::IoSlice::new(data)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    sock.write_all(&data[sent..])
}

/// Waits for `pid`, a script whose slot's zygote died: the runner adopts it, but only
/// once the kernel has finished with its parent (the socket closes before that), so
/// a `wait4` that comes too early is tried again while the process is there. A script
/// the zygote reaped just before it died (killed, say, by the script itself) is gone
/// with how it ended: it is recorded as ended with neither a code nor a signal.
pub(super) fn wait_adopted(pid: libc::pid_t) -> std::io::Result<super::super::sys::Exit> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match super::super::sys::wait4(pid) {
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                if super::super::sys::state(pid as u32).is_none() {
                    tracing::warn!(
                        pid,
                        "the script's zygote died before saying how the script ended"
                    );
                    return Ok(super::super::sys::Exit {
                        code: None,
                        signal: None,
                        user_cpu: Duration::ZERO,
                        system_cpu: Duration::ZERO,
                        max_rss_bytes: 0,
                    });
                }
                if std::time::Instant::now() >= deadline {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot's fork starts with the zygote's pages resident: its peak counts only
    /// what it added; with nothing inherited, the peak is taken whole.
    #[test]
    fn a_forks_peak_leaves_out_what_it_inherited() {
        let ended = |json: &str| {
            let e: Ended = serde_json::from_str(json).unwrap();
            e.exit.unwrap().into_exit()
        };
        let fork = ended(
            r#"{"exit": {"status": 0, "utime": 0.01, "stime": 0.02,
                "maxrss_kib": 160000, "inherited_kib": 150000}}"#,
        );
        assert_eq!((fork.code, fork.max_rss_bytes), (Some(0), 10_000 * 1024));
        let old = ended(
            r#"{"exit": {"status": 256, "utime": 0, "stime": 0,
                "maxrss_kib": 9, "inherited_kib": 0}}"#,
        );
        assert_eq!((old.code, old.max_rss_bytes), (Some(1), 9 * 1024));
    }
}
