//! Who a sandboxed script becomes: a root runner's script switches to the run's
//! unprivileged user (jax-runner picks it, `sandbox/user.rs`), every other drops every
//! capability. Only system calls, no allocation: safe between fork and exec.

use std::os::unix::fs::MetadataExt;

/// The unprivileged user a root runner's scripts become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxUser {
    pub uid: u32,
    pub gid: u32,
}

impl SandboxUser {
    /// Whether this user may pass through the folder `meta` describes (its mode bits;
    /// it has no supplementary group and no capability).
    pub fn can_enter(&self, meta: &std::fs::Metadata) -> bool {
        let mode = meta.mode();
        if meta.uid() == self.uid {
            mode & 0o100 != 0
        } else if meta.gid() == self.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    }
}

/// Becomes `uid`/`gid` for good, from root: every capability out of the bounding set
/// (so nothing exec'd can get one back), no supplementary groups, then the gid and uid
/// (which empties the other capability sets), no ambient capabilities, and
/// `no_new_privs`. Only system calls, no allocation: safe between fork and exec.
pub fn become_user(uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::process::{Gid, Uid};
    use rustix::thread as t;
    drop_bounding_set(true)?;
    t::set_thread_groups(&[])?;
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
    t::set_thread_res_gid(g, g, g)?;
    t::set_thread_res_uid(u, u, u)?;
    drop_capabilities()?;
    // Never trust a silent failure to switch.
    if rustix::process::getuid() != u || rustix::process::geteuid() != u {
        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
    }
    // The switch made the process undumpable, which leaves /proc/self to root: an exec
    // would make it dumpable again, and a warm start has none.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)?;
    Ok(())
}

/// Every capability gone from every set (a process in a user namespace of its own,
/// which keeps its ids, holds them all there): the bounding set where the process may
/// change it, then the effective, permitted, inheritable and ambient sets, and
/// `no_new_privs`. Only system calls, no allocation.
pub fn drop_capabilities() -> std::io::Result<()> {
    use rustix::thread as t;
    drop_bounding_set(false)?;
    let none = t::CapabilitySet::empty();
    t::set_capabilities(
        None,
        t::CapabilitySets {
            effective: none,
            permitted: none,
            inheritable: none,
        },
    )?;
    // Kernels before 4.3 have no ambient set.
    match t::clear_ambient_capability_set() {
        Err(rustix::io::Errno::INVAL) | Ok(()) => {}
        Err(e) => return Err(e.into()),
    }
    t::set_no_new_privs(true)?;
    Ok(())
}

/// The bounding set emptied, so nothing exec'd can get a capability back. Without
/// `CAP_SETPCAP` (an ordinary user's script) the kernel refuses, and `must` says
/// whether that is an error.
fn drop_bounding_set(must: bool) -> std::io::Result<()> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only; EINVAL past the last capability.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINVAL) => break,
                Some(libc::EPERM) if !must => break,
                _ => return Err(err),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_enter_follows_the_mode_bits_that_apply() {
        let tmp = tempfile::tempdir().unwrap();
        let me = SandboxUser {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let other = SandboxUser {
            uid: 61999,
            gid: 61999,
        };
        use std::os::unix::fs::PermissionsExt;
        for (mode, mine, theirs) in [(0o700, true, false), (0o711, true, true)] {
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let meta = std::fs::metadata(tmp.path()).unwrap();
            assert_eq!(me.can_enter(&meta), mine, "{mode:o}");
            assert_eq!(other.can_enter(&meta), theirs, "{mode:o}");
        }
    }
}
