//! One round of a sweep and the processes it ends: each held by a pidfd, so a signal
//! and a wait reach that process and no later one that took its PID, and waited for
//! until it has exited.

use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::model::Leak;

use super::{command_line, reap, reap_orphans, sys};

/// One round of a sweep: the leftovers it found, and those of them already on their
/// way out.
#[derive(Default)]
pub(super) struct Round {
    found: Vec<Victim>,
    ending: Vec<Victim>,
}

impl Round {
    /// A leftover, sorted by whether the kernel already has it on its way out.
    pub(super) fn add(&mut self, victim: Victim) {
        match sys::exiting(victim.pid) {
            true => self.ending.push(victim),
            false => self.found.push(victim),
        }
    }

    /// Kills each found leftover with its group and records it in `killed`; waits
    /// until they and those on their way out (recorded in `waited`) have exited, and
    /// reaps those reparented to the runner. One on its way out still there after the
    /// wait was not: it is killed and recorded too. False when there was nothing.
    pub(super) fn end(self, killed: &mut Vec<Leak>, waited: &mut Vec<u32>) -> bool {
        if self.found.is_empty() && self.ending.is_empty() {
            return false;
        }
        for victim in &self.found {
            let command = command_line(victim.pid);
            victim.kill();
            killed.push(Leak {
                pid: victim.pid,
                command,
            });
        }
        let ending: Vec<u32> = self.ending.iter().map(|v| v.pid).collect();
        waited.extend(&ending);
        let mut all: Vec<Victim> = self.found.into_iter().chain(self.ending).collect();
        wait_gone(&mut all, GONE_WAIT);
        for stuck in all.iter().filter(|v| ending.contains(&v.pid)) {
            stuck.kill();
            killed.push(Leak {
                pid: stuck.pid,
                command: command_line(stuck.pid),
            });
        }
        reap_orphans(killed);
        reap(&ending);
        true
    }
}

/// How long the sweep waits, each round, for what it killed to exit. A SIGKILLed
/// process is gone within milliseconds unless it sleeps uninterruptibly (a hung
/// network file system).
pub(super) const GONE_WAIT: Duration = Duration::from_secs(2);

/// A process to kill, held by a pidfd where the kernel gives one (Linux 5.3 on, and
/// within the descriptor limit), so the signal and the wait reach this process and no
/// later one that took its PID; by its PID otherwise.
pub struct Victim {
    pub(super) pid: u32,
    fd: Option<std::os::fd::OwnedFd>,
}

impl Victim {
    pub(super) fn open(pid: u32) -> Victim {
        let fd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        Victim { pid, fd }
    }

    /// SIGKILL to the process and to its group (a leftover that made a new session
    /// leads one).
    pub(super) fn kill(&self) {
        sys::kill_group(self.pid as i32, libc::SIGKILL);
        self.kill_alone();
    }

    /// SIGKILL to the process alone.
    pub(super) fn kill_alone(&self) {
        match &self.fd {
            // Fails only for a process already gone: its PID is not tried again.
            Some(fd) => {
                let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
            }
            None => sys::kill_pid(self.pid as i32, libc::SIGKILL),
        }
    }

    /// Whether it has exited (a zombie has: it cannot write any more).
    fn gone(&self) -> bool {
        match &self.fd {
            // A pidfd polls readable once the process has exited.
            Some(fd) => {
                let mut poll = [PollFd::new(fd, PollFlags::IN)];
                !matches!(
                    rustix::event::poll(&mut poll, Some(&Timespec::default())),
                    Ok(0)
                )
            }
            None => sys::ended(self.pid),
        }
    }
}

/// Waits, up to `limit`, until every victim has exited. Held by pidfds, their exits
/// wake the wait at once; one held by its PID alone is looked at every 5 ms.
pub(super) fn wait_gone(victims: &mut Vec<Victim>, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        victims.retain(|v| !v.gone());
        let now = Instant::now();
        if victims.is_empty() || now >= deadline {
            return;
        }
        let mut wait = deadline - now;
        if victims.iter().any(|v| v.fd.is_none()) {
            wait = wait.min(Duration::from_millis(5));
        }
        let mut fds: Vec<PollFd> = (victims.iter().filter_map(|v| v.fd.as_ref()))
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        let timeout = Timespec::try_from(wait).unwrap_or_default();
        if fds.is_empty() || rustix::event::poll(&mut fds, Some(&timeout)).is_err() {
            std::thread::sleep(wait.min(Duration::from_millis(5)));
        }
    }
}
