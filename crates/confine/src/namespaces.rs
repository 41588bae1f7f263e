//! A view made by the runner's own code: the script's process takes mount, network,
//! IPC and UTS namespaces of its own (and a PID namespace, for a warm start's init;
//! a worker slot's script shares the slot's network namespace instead) and applies
//! the same mount steps bwrap would be given (see `mount.rs`). A root
//! runner's cold start without bwrap applies them in `__sandbox-exec`; every warm
//! start in a view, in the zygote's child, through the library (`ffi.rs`).
//! Remounts keep the flags the kernel locked on an inherited mount, so the same steps
//! work inside a user namespace (an ordinary user's zygote under bwrap).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::mount::MountStep;

/// One step, its path (and a scratch tmpfs's options) ready for the kernel.
#[derive(Debug)]
struct Prepared {
    step: MountStep,
    path: CString,
    /// A scratch step's tmpfs options: the owner's and, when bounded, `size=`.
    data: Option<CString>,
}

/// The steps of one attempt, ready to apply in the child.
#[derive(Debug)]
pub struct MountNamespace {
    steps: Vec<Prepared>,
    /// One source descriptor per bind, filled in the child (made here, so the child
    /// does not allocate).
    sources: Vec<Option<rustix::fd::OwnedFd>>,
    /// The working directory, entered again through the new view (the process entered
    /// the host's before the mounts).
    cwd: CString,
    /// A PID namespace too: the caller's next child is its init.
    pid: bool,
    /// A network namespace of its own (else the slot's, see [`slot_namespaces`]).
    network: bool,
}

impl MountNamespace {
    pub fn new(
        steps: &[MountStep],
        cwd: &std::path::Path,
        user: Option<crate::user::SandboxUser>,
        pid: bool,
        network: bool,
    ) -> std::io::Result<MountNamespace> {
        let c = |p: &std::path::Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
        };
        // The sandbox user's own, or open to all; bounded when the step says so.
        let owner = match user {
            Some(u) => format!("mode=0700,uid={},gid={}", u.uid, u.gid),
            None => "mode=1777".to_string(),
        };
        let data = |s: &MountStep| match s {
            MountStep::Scratch { size, .. } => {
                let bound = size.map(|b| format!(",size={b}")).unwrap_or_default();
                Some(CString::new(format!("{owner}{bound}")).expect("no NUL in numbers"))
            }
            _ => None,
        };
        let steps = steps
            .iter()
            .map(|s| {
                Ok(Prepared {
                    step: s.clone(),
                    path: c(s.path())?,
                    data: data(s),
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let binds = steps.iter().filter(|p| is_bind(&p.step)).count();
        let mut sources = Vec::with_capacity(binds);
        sources.resize_with(binds, || None);
        Ok(MountNamespace {
            steps,
            sources,
            cwd: c(cwd)?,
            pid,
            network,
        })
    }

    /// In the child, between fork and exec: the namespaces, then the steps. Every
    /// bind's source is opened before any tmpfs can hide it, and bound from its
    /// descriptor. No allocation.
    pub fn apply(&mut self) -> std::io::Result<()> {
        use rustix::thread::UnshareFlags as U;
        // SAFETY: this process is single-threaded (a child between fork and exec), so
        // no other thread shares the namespaces or descriptors being changed.
        let pid = match self.pid {
            true => U::NEWPID,
            false => U::empty(),
        };
        let net = match self.network {
            true => U::NEWNET,
            false => U::empty(),
        };
        unsafe {
            rustix::thread::unshare_unsafe(U::NEWNS | U::NEWIPC | U::NEWUTS | net | pid)?;
        }
        rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        let binds = self.steps.iter().filter(|p| is_bind(&p.step));
        for (n, p) in binds.enumerate() {
            let flags = OFlags::PATH | OFlags::CLOEXEC;
            self.sources[n] = Some(rustix::fs::open(p.path.as_c_str(), flags, Mode::empty())?);
        }

        let mut n = 0;
        let safe = MountFlags::NOSUID | MountFlags::NODEV;
        for p in &self.steps {
            let path = p.path.as_c_str();
            match &p.step {
                MountStep::Tmpfs(_) => {
                    rustix::mount::mount(c"tmpfs", path, c"tmpfs", safe, Some(c"mode=0755"))?
                }
                MountStep::Scratch { .. } => {
                    rustix::mount::mount(c"tmpfs", path, c"tmpfs", safe, p.data.as_deref())?
                }
                MountStep::Dir(_) => make_dir(path)?,
                MountStep::ReadOnly(_) | MountStep::Writable(_) => {
                    let fd = self.sources[n].take().expect("opened above");
                    n += 1;
                    bind_from(&fd, path)?;
                    let ro = matches!(p.step, MountStep::ReadOnly(_));
                    remount(
                        path,
                        if ro {
                            MountFlags::RDONLY
                        } else {
                            MountFlags::empty()
                        },
                    )?;
                }
                MountStep::Mask(_) => {
                    rustix::mount::mount_bind(c"/dev/null", path)?;
                    remount(path, MountFlags::RDONLY)?;
                }
                MountStep::RemountReadOnly(_) => remount(path, MountFlags::RDONLY)?,
            }
        }
        if self.network {
            loopback_up()?;
        }
        rustix::process::chdir(self.cwd.as_c_str())?;
        Ok(())
    }
}

/// The bind at `path` again, `nosuid` and `nodev` plus `extra`, keeping the flags the
/// kernel locked on the mount it came from (inside a user namespace a remount that
/// drops one is refused).
fn remount(path: &std::ffi::CStr, extra: MountFlags) -> std::io::Result<()> {
    use rustix::fs::StatVfsMountFlags as St;
    let have = rustix::fs::statvfs(path)?.f_flag;
    let mut flags = MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV | extra;
    for (st, ms) in [
        (St::RDONLY, MountFlags::RDONLY),
        (St::NOEXEC, MountFlags::NOEXEC),
        (St::NOATIME, MountFlags::NOATIME),
        (St::NODIRATIME, MountFlags::NODIRATIME),
        (St::RELATIME, MountFlags::RELATIME),
    ] {
        // A read-only source stays so; a writable one becomes read-only only if asked.
        if have.contains(st) && (st != St::RDONLY || extra.contains(MountFlags::RDONLY)) {
            flags |= ms;
        }
    }
    Ok(rustix::mount::mount_remount(path, flags, c"")?)
}

/// The loopback interface of the new network namespace up, as bwrap brings it up.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a datagram socket used for one ioctl on a zeroed `ifreq` naming "lo";
    // both stay local and the socket is closed before returning.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16;
        let rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// For the zygote's child that forks a worker slot's zygote: a PID namespace for its
/// next child (the slot's zygote, its init; this process stays in its own), and a
/// network namespace, its loopback up, that this process and the slot's zygote enter
/// and every script of the slot shares (see `Confinement::slot_network`).
pub fn slot_namespaces() -> std::io::Result<()> {
    use rustix::thread::UnshareFlags as U;
    // SAFETY: only the PID namespace for children and this process's network
    // namespace change; its memory and descriptors are untouched.
    unsafe { rustix::thread::unshare_unsafe(U::NEWPID | U::NEWNET)? };
    loopback_up()
}

/// In the init of a new PID namespace: a `/proc` of its own, its knobs read-only as
/// bwrap leaves them.
pub fn fresh_proc() -> std::io::Result<()> {
    let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    rustix::mount::mount(c"proc", c"/proc", c"proc", flags, None)?;
    for knob in [
        c"/proc/sys",
        c"/proc/sysrq-trigger",
        c"/proc/irq",
        c"/proc/bus",
    ] {
        if rustix::fs::access(knob, rustix::fs::Access::EXISTS).is_ok() {
            rustix::mount::mount_bind_recursive(knob, knob)?;
            remount(knob, MountFlags::RDONLY)?;
        }
    }
    Ok(())
}

fn is_bind(step: &MountStep) -> bool {
    matches!(step, MountStep::ReadOnly(_) | MountStep::Writable(_))
}

/// A folder on the way to a bind, 0755 whatever the umask.
fn make_dir(path: &std::ffi::CStr) -> std::io::Result<()> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o755)) {
        Ok(()) => Ok(rustix::fs::chmod(path, Mode::from_raw_mode(0o755))?),
        Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Binds the folder or file `fd` names onto `target`, making the mount point (a
/// folder, or an empty file) where a fresh tmpfs has none.
fn bind_from(fd: &rustix::fd::OwnedFd, target: &std::ffi::CStr) -> std::io::Result<()> {
    let is_dir = rustix::fs::fstat(fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if is_dir {
        match rustix::fs::mkdir(target, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    } else {
        let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        match rustix::fs::openat(CWD, target, flags, Mode::from_raw_mode(0o644)) {
            Ok(_) | Err(rustix::io::Errno::ISDIR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::mount::mount_bind_recursive(ProcFd::of(fd).as_c_str(), target)?;
    Ok(())
}

/// `/proc/self/fd/N` without allocating: the kernel follows it to the very file the
/// descriptor holds, whatever now hides its path.
struct ProcFd {
    buf: [u8; 32],
}

impl ProcFd {
    fn of(fd: &rustix::fd::OwnedFd) -> ProcFd {
        use rustix::fd::AsRawFd;
        let mut buf = [0u8; 32];
        let prefix = b"/proc/self/fd/";
        buf[..prefix.len()].copy_from_slice(prefix);
        let mut digits = [0u8; 10];
        let mut n = fd.as_raw_fd() as u32;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            buf[prefix.len() + i] = digits[len - 1 - i];
        }
        ProcFd { buf }
    }

    fn as_c_str(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_until_nul(&self.buf).expect("nul-terminated")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fd_paths_are_written_without_allocating() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd: rustix::fd::OwnedFd = file.into();
        use rustix::fd::AsRawFd;
        let want = format!("/proc/self/fd/{}", fd.as_raw_fd());
        assert_eq!(ProcFd::of(&fd).as_c_str().to_str().unwrap(), want);
    }
}
