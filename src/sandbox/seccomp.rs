//! The seccomp filters a sandboxed script runs under, cold (`__sandbox-exec` or the
//! built-in sandbox installs them just before exec) or warm (the zygote's child
//! installs them before the script's first line). They grant: the calls a script may
//! make are listed (`allowed.rs`, after Docker's default profile and systemd's
//! `@system-service`), each with the arguments it may take, and every other call
//! answers `EPERM`, whatever capabilities the script holds. Among what the list
//! leaves out (`rules::EPERM` names the notable ones; the tests check each):
//!
//! - **Mounts and the root:** `mount`, `umount2`, `pivot_root`, `chroot` and the new
//!   mount API would unhide `$HOME` or make `/` writable.
//! - **Namespaces:** `unshare`, `setns`, and `clone` with a `CLONE_NEW*` flag. A new
//!   user namespace hands back every capability inside it. `clone3` keeps its flags
//!   in a struct a filter cannot read, so it answers `ENOSYS`: the C library then
//!   falls back to `clone`, whose flags the filter reads.
//! - **Other processes:** `ptrace`, `process_vm_readv`/`writev`, `pidfd_getfd`,
//!   `process_madvise` and `kcmp` read or steer another process's memory or files;
//!   `prlimit64`, `setpriority`, `sched_setaffinity`, `sched_setscheduler`,
//!   `sched_setparam`, `sched_setattr` and `ioprio_set` are granted on the caller
//!   alone (`pid` 0) wherever no PID namespace of its own separates the script from
//!   the runner, the zygote and the other scripts ([`Separation::pid`]).
//! - **Host IPC:** SysV shared memory, queues and semaphores and POSIX message queues
//!   are granted only inside an IPC namespace of the script's own.
//! - **Host sockets:** `socket(AF_UNIX)`, since a socket file on the read-only root
//!   (docker, dbus, a database) still accepts a connection; any socket family but
//!   inet and netlink, and those only inside a network namespace of the script's own.
//!   A run that may use a GPU is granted the one Unix socket the CUDA driver makes at
//!   `cuInit`, of type `SOCK_SEQPACKET`, which cannot connect to a stream socket.
//!   `socketpair`, which only makes a connected pair, stays granted.
//! - **The terminal:** `ioctl(TIOCSTI)` and `TIOCLINUX` type into the terminal.
//! - **The kernel's own state and its riskiest code:** the keyring, modules, `kexec`,
//!   `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`, `syslog`, `swapon`,
//!   `reboot`, `acct`, the clocks, and on x86 `iopl`, `ioperm` and `modify_ldt`.
//! - **Setuid and setgid files:** `chmod`, `fchmod*`, `open`, `openat`, `creat` and
//!   `mknod*` are granted only with a mode free of `S_ISUID` and `S_ISGID`: a setuid
//!   copy of the interpreter left in a data folder would let anyone on the host act
//!   as the sandbox user. `openat2` answers `ENOSYS` (its mode is in a struct).
//! - **File handles:** `open_by_handle_at` opens a file by inode, past the view.
//! - **Extended attributes:** `setxattr`, `removexattr` and their `l`/`f` forms. No
//!   other layer holds them (Landlock has no right for them): the built-in layer
//!   alone would let a script tag any file its user owns. Reading them stays granted,
//!   and Python's copies (`shutil.copy2`) pass over a refusal.
//!
//! `seccompiler` (Firecracker's) compiles the filters from the `libc::SYS_*` numbers of
//! the build's processor: x86_64, aarch64 or riscv64. Elsewhere there is no filter and
//! the run says so. It gives a filter one action, so there are two programs, installed
//! in order: the allow-list (`EPERM` for the rest), then `ENOSYS` for `clone3` and
//! `openat2` (the kernel takes the errno of the filter installed last). Each starts
//! with seccompiler's architecture check, which kills the process on a call made
//! through another ABI of the machine (i386's `int 0x80` on x86_64, AArch32 on
//! aarch64); x32 calls on x86_64 pass that check with bit 30 set in their number, and
//! none of those numbers is granted. Each program is then laid out as a binary search
//! on the call's number (`layout.rs`): the same answers, tested against seccompiler's
//! own chain of tests, with a handful of tests per call where the chain ran hundreds.

use std::fmt;
use std::io;

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
mod allowed;
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
mod layout;
#[cfg(all(
    test,
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
mod layout_tests;
#[cfg(test)]
mod live_tests;
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
mod rules;
#[cfg(test)]
mod tests;

/// One compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// What it is for; also part of its file name.
    pub name: &'static str,
    /// The `struct sock_filter` array in native byte order: what
    /// `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog)` and bwrap's
    /// `--add-seccomp-fd` read.
    pub bytes: Vec<u8>,
}

/// The size of one BPF instruction, and the filters' installing, live with the code
/// that applies the confinement (`crates/confine`, `seccomp.rs`).
pub use jax_runner_confine::seccomp::{apply_prepared, INSTRUCTION_LEN};

/// A call the filters refuse, for the README and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The system call.
    pub call: &'static str,
    /// The argument values it is refused with (`CLONE_NEWUSER`, `AF_UNIX`); empty when
    /// it is refused whatever its arguments.
    pub only_with: Vec<&'static str>,
    /// What it answers: `EPERM`, or `ENOSYS` for `clone3`.
    pub errno: &'static str,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.only_with.is_empty() {
            write!(f, "{}: {}", self.call, self.errno)
        } else {
            let with = self.only_with.join(", ");
            write!(f, "{} with {}: {}", self.call, with, self.errno)
        }
    }
}

/// What separates a run's scripts from the host, the runner and each other, beyond
/// the filter: the namespaces every script of the run gets. Calls that would reach
/// past a missing one are granted more narrowly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Separation {
    /// A PID namespace of the script's own: calls on a process may name any PID (they
    /// can name only the script's own); without one, only the caller itself.
    pub pid: bool,
    /// An IPC namespace of the script's own: SysV IPC and POSIX queues are its own.
    pub ipc: bool,
    /// A network namespace apart from the host's (the script's own, or its worker
    /// slot's, which holds one script at a time): inet and netlink sockets reach only
    /// that namespace's loopback.
    pub net: bool,
}

impl Separation {
    /// Every namespace (bubblewrap).
    pub const ALL: Separation = Separation {
        pid: true,
        ipc: true,
        net: true,
    };
    /// None: the built-in layer alone, on the host's namespaces.
    pub const NONE: Separation = Separation {
        pid: false,
        ipc: false,
        net: false,
    };
}

/// The filters for this processor where scripts have every namespace of their own,
/// to install in this order; `None` where there are none.
pub fn programs() -> Option<Vec<Program>> {
    programs_for(Separation::ALL, false)
}

/// The filters for scripts with `separation` (and `gpu`, a run that may use a GPU):
/// the allow-list, then `clone3` and `openat2` answering `ENOSYS`.
pub fn programs_for(separation: Separation, gpu: bool) -> Option<Vec<Program>> {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    {
        return Some(vec![
            rules::program(
                "allow",
                rules::chain_allowed(&allowed::rules(separation, gpu), libc::EPERM),
            ),
            rules::program("clone3-enosys", rules::chain(rules::ENOSYS, libc::ENOSYS)),
        ]);
    }
    #[allow(unreachable_code)]
    {
        let _ = (separation, gpu);
        None
    }
}

/// How many distinct system calls the allow-list grants at most on this processor
/// (every namespace, a run that may use a GPU; some only with safe arguments): every
/// other call is refused. 0 where there is no filter.
pub fn granted() -> usize {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    {
        let rules = allowed::rules(Separation::ALL, true);
        let mut calls: Vec<&str> = rules.iter().map(|r| r.call).collect();
        calls.sort_unstable();
        calls.dedup();
        return calls.len();
    }
    #[allow(unreachable_code)]
    0
}

/// The calls the filters refuse on this processor (none where there is no filter).
pub fn denied() -> Vec<Denial> {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    return [
        rules::denials(rules::EPERM, "EPERM"),
        rules::denials(rules::ENOSYS, "ENOSYS"),
        rules::denials(rules::NO_NETWORK, "EPERM (no network namespace)"),
        rules::denials(
            &allowed::on_others(),
            "EPERM (on another process, no PID namespace)",
        ),
    ]
    .concat();
    #[allow(unreachable_code)]
    Vec::new()
}

/// [`apply_prepared`] with this processor's [`programs`]; `Unsupported` where there
/// are none. It allocates: call [`apply_prepared`] after a fork.
pub fn apply() -> io::Result<()> {
    let Some(programs) = programs() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no seccomp filter for this processor",
        ));
    };
    let progs: Vec<Vec<u8>> = programs.into_iter().map(|p| p.bytes).collect();
    apply_prepared(&progs)
}

/// The programs of a run, in install order, held in memory. Each use hands them on as
/// fresh sealed memory files ([`Filters::to_memfds`]), never as files on disk: the
/// filter a script gets cannot be lost to a cache folder the runner may not write,
/// nor changed by a process that rewrote such a file between runs.
#[derive(Debug, Clone, Default)]
pub struct Filters(std::sync::Arc<[Vec<u8>]>);

impl Filters {
    /// [`programs_for`] `separation` and `gpu`; `None` where there is no filter for
    /// this processor.
    pub fn for_run(separation: Separation, gpu: bool) -> Option<Filters> {
        let programs = programs_for(separation, gpu)?;
        Some(Filters(programs.into_iter().map(|p| p.bytes).collect()))
    }

    /// No program: the run has no filter.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One sealed memory file per program, in install order
    /// ([`jax_runner_confine::process::sealed_memfd`]).
    pub fn to_memfds(&self) -> io::Result<Vec<std::os::fd::OwnedFd>> {
        self.0
            .iter()
            .map(|bytes| jax_runner_confine::process::sealed_memfd(c"jax-runner-seccomp", bytes))
            .collect()
    }
}
