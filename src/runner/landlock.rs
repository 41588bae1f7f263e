//! The built-in sandbox's Landlock layer: which access rights this kernel lets an
//! unprivileged process give up (Landlock's ABI version), so every script can be held
//! to reading what it needs and writing only its own folders, with no bwrap, no root
//! and no user namespace.

/// The kernel's Landlock ABI version, `None` where it has no Landlock (older than
/// 5.13, or not in the boot's list of security modules).
pub fn abi() -> Option<u8> {
    // LANDLOCK_CREATE_RULESET_VERSION: with no attributes the call answers the ABI.
    const VERSION: libc::c_uint = 1;
    // SAFETY: a query: no pointer is read or written (NULL, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            VERSION,
        )
    };
    u8::try_from(v).ok().filter(|v| *v > 0)
}

/// What Landlock at `abi` holds a script to, in words, for results, `doctor` and the
/// README's table: the filesystem from ABI 1 (5.13), renames across folders from 2
/// (5.19), truncation from 3 (6.2), TCP bind and connect from 4 (6.7), device ioctls
/// from 5 (6.10), signals and abstract unix sockets to its own domain from 6 (6.12).
pub fn covers(abi: u8) -> Vec<&'static str> {
    let mut out = vec!["reads and writes of files"];
    if abi >= 2 {
        out.push("renames and links across folders");
    }
    if abi >= 3 {
        out.push("truncation");
    }
    if abi >= 4 {
        out.push("TCP bind and connect");
    }
    if abi >= 5 {
        out.push("ioctls on devices");
    }
    if abi >= 6 {
        out.push("signals and abstract unix sockets beyond its own processes");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_is_the_highest_the_kernel_makes_a_ruleset_for() {
        use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, ABI};
        // Making a ruleset restricts nothing; as a hard requirement it fails for rights
        // the kernel does not know.
        let makes = |v: i32| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(ABI::from(v)))
                .and_then(|r| r.create())
                .is_ok()
        };
        match abi() {
            Some(v) => assert!(makes(i32::from(v)), "ABI {v} answered but no ruleset made"),
            None => assert!(!makes(1)),
        }
        assert!(covers(1).len() < covers(4).len());
        assert!(covers(6).iter().any(|c| c.contains("signals")));
        assert!(!covers(5).iter().any(|c| c.contains("signals")));
    }
}
