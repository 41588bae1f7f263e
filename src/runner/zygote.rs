//! Warm start: a long-lived Python "zygote" that has already imported jax and numpy
//! (no backend initialised) forks each script on request. The script runs in a
//! grandchild of the zygote, which the kernel reparents to the runner (a child
//! subreaper), so the runner waits for it, times it out and kills its group exactly
//! as for a cold start.
//!
//! Sandboxed, the zygote itself runs under bubblewrap, holding capabilities only in
//! a user namespace of its own. Each request then forks a child that builds the
//! script's own namespaces (mount, PID, network, IPC, UTS) and mounts from the same
//! steps a cold start gives bubblewrap; its PID-namespace init (the runner's child)
//! waits for the runner's go, mounts a fresh `/proc`, drops every capability, sets
//! `no_new_privs`, installs the seccomp filter, and forks the script.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::error::ZygoteError;
use crate::sandbox::apply::Confinement;
use crate::sandbox::view::MountStep;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

mod baseline;
#[cfg(test)]
mod library_tests;
mod request;
mod wire;

use baseline::Baseline;
pub use request::{warm_request, Request, WarmRequest};
pub use wire::Made;
use wire::{read_reply, read_slot_reply, send_with_fds, Ahead, Ready, Wire};

/// One program in four files: the zygote, its child part, its sandbox half, its slot
/// part (which ends by serving).
const ZYGOTE: &str = concat!(
    include_str!("zygote.py"),
    "\n",
    include_str!("zygote_child.py"),
    "\n",
    include_str!("zygote_sandbox.py"),
    "\n",
    include_str!("zygote_slot.py")
);
/// Reads the program from stdin and runs it as `python -` would, under the same name
/// (`<stdin>`, which `output/frames.rs` knows as the warm start's own).
const LOADER: &str = "import sys;exec(compile(sys.stdin.buffer.read(),'<stdin>','exec'))";
/// The width of the zygote's token slot: `JAX_RUNNER_TOKEN=` and this many `-` in the
/// environment it starts with. A forked script never execs, so `/proc/<pid>/environ`
/// (the kernel reads it from the process's own memory, the block the program started
/// with) shows that block, not the script's `os.environ`. Each child overwrites the
/// slot in its copy with its attempt's token (NUL-padded) before anything else, and
/// every process forked from it inherits the copy: the runner's sweep and the sentinel
/// then find a warm script's processes by their token exactly as a cold script's,
/// however they detach. A token longer than the slot starts cold.
pub const TOKEN_SLOT: usize = 256;
/// Importing jax takes ~0.7 s here; a slow disk or a cold page cache takes longer.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running zygote.
#[derive(Debug)]
pub struct Zygote {
    pid: libc::pid_t,
    channel: Mutex<(UnixStream, BufReader<UnixStream>)>,
    /// It serves sandboxed scripts only (else unsandboxed ones only).
    sandboxed: bool,
    /// Its children give each script a view of its own (namespaces and mounts).
    namespaces: bool,
    /// What each forked child restores before the script, whatever an earlier script
    /// did to the zygote: the runner's values when it started the zygote.
    baseline: Baseline,
    /// A slot's zygote (see [`Zygote::slot`]): a fork of the run's zygote that the
    /// runner placed in its slot's cgroup, so what it forks is there from the start.
    resident: bool,
    /// What each request asks the zygote to make before it forks (once): set by
    /// [`Zygote::prepare`] for the run's scripts.
    ahead: Ahead,
    /// A slot's zygote made in the run's part of every script's view (see
    /// [`Zygote::slot`]): those steps; each script it forks builds only its own part.
    slot_view: Option<Vec<MountStep>>,
    /// The run's zygote's socket for [`Zygote::announce`], once, while it imports.
    early: Mutex<Option<UnixStream>>,
}

pub use crate::sandbox::policy::ZygoteSandbox;

/// What the zygote imports before its first fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preload {
    /// jax, jax.numpy and numpy, once, for every script it forks.
    Jax,
    /// Nothing of its own: for a run none of whose scripts names jax, whose forks and
    /// exits then copy and free a small interpreter's pages, not jax's 150 MiB.
    Lean,
}

impl Zygote {
    /// Starts the zygote with `python` and the given environment (inside the sandbox
    /// when `sandbox` is given); [`Zygote::wait_ready`] then waits for it.
    ///
    /// Call it from a thread that lives as long as the run (a runtime worker, never a
    /// blocking-pool thread): the zygote's death signal is tied to the *thread* that
    /// forks it, and a pool thread that retires after ten idle seconds would take the
    /// zygote with it in the middle of the run.
    pub fn launch(
        python: &Path,
        env: &[(OsString, OsString)],
        sandbox: Option<&ZygoteSandbox>,
        preload: Preload,
    ) -> Result<Zygote, ZygoteError> {
        // Before the fork: the zygote itself starts from these values.
        let baseline = Baseline::of_this_process().map_err(ZygoteError::Baseline)?;
        let (ours, theirs) = UnixStream::pair().map_err(ZygoteError::Socket)?;
        let child_fd = theirs.as_raw_fd();
        let parent = std::process::id() as libc::pid_t;
        let start_error = |source| ZygoteError::Start {
            python: python.to_path_buf(),
            source,
        };
        let filters = sandbox
            .map(|s| s.seccomp.to_memfds())
            .transpose()
            .map_err(start_error)?
            .unwrap_or_default();
        let filter_fds: Vec<RawFd> = filters.iter().map(|f| f.as_raw_fd()).collect();
        let mut cmd = match sandbox.and_then(|sb| sb.bwrap.as_ref()) {
            Some((bwrap, args)) => {
                let mut c = Command::new(bwrap);
                c.args(args).arg(python);
                c
            }
            None => Command::new(python),
        };
        // The program comes on stdin, not as `-c` text: `ps` then shows a short command
        // line. A one-line loader reads and runs it: `python -` parses its stdin 15 ms
        // slower (measured, 45 KiB).
        let program = super::sys::program_stdin(ZYGOTE.as_bytes()).map_err(start_error)?;
        cmd.arg("-c").arg(LOADER);
        if preload == Preload::Lean {
            cmd.arg("--lean");
        }
        match sandbox {
            Some(sb) if sb.namespaces => cmd.arg("--sandboxed"),
            Some(_) => cmd.arg("--confined"),
            None => &mut cmd,
        };
        for n in 0..filter_fds.len() {
            cmd.arg(format!("--seccomp-fd={}", FIRST_FILTER_FD + n as RawFd));
        }
        // jax-runner's library: the sandbox's confinement and, in every mode, the keeper
        // of the interpreter's frame-stack chunks (`crates/confine`, `arena.rs`). An
        // unsandboxed zygote whose cache folder takes no file runs without the keeper:
        // slower by a few per cent, every result the same.
        let library = match sandbox {
            Some(sb) => Some(sb.library.clone()),
            None => crate::sandbox::bwrap::library().ok(),
        };
        if let Some(path) = library {
            let mut lib = OsString::from("--library=");
            lib.push(path);
            cmd.arg(lib);
        }
        if let Some(sb) = sandbox {
            let probe =
                serde_json::to_string(&sb.probe_plan()).map_err(|e| start_error(e.into()))?;
            cmd.arg(format!("--probe-plan={probe}"));
        }
        cmd.env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            // Last, so it replaces any token the runner itself inherited.
            .env(super::reaper::TOKEN_VAR, "-".repeat(TOKEN_SLOT))
            .stdin(Stdio::from(program))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C at the terminal is the runner's to handle.
            .process_group(0);
        // SAFETY: fcntl, dup2, prctl and getppid are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                place_fds(child_fd, &filter_fds)?;
                super::reaper::die_with_parent(parent)
            });
        }
        let child = cmd.spawn().map_err(start_error)?;
        drop((theirs, filters));
        let pid = child.id() as libc::pid_t;
        let early = ours.try_clone().ok();
        let zygote = Zygote {
            pid,
            channel: Mutex::new((
                ours.try_clone().map_err(ZygoteError::Socket)?,
                BufReader::new(ours),
            )),
            sandboxed: sandbox.is_some(),
            namespaces: sandbox.is_some_and(|sb| sb.namespaces),
            baseline,
            resident: false,
            ahead: Ahead::default(),
            slot_view: None,
            early: Mutex::new(early),
        };
        Ok(zygote)
    }

    /// Waits (blocking, up to two minutes) until the zygote has imported jax and, inside
    /// the sandbox, its test child could build a script's namespaces.
    pub fn wait_ready(&self) -> Result<(), ZygoteError> {
        let mut guard = self.channel.lock().map_err(|_| ZygoteError::Poisoned)?;
        guard.1.get_ref().set_read_timeout(Some(READY_TIMEOUT)).ok();
        let mut line = String::new();
        let read = guard.1.read_line(&mut line);
        drop(guard);
        match read {
            Ok(0) => Err(ZygoteError::Exited),
            Ok(_) => match serde_json::from_str::<Ready>(&line) {
                Ok(r) if r.ready => match r.sandbox {
                    Some(report) if self.namespaces && report != "ok" => {
                        Err(ZygoteError::SandboxProbe(report))
                    }
                    _ => Ok(()),
                },
                _ => Err(ZygoteError::Protocol(line.trim().to_string())),
            },
            Err(e) => Err(ZygoteError::NotReady(e)),
        }
    }

    /// Forks a zygote for one worker slot, serving the same requests on a socket of its
    /// own. It is in the slot's cgroup before the first request (it moved itself, or
    /// the caller moves it: its [`Zygote::pid`]), and the caller marks it with
    /// [`Zygote::into_resident`]: a script it forks then needs no move into a cgroup
    /// of its own, which on cgroup v1 costs a wait for an RCU grace period (6 to 15
    /// ms) per script.
    ///
    /// `view`, for a zygote whose children build views: the run's part of every
    /// script's view ([`crate::sandbox::view::Split`]), which the slot's zygote is
    /// made in, once; each script then builds only its own part, a copy of the
    /// slot's mount namespace with its scratch and folders (about a third of the
    /// mounts a whole view takes).
    ///
    /// The run's zygote answers as soon as it has forked the middle child that makes
    /// the slot's zygote; the slot's zygote then says its PID on its own socket. The
    /// run's zygote is held only for the fork, so a run's slots are made side by side.
    ///
    /// `tasks`: the slot's cgroup's `tasks` files, which the slot's zygote moves itself
    /// in through before it says its PID (see `AttemptCgroup::self_move_files`); the
    /// second value is whether it says it did.
    pub fn slot(
        &self,
        view: Option<&[MountStep]>,
        tasks: &[std::fs::File],
    ) -> Result<(Zygote, bool), ZygoteError> {
        let (ours, theirs) = UnixStream::pair().map_err(ZygoteError::Socket)?;
        let view = view.filter(|_| self.namespaces && !self.resident);
        let _middle = {
            let mut guard = self.channel.lock().map_err(|_| ZygoteError::Poisoned)?;
            let (writer, reader) = &mut *guard;
            let made = self.ahead.get();
            let line = serde_json::json!({
                "slot": true,
                "runner_pid": std::process::id(),
                "ir_context": made.context,
                "huge_pages": made.huge_pages,
                "slot_view": Confinement::slot_view(view.unwrap_or_default()),
                "cgroup_tasks": tasks.len(),
            });
            let line = format!("{line}\n");
            let fds: Vec<_> = std::iter::once(theirs.as_fd())
                .chain(tasks.iter().map(|f| f.as_fd()))
                .collect();
            send_with_fds(writer, line.as_bytes(), &fds).map_err(ZygoteError::Unreachable)?;
            read_reply(reader)?
        };
        // Ours alone from here: the slot's zygote (or the middle child, to say what
        // failed) holds the other end.
        drop(theirs);
        let writer = ours.try_clone().map_err(ZygoteError::Socket)?;
        let mut reader = BufReader::new(ours);
        let (pid, moved) = read_slot_reply(&mut reader)?;
        let slot = Zygote {
            pid,
            channel: Mutex::new((writer, reader)),
            sandboxed: self.sandboxed,
            namespaces: self.namespaces,
            baseline: self.baseline.clone(),
            resident: false,
            ahead: self.ahead.clone(),
            slot_view: view.map(<[MountStep]>::to_vec),
            early: Mutex::new(None),
        };
        Ok((slot, moved))
    }

    /// This slot zygote, now that it lives in the slot's cgroup.
    pub fn into_resident(mut self) -> Zygote {
        self.resident = true;
        self
    }

    /// The run's part of the view this slot's zygote lives in, if it was made in one.
    pub fn slot_view(&self) -> Option<&[MountStep]> {
        self.slot_view.as_deref()
    }

    /// Sends SIGKILL to its process and what runs below it, without waiting: see
    /// [`super::reaper::kill_tree`]. Its drop still waits for them and reaps them.
    pub fn kill_now(&self) {
        super::reaper::kill_tree(self.pid as u32);
    }

    /// Kills it now (a lean zygote took its place); its last owner reaps it.
    pub fn stop(&self) {
        super::sys::kill_pid(self.pid, libc::SIGKILL);
    }

    /// Its process (the host's PID).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether it lives in the cgroup of the attempts it starts (a slot's zygote):
    /// neither it nor the runner moves a script there.
    pub fn resident(&self) -> bool {
        self.resident
    }

    /// Whether this zygote runs inside the sandbox (and serves sandboxed scripts only).
    pub fn sandboxed(&self) -> bool {
        self.sandboxed
    }

    /// Whether the scripts it forks live in a PID namespace whose init it is (a slot's
    /// zygote in the sandbox's namespaces): whatever a script leaves is reparented to
    /// it, never to the runner, and dies with the namespace.
    pub fn holds_orphans(&self) -> bool {
        self.resident && self.namespaces
    }

    /// Whether the process it starts for a script is the init of the script's PID
    /// namespace (a fork of the zygote, the runner's plumbing) rather than the script.
    pub fn starts_init(&self) -> bool {
        self.sandboxed && self.namespaces && !self.resident
    }

    /// Asks for one script; returns the PID of the process running it, which is now
    /// the runner's child.
    pub fn spawn(
        &self,
        request: &Request<'_>,
        fds: &[BorrowedFd<'_>],
    ) -> Result<libc::pid_t, ZygoteError> {
        let made = self.ahead.get();
        let wire = Wire {
            request,
            baseline: &self.baseline,
            ir_context: made.context,
            huge_pages: made.huge_pages,
        };
        let mut line =
            serde_json::to_vec(&wire).map_err(|e| ZygoteError::Protocol(e.to_string()))?;
        line.push(b'\n');
        let mut guard = self.channel.lock().map_err(|_| ZygoteError::Poisoned)?;
        let (writer, reader) = &mut *guard;
        send_with_fds(writer, &line, fds).map_err(ZygoteError::Unreachable)?;
        read_reply(reader)
    }
}

impl Drop for Zygote {
    /// Ends its process and what runs below it (under bwrap, the zygote proper), and
    /// reaps them: the run's end then finds nothing of it left (see
    /// [`super::reaper::strays`]). A slot's zygote is the runner's child too (adopted).
    fn drop(&mut self) {
        super::reaper::end_tree(self.pid as u32);
    }
}

/// Where the zygote finds its first seccomp program (the control socket is on 3).
const FIRST_FILTER_FD: RawFd = 4;
/// More seccomp programs than a run ever has (two today).
const MAX_FILTERS: usize = 8;

/// In the child before exec: the control socket on fd 3 and the seccomp programs from
/// fd 4 on, all kept open across exec, whatever numbers they had. Everything else the
/// runner holds is close-on-exec. Async-signal-safe: only fcntl and dup2.
fn place_fds(socket: RawFd, filters: &[RawFd]) -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // Out of the way first (above every target), so placing one cannot close another;
    // the copies close at exec, the placed descriptors stay. A fixed array: no
    // allocation between fork and exec.
    let mut moved = [0 as RawFd; MAX_FILTERS];
    if filters.len() > MAX_FILTERS {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    }
    let above = FIRST_FILTER_FD + MAX_FILTERS as RawFd;
    // SAFETY: plain descriptor calls on descriptors this process owns.
    unsafe {
        let socket = check(libc::fcntl(socket, libc::F_DUPFD_CLOEXEC, above))?;
        for (n, f) in filters.iter().enumerate() {
            moved[n] = check(libc::fcntl(*f, libc::F_DUPFD_CLOEXEC, above))?;
        }
        check(libc::dup2(socket, 3))?;
        for (n, f) in moved[..filters.len()].iter().enumerate() {
            check(libc::dup2(*f, FIRST_FILTER_FD + n as RawFd))?;
        }
    }
    Ok(())
}
