//! The process's ties to the runner: it dies with it, none of the runner's
//! descriptors reaches the script, and what the runner hands a start (its plan, the
//! seccomp programs) comes in sealed memory files.

/// `bytes` in a memory file named `name`, rewound and sealed against any change (its
/// holders can only read it), closed on exec unless the caller clears that for the
/// start it hands it to. A pipe could fill before the reader starts.
pub fn sealed_memfd(name: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
    use std::io::{Seek, Write};
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.rewind()?;
    fcntl_add_seals(
        &file,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )?;
    Ok(file.into())
}

/// In the child, between fork and exec: die with the parent. The parent's PID is
/// checked afterwards because the parent may already be gone.
///
/// The death signal fires when the *thread* that forked exits, so children must be
/// spawned from threads that live as long as the run (tokio's worker threads).
pub fn die_with_parent(parent: libc::pid_t) -> std::io::Result<()> {
    // rustix's calls here are raw system calls: async-signal-safe, no allocation.
    use rustix::process::{getppid, set_parent_process_death_signal, Signal};
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Marks every descriptor from `first` up close-on-exec: what the runner's parent left
/// open (a CI harness's fd 251, a file, a folder) never reaches a script. One
/// `close_range` call (Linux 5.11+); older kernels get each open descriptor marked.
pub fn cloexec_from(first: u32) -> std::io::Result<()> {
    let Err(err) = cloexec_range(first) else {
        return Ok(());
    };
    if !matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EINVAL)) {
        return Err(err);
    }
    for entry in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if fd >= first as i32 {
            // SAFETY: borrowed only for this call; a descriptor closed meanwhile gives
            // EBADF, which is ignored.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
        }
    }
    Ok(())
}

/// The one `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)` call: no allocation, safe
/// between fork and exec (where an older kernel's `ENOSYS` is left to the marks the
/// runner made at start).
pub fn cloexec_range(first: u32) -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments only; it marks, it closes nothing.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_left_open_do_not_survive_an_exec() {
        use rustix::io::{fcntl_getfd, fcntl_setfd, FdFlags};
        let file = tempfile::tempfile().unwrap();
        // As a parent that forgot CLOEXEC would leave it.
        fcntl_setfd(&file, FdFlags::empty()).unwrap();
        cloexec_from(3).unwrap();
        assert!(fcntl_getfd(&file).unwrap().contains(FdFlags::CLOEXEC));
    }
}
