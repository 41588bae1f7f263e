//! The seccomp filters as installed: jax-runner compiles the programs
//! (`sandbox/seccomp.rs`); this installs them, between fork and exec or in the warm
//! zygote's child.

use std::io;

/// The size of one BPF instruction (`struct sock_filter`).
pub const INSTRUCTION_LEN: usize = std::mem::size_of::<libc::sock_filter>();

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
