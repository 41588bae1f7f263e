//! The last steps before a sandboxed script's first line, as one record the runner
//! makes for each attempt: the built-in sandbox's namespaces and mounts (a root runner
//! without bwrap), the scratch folders given to the sandbox user, Landlock's rules,
//! the switch to the sandbox user, and the seccomp filters. A cold start hands it to
//! `jax-runner __sandbox-exec` in a memory file; a warm start to the zygote's child.

use std::io::{Read, Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::identity::{become_user, SandboxUser};
use super::landlock::LandlockPlan;
use super::mountns::MountNamespace;
use super::mounts::MountStep;

/// What one attempt's last steps are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// Mount steps applied in mount, network, IPC and UTS namespaces of the script's
    /// own: the built-in sandbox's cold start (bwrap and the warm zygote's child make
    /// theirs). Empty: none made.
    pub steps: Vec<MountStep>,
    /// Scratch folders (fresh tmpfs) given to the sandbox user, mode 0700.
    pub own: Vec<PathBuf>,
    /// The unprivileged user a root runner's script becomes.
    pub user: Option<SandboxUser>,
    /// Landlock's rules, where the kernel has Landlock.
    pub landlock: Option<LandlockPlan>,
    /// The working directory (entered again after new mounts).
    pub cwd: PathBuf,
    /// The runner's PID: the script dies with it (a start without bwrap, whose
    /// `--die-with-parent` otherwise does it; a change of user clears the death signal).
    pub parent: Option<u32>,
}

impl Confinement {
    /// The record in a memory file, rewound, for the helper to read from an inherited
    /// descriptor (a pipe could fill before the helper starts reading).
    pub fn to_memfd(&self) -> std::io::Result<OwnedFd> {
        let fd =
            rustix::fs::memfd_create(c"jax-runner-confinement", rustix::fs::MemfdFlags::CLOEXEC)?;
        let mut file = std::fs::File::from(fd);
        serde_json::to_writer(&mut file, self).map_err(std::io::Error::other)?;
        file.flush()?;
        file.rewind()?;
        Ok(file.into())
    }

    /// The record the runner passed on descriptor `fd` (which is then closed).
    pub fn from_fd(fd: i32) -> std::io::Result<Confinement> {
        // SAFETY: the runner passed this descriptor for the helper alone.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }

    /// Applies every step to this process, which is about to exec the interpreter:
    /// namespaces and mounts, the scratch folders, Landlock's rules (opened while the
    /// process may still reach every path), the switch to the sandbox user, the death
    /// signal, then the restriction and the filters. `what` names the step that failed.
    pub fn apply(&self, seccomp: &[Vec<u8>]) -> Result<(), (&'static str, std::io::Error)> {
        if !self.steps.is_empty() {
            MountNamespace::new(&self.steps, &self.cwd, self.user)
                .and_then(|mut ns| ns.apply())
                .map_err(|e| ("build the sandbox's namespaces", e))?;
        }
        if let Some(u) = self.user {
            for dir in &self.own {
                give(dir, u).map_err(|e| ("give a scratch folder to the sandbox user", e))?;
            }
        }
        let ruleset = match &self.landlock {
            Some(plan) => Some(
                super::landlock::prepare(plan)
                    .map_err(|e| ("prepare Landlock's rules", std::io::Error::other(e)))?,
            ),
            None => None,
        };
        if let Some(u) = self.user {
            become_user(u.uid, u.gid).map_err(|e| ("become the sandbox user", e))?;
        }
        if let Some(parent) = self.parent {
            die_with(parent).map_err(|e| ("tie the script to the runner", e))?;
        }
        if let Some(ruleset) = ruleset {
            super::landlock::restrict(ruleset).map_err(|e| ("apply Landlock's rules", e))?;
        }
        super::seccomp::apply_prepared(seccomp).map_err(|e| ("install the seccomp filter", e))?;
        super::sys::cloexec_from(3).map_err(|e| ("close the runner's descriptors", e))
    }
}

/// A scratch folder (a fresh tmpfs) made the sandbox user's alone: mode 0700, its
/// owner, never following a link.
fn give(dir: &std::path::Path, u: SandboxUser) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Gid, Mode, Uid, CWD};
    rustix::fs::chmodat(CWD, dir, Mode::from_raw_mode(0o700), AtFlags::empty())?;
    let (uid, gid) = (Some(Uid::from_raw(u.uid)), Some(Gid::from_raw(u.gid)));
    rustix::fs::chownat(CWD, dir, uid, gid, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Dies with `parent`: the death signal set again (a switch of user cleared it), and
/// an end at once if the parent is already gone.
fn die_with(parent: u32) -> std::io::Result<()> {
    super::reaper::die_with_parent(parent as libc::pid_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_travels_whole_through_a_memory_file() {
        let c = Confinement {
            steps: vec![MountStep::Scratch {
                path: "/tmp".into(),
                size: None,
            }],
            own: vec!["/tmp".into()],
            user: Some(SandboxUser {
                uid: 61184,
                gid: 61184,
            }),
            landlock: Some(LandlockPlan {
                abi: 7,
                fs: 1,
                net: 0,
                scoped: 0,
                rules: vec![("/usr".into(), 1)],
            }),
            cwd: "/work".into(),
            parent: Some(42),
        };
        let fd = c.to_memfd().unwrap();
        use std::os::fd::IntoRawFd;
        assert_eq!(Confinement::from_fd(fd.into_raw_fd()).unwrap(), c);
    }
}
