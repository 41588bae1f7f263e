//! The seccomp filters a sandboxed script runs under, cold (`__sandbox-exec` or the
//! built-in sandbox installs them just before exec) or warm (the zygote's child installs them before the script's first line). They
//! refuse the calls a script could use to undo its sandbox or reach past it, whatever
//! capabilities it holds:
//!
//! - **Mounts and the root:** `mount`, `umount2`, `pivot_root`, `chroot` and the new
//!   mount API would unhide `$HOME` or make `/` writable.
//! - **Namespaces:** `unshare`, `setns`, and `clone` with a `CLONE_NEW*` flag. A new
//!   user namespace hands back every capability inside it, and with them mounts,
//!   firewall tables and the rest of the kernel's privileged code. `clone3` keeps its
//!   flags in a struct a filter cannot read, so it answers `ENOSYS`: the C library then
//!   falls back to `clone`, whose flags the filter reads.
//! - **Other processes:** `ptrace`, `process_vm_readv`/`writev`, `pidfd_getfd`,
//!   `process_madvise` and `kcmp` read or steer another process's memory or files.
//! - **Host sockets:** `socket(AF_UNIX)`, since a socket file on the read-only root
//!   (docker, dbus, a database) still accepts a connection; `socket(AF_VSOCK)`, since
//!   vsock belongs to no network namespace and reaches a VM's host past
//!   `--unshare-net`. `socketpair`, which only makes a connected pair, stays allowed.
//! - **The terminal:** `ioctl(TIOCSTI)` types into the controlling terminal, whose
//!   shell reads it after the run; `TIOCLINUX` does the same on a virtual console.
//! - **The kernel's own state and its riskiest code:** the keyring (`keyctl`,
//!   `add_key`, `request_key`; it is not namespaced), modules, `kexec`, `bpf`,
//!   `perf_event_open`, `userfaultfd`, `io_uring_*` (its requests never pass the
//!   filter), `syslog`, `swapon`/`swapoff`, `reboot`, `acct`, and on x86 `iopl`,
//!   `ioperm` and `modify_ldt`.
//! - **Setuid and setgid files:** `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `open`,
//!   `openat`, `creat`, `mknod` and `mknodat` with `S_ISUID` or `S_ISGID` in the mode.
//!   A script's files belong to the sandbox user (or the user who runs jax-runner):
//!   a setuid copy of the interpreter left in a data folder would let anyone on the
//!   host act as that user. `openat2` answers `ENOSYS` (its mode is in a struct), so
//!   callers fall back to `openat`.
//! - **File handles:** `open_by_handle_at` opens a file by inode, outside the mounts
//!   the sandbox shows; `name_to_handle_at` makes the handles.
//!
//! Threads, `fork`, `exec`, `mmap`, `futex`, pipes, `socketpair`, `epoll`, `eventfd`,
//! `memfd_create`, `prctl`, `sched_*`, `getrandom` and inet sockets (in the script's
//! own empty network namespace) stay allowed: JAX, numpy and their subprocesses use
//! them.
//!
//! `seccompiler` (Firecracker's) compiles the filters from the `libc::SYS_*` numbers of
//! the build's processor: x86_64, aarch64 or riscv64. Elsewhere there is no filter and
//! the run says so. It gives a filter one action, so there are two programs, installed
//! in order: `EPERM` for the calls above, `ENOSYS` for `clone3` and `openat2`. Each starts with
//! seccompiler's architecture check, which kills the process on a call made through
//! another ABI of the machine (i386's `int 0x80` on x86_64, AArch32 on aarch64). x32
//! calls on x86_64 pass that check (same audit arch, bit 30 set in the number), so
//! every refused call is refused under its x32 numbers too.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use sha2::{Digest, Sha256};

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

/// The size of one BPF instruction (`struct sock_filter`).
pub const INSTRUCTION_LEN: usize = std::mem::size_of::<libc::sock_filter>();

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

/// Where a script's network is: a namespace of its own (bwrap, the runner's own), or
/// the host's, whose sockets the filter then refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    Namespaced,
    Host,
}

/// The filters for this processor, to install in this order; `None` where there are
/// none.
pub fn programs() -> Option<Vec<Program>> {
    programs_for(Network::Namespaced)
}

/// [`programs`], plus `deny-network` (inet, netlink and packet sockets) for a script
/// that shares the host's network namespace.
pub fn programs_for(network: Network) -> Option<Vec<Program>> {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    {
        let mut out = vec![
            rules::compile("deny-eperm", rules::EPERM, libc::EPERM),
            rules::compile("clone3-enosys", rules::ENOSYS, libc::ENOSYS),
        ];
        if network == Network::Host {
            out.push(rules::compile(
                "deny-network",
                rules::NO_NETWORK,
                libc::EPERM,
            ));
        }
        return Some(out);
    }
    #[allow(unreachable_code)]
    {
        let _ = network;
        None
    }
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
    ]
    .concat();
    #[allow(unreachable_code)]
    Vec::new()
}

/// Sets `no_new_privs` and installs `progs` (each a [`Program::bytes`]) into the
/// calling thread, in order. It allocates nothing and makes only `prctl` calls, so a
/// `pre_exec` closure may call it between fork and exec; children inherit the filters.
pub fn apply_prepared(progs: &[Vec<u8>]) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for bytes in progs {
        let len = bytes.len() / INSTRUCTION_LEN;
        if len == 0 || bytes.len() % INSTRUCTION_LEN != 0 || len > usize::from(u16::MAX) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let prog = libc::sock_fprog {
            len: len as u16,
            // The kernel copies the instructions in; it never writes through this.
            filter: bytes.as_ptr() as *mut libc::sock_filter,
        };
        let mode = libc::SECCOMP_MODE_FILTER as libc::c_ulong;
        // SAFETY: `prog` points at `len` whole instructions that outlive the call.
        let rc = unsafe { libc::prctl(libc::PR_SET_SECCOMP, mode, &prog as *const _) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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

/// Writes each program into `dir` once, under a name that holds a hash of its bytes
/// (runs share them), and returns their paths in install order; `None` where there
/// is no filter for this processor.
pub fn install(dir: &Path) -> io::Result<Option<Vec<PathBuf>>> {
    install_for(dir, Network::Namespaced)
}

/// [`install`] of [`programs_for`] `network`.
pub fn install_for(dir: &Path, network: Network) -> io::Result<Option<Vec<PathBuf>>> {
    let Some(programs) = programs_for(network) else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir)?;
    let mut paths = Vec::with_capacity(programs.len());
    for program in &programs {
        let hash: String = Sha256::digest(&program.bytes)[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let path = dir.join(format!("seccomp-{}-{hash}.bpf", program.name));
        // A file of that name with other bytes (cut short by a crash) is replaced.
        if std::fs::read(&path).ok().as_deref() != Some(program.bytes.as_slice()) {
            write_atomically(&path, &program.bytes)?;
        }
        paths.push(path);
    }
    Ok(Some(paths))
}

/// Writes `bytes` to a new temporary file beside `path` (created exclusively, so no
/// other writer or planted file is reused) and renames it into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tries = 0;
    let (tmp, mut file) = loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp);
        match opened {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            opened => break (tmp, opened?),
        }
    };
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}
