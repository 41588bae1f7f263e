//! jax-runner's confinement: the last steps before a sandboxed script's first line,
//! as one record the runner makes for each attempt (the view's namespaces and
//! mounts, a fresh `/proc`, the scratch folders given to the sandbox user, Landlock's
//! rules, the switch to the sandbox user, the capabilities dropped, the seccomp
//! filters) and the Rust code that applies it. A cold start hands it to `jax-runner
//! __sandbox-exec` in a memory file; the warm zygote's children hand it to the same
//! code, loaded from this crate's library (`ffi.rs`), which jax-runner builds and
//! carries inside its binary. So no step of it is written twice, and a record this
//! code does not know is refused whole.
//!
//! The crate holds what applying needs and nothing more (no tokio, no clap), so the
//! library the zygote loads stays small. Its map, one file each:
//!
//! - `lib.rs`: the record ([`Confinement`]) and its phases ([`Phase`]).
//! - `ffi.rs`: [`ffi::jax_runner_confine`], the library's door for the warm zygote.
//! - `arena.rs`: the keeper of CPython's frame-stack chunks the warm zygote sets as its
//!   arena allocator (the library's one part that is no confinement).
//! - `mount.rs`: the view's steps ([`mount::MountStep`]), as the zygote reads them.
//! - `namespaces.rs`: the view made without bwrap (mount, network, IPC, UTS and PID
//!   namespaces, the same steps).
//! - `landlock.rs`: Landlock's plan, opened and enforced.
//! - `user.rs`: the switch to the sandbox user, the capabilities dropped.
//! - `seccomp.rs`: the filters installed.
//! - `process.rs`: the death signal and the descriptors closed on exec.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod arena;
pub mod ffi;
pub mod landlock;
pub mod mount;
pub mod namespaces;
pub mod process;
pub mod seccomp;
pub mod user;

use landlock::LandlockPlan;
use mount::MountStep;
use namespaces::MountNamespace;
use user::{become_user, drop_capabilities, SandboxUser};

/// What one attempt's last steps are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confinement {
    /// Mount steps applied in mount, network, IPC and UTS namespaces of the script's
    /// own: the built-in sandbox's cold start, and every warm start in a view (bwrap
    /// makes a cold start's). Empty: none made.
    pub steps: Vec<MountStep>,
    /// The namespaces include a PID namespace: the caller forks its init after
    /// [`Phase::Namespaces`], and the init mounts a fresh `/proc` in
    /// [`Phase::Process`] (the warm zygote's children).
    #[serde(default)]
    pub pid_namespace: bool,
    /// A fresh `/proc` in [`Phase::Process`] with no PID namespace of the record's own:
    /// a worker slot's script, in the PID namespace its slot's zygote is the init of.
    #[serde(default)]
    pub fresh_proc: bool,
    /// Scratch folders (fresh tmpfs) given to the sandbox user, mode 0700.
    pub own: Vec<PathBuf>,
    /// The unprivileged user a root runner's script becomes.
    pub user: Option<SandboxUser>,
    /// Landlock's rules, where the kernel has Landlock.
    pub landlock: Option<LandlockPlan>,
    /// The working directory (entered again after new mounts).
    pub cwd: PathBuf,
    /// The runner's PID: the script dies with it and must be its child now (a start
    /// without bwrap, whose `--die-with-parent` otherwise does it).
    pub parent: Option<u32>,
    /// The death signal armed again after the switch of user (which clears it), where
    /// the caller checked the parent before the view hid it (a warm init).
    #[serde(default)]
    pub death_signal: bool,
    /// The network namespace is the worker slot's, made once with the slot's zygote
    /// ([`Phase::SlotPid`]), not one of the script's own: a network namespace costs
    /// the kernel about a millisecond to make and more to tear down, a quarter of a
    /// trivial script's sandbox. The slot's scripts run one after another, and its
    /// zygote kills whatever an earlier one left before it forks the next.
    #[serde(default)]
    pub slot_network: bool,
}

/// Which steps of a [`Confinement`] to apply now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    /// The namespaces and the view: in the process whose children the PID namespace
    /// (if any) holds.
    Namespaces = 1,
    /// The rest: a fresh `/proc`, the scratch, Landlock, the user, the capabilities,
    /// the filters. In the init of the PID namespace, or the script's own process.
    Process = 2,
    /// Both in turn, then every descriptor above 2 closed on exec: a cold start.
    All = 3,
    /// A PID namespace for the caller's next child, which is then its init, and a
    /// network namespace (its loopback up) for the caller and its children: a worker
    /// slot's zygote. With `steps`, also the mount namespace they build (the run's
    /// part of every view, [`Confinement::slot_view`]); nothing else of the record
    /// applies.
    SlotPid = 4,
    /// [`Phase::Namespaces`] then [`Phase::Process`] in this one process, every
    /// descriptor left as it is: a worker slot's script, whose fork holds the pipes
    /// it answers the slot's zygote on (one parse of the record, not two).
    Script = 5,
}

impl Phase {
    /// The phase a caller names by number, `None` for one this build does not know.
    pub fn from_raw(n: u32) -> Option<Phase> {
        [
            Phase::Namespaces,
            Phase::Process,
            Phase::All,
            Phase::SlotPid,
            Phase::Script,
        ]
        .into_iter()
        .find(|p| *p as u32 == n)
    }
}

impl Confinement {
    /// The record in a sealed memory file, for the helper to read from an inherited
    /// descriptor ([`process::sealed_memfd`]).
    pub fn to_memfd(&self) -> std::io::Result<OwnedFd> {
        let json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        process::sealed_memfd(c"jax-runner-confinement", &json)
    }

    /// The record the runner passed on descriptor `fd` (which is then closed).
    pub fn from_fd(fd: i32) -> std::io::Result<Confinement> {
        // SAFETY: the runner passed this descriptor for the helper alone.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }

    /// The same confinement for a warm start from the zygote: the same view (`steps`,
    /// the attempt's full list, built in namespaces of the child's own with a PID
    /// namespace and a fresh `/proc`; `None` on the host's view), rules, user and
    /// filters; the scratch is the sandbox user's from its mount, and the death signal
    /// is armed again after the switch of user (a child on the host's view checks the
    /// runner is its parent; an init, whose parent a new `/proc` hides, was checked by
    /// the zygote before).
    pub fn for_warm(&self, steps: Option<&[MountStep]>) -> Confinement {
        let runner = std::process::id();
        Confinement {
            steps: steps.map(<[MountStep]>::to_vec).unwrap_or_default(),
            pid_namespace: steps.is_some(),
            fresh_proc: false,
            own: Vec::new(),
            user: self.user,
            landlock: self.landlock.clone(),
            cwd: self.cwd.clone(),
            parent: steps.is_none().then_some(runner),
            death_signal: steps.is_some(),
            slot_network: false,
        }
    }

    /// The same confinement for a script a worker slot's zygote forks: the same view,
    /// built in mount, network, IPC and UTS namespaces of the script's own with a
    /// fresh `/proc` of the slot's PID namespace (whose init is that zygote), or the
    /// host's view; the rest as [`Confinement::for_warm`]. The script dies with the
    /// slot's zygote, its parent, which dies with the runner.
    pub fn for_slot(&self, steps: Option<&[MountStep]>) -> Confinement {
        Confinement {
            pid_namespace: false,
            fresh_proc: steps.is_some(),
            slot_network: steps.is_some(),
            parent: None,
            death_signal: true,
            ..self.for_warm(steps)
        }
    }

    /// The record a worker slot's zygote is made with ([`Phase::SlotPid`]): `steps`,
    /// the run's part of every script's view (each script's own part then goes in its
    /// own record, [`Confinement::for_slot`]); none, the slot's zygote stays on the
    /// zygote's view and each script builds its whole view.
    pub fn slot_view(steps: &[MountStep]) -> Confinement {
        Confinement {
            steps: steps.to_vec(),
            cwd: PathBuf::from("/"),
            ..Confinement::default()
        }
    }

    /// Applies every step to this process, which is about to exec the interpreter: a
    /// cold start's [`Phase::All`]. `what` names the step that failed.
    pub fn apply(&self, seccomp: &[Vec<u8>]) -> Result<(), (&'static str, std::io::Error)> {
        self.apply_phase(Phase::All, seccomp)
    }

    /// Applies the steps of `phase`, in the one order every start uses: namespaces and
    /// mounts; a fresh `/proc`; the scratch folders; Landlock's rules opened (while the
    /// process may still reach every path); the switch to the sandbox user, or else
    /// every capability dropped; the death signal; `no_new_privs`; Landlock's
    /// restriction; the filters.
    pub fn apply_phase(
        &self,
        phase: Phase,
        seccomp: &[Vec<u8>],
    ) -> Result<(), (&'static str, std::io::Error)> {
        if phase == Phase::SlotPid {
            namespaces::slot_namespaces()
                .map_err(|e| ("make the slot's PID and network namespaces", e))?;
            if self.steps.is_empty() {
                return Ok(());
            }
            // The run's part of every script's view, made once for the slot: its
            // zygote lives in it, and each script's process copies it and adds its
            // own part (see `Confinement::slot_view`).
            return MountNamespace::new(&self.steps, &self.cwd, self.user, false, false)
                .and_then(|mut ns| ns.apply())
                .map_err(|e| ("build the run's part of the slot's view", e));
        }
        if phase != Phase::Process && !self.steps.is_empty() {
            let network = !self.slot_network;
            MountNamespace::new(
                &self.steps,
                &self.cwd,
                self.user,
                self.pid_namespace,
                network,
            )
            .and_then(|mut ns| ns.apply())
            .map_err(|e| ("build the sandbox's namespaces", e))?;
        }
        if phase == Phase::Namespaces {
            return Ok(());
        }
        if self.pid_namespace || self.fresh_proc {
            namespaces::fresh_proc().map_err(|e| ("mount a fresh /proc", e))?;
        }
        if let Some(u) = self.user {
            for dir in &self.own {
                give(dir, u).map_err(|e| ("give a scratch folder to the sandbox user", e))?;
            }
        }
        let ruleset = match &self.landlock {
            Some(plan) => Some(
                landlock::prepare(plan)
                    .map_err(|e| ("prepare Landlock's rules", std::io::Error::other(e)))?,
            ),
            None => None,
        };
        match self.user {
            Some(u) => become_user(u.uid, u.gid).map_err(|e| ("become the sandbox user", e))?,
            None => drop_capabilities().map_err(|e| ("drop every capability", e))?,
        }
        if let Some(parent) = self.parent {
            die_with(parent).map_err(|e| ("tie the script to the runner", e))?;
        } else if self.death_signal {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(|e| ("tie the script to the runner", e.into()))?;
        }
        rustix::thread::set_no_new_privs(true).map_err(|e| ("set no_new_privs", e.into()))?;
        if let Some(ruleset) = ruleset {
            landlock::restrict(ruleset).map_err(|e| ("apply Landlock's rules", e))?;
        }
        seccomp::apply_prepared(seccomp).map_err(|e| ("install the seccomp filter", e))?;
        if phase == Phase::All {
            process::cloexec_from(3).map_err(|e| ("close the runner's descriptors", e))?;
        }
        Ok(())
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
    process::die_with_parent(parent as libc::pid_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root runner's cold plan, as `policy.rs` makes one.
    fn example() -> Confinement {
        Confinement {
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
            ..Default::default()
        }
    }

    /// Warm and cold starts apply one policy: the warm plan is the cold one's, with
    /// the attempt's whole view built by the child (and a PID namespace of its own).
    #[test]
    fn a_warm_start_applies_the_same_policy_as_a_cold_one() {
        let cold = example();
        let view = vec![
            MountStep::Tmpfs("/opt".into()),
            MountStep::ReadOnly("/tree/m".into()),
        ];
        let warm = cold.for_warm(Some(&view));
        assert_eq!(
            (&warm.user, &warm.landlock, &warm.cwd),
            (&cold.user, &cold.landlock, &cold.cwd)
        );
        assert_eq!(warm.steps, view);
        assert!(warm.pid_namespace && warm.death_signal && warm.parent.is_none());
        let plain = cold.for_warm(None);
        assert!(plain.steps.is_empty() && !plain.pid_namespace);
        assert_eq!(plain.parent, Some(std::process::id()));
        assert_eq!(plain.landlock, cold.landlock);
        // A slot's script: the same view and rules, in the slot's PID namespace (a
        // fresh /proc of it), dying with the slot's zygote, its parent.
        let slot = cold.for_slot(Some(&view));
        assert_eq!(slot.steps, view);
        assert!(!slot.pid_namespace && slot.fresh_proc && slot.death_signal);
        assert_eq!((slot.parent, &slot.landlock), (None, &cold.landlock));
        // Its network namespace is the slot's; every other start makes its own.
        assert!(slot.slot_network && !warm.slot_network && !cold.slot_network);
        let plain = cold.for_slot(None);
        assert!(plain.steps.is_empty() && !plain.fresh_proc && plain.parent.is_none());
        assert!(!plain.slot_network);
    }

    #[test]
    fn a_record_with_a_step_this_code_does_not_know_is_refused_whole() {
        let known = serde_json::to_value(Confinement::default()).unwrap();
        let mut unknown_step = known.clone();
        unknown_step["steps"] = serde_json::json!([{"op": "bind_everything", "path": "/"}]);
        let mut unknown_field = known.clone();
        unknown_field["skip_seccomp"] = serde_json::json!(true);
        for bad in [unknown_step, unknown_field] {
            assert!(serde_json::from_value::<Confinement>(bad).is_err());
        }
        assert!(serde_json::from_value::<Confinement>(known).is_ok());
        assert_eq!(Phase::from_raw(6), None);
        assert_eq!(Phase::from_raw(5), Some(Phase::Script));
        assert_eq!(Phase::from_raw(4), Some(Phase::SlotPid));
        assert_eq!(Phase::from_raw(2), Some(Phase::Process));
    }

    #[test]
    fn the_record_travels_whole_through_a_memory_file() {
        let c = Confinement {
            steps: vec![MountStep::Scratch {
                path: "/tmp".into(),
                size: None,
            }],
            parent: Some(42),
            ..example()
        };
        let fd = c.to_memfd().unwrap();
        use std::os::fd::IntoRawFd;
        assert_eq!(Confinement::from_fd(fd.into_raw_fd()).unwrap(), c);
    }
}
