//! The built-in sandbox's Landlock layer: which access rights this kernel lets an
//! unprivileged process give up (Landlock's ABI version), so every script can be held
//! to reading what it needs and writing only its own folders, with no bwrap, no root
//! and no user namespace.

use std::path::PathBuf;

/// The plan, and its opening and enforcing, live with the code that applies the
/// confinement (`crates/confine`, `landlock.rs`).
pub use jax_runner_confine::landlock::{prepare, restrict, LandlockPlan};

/// The kernel's Landlock ABI version, `None` where it has no Landlock (older than
/// 5.13, or not in the boot's list of security modules).
pub fn abi() -> Option<u8> {
    query().ok()
}

/// The kernel's answer to the ABI query: the version, or the error that says why there
/// is none (`ENOSYS`: not in this kernel; `EOPNOTSUPP`: built in, not enabled at boot).
pub fn query() -> std::io::Result<u8> {
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
    if v < 0 {
        return Err(std::io::Error::last_os_error());
    }
    u8::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| std::io::Error::other(format!("the kernel answered {v}")))
}

/// What Landlock at `abi` holds a script to, in words, for results, `doctor` and the
/// table in docs/sandbox.md: the filesystem from ABI 1 (5.13), renames across folders from 2
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

/// What a script is granted, in paths of the view it runs in. Nothing else is
/// reachable: Landlock only grants, and these are all it is told.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Readable (and executable): the host's system and `/etc`'s granted entries
    /// (`grants::host_reads`), the interpreter, the script's folder, the telemetry
    /// shim, the folders on `PYTHONPATH`.
    pub read: Vec<PathBuf>,
    /// Writable: the data folder, the private temporary folder (or the view's scratch),
    /// the compilation cache.
    pub write: Vec<PathBuf>,
    /// Devices it reads, writes and sends ioctls to: `grants::DEVICES`, a GPU's nodes.
    pub devices: Vec<PathBuf>,
    /// Files written in place beneath these, none made or removed:
    /// `grants::GPU_WRITES_IN_PLACE` for a GPU attempt.
    pub in_place: Vec<PathBuf>,
}

/// The plan for `grants` at `abi`: every right Landlock knows there handled, reads,
/// writes and devices only where granted, TCP refused, signals and abstract sockets
/// scoped.
pub fn plan(abi: u8, grants: &Grants) -> LandlockPlan {
    use landlock::{Access, AccessFs, AccessNet, Scope, ABI};
    let at = ABI::from(i32::from(abi));
    let read = AccessFs::from_read(at).bits();
    let all = AccessFs::from_all(at).bits();
    let device = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev).bits() & all;
    let mut rules: Vec<(PathBuf, u64)> = grants.read.iter().map(|p| (p.clone(), read)).collect();
    rules.extend(grants.write.iter().map(|p| (p.clone(), all)));
    rules.extend(grants.devices.iter().map(|p| (p.clone(), device)));
    let in_place = (AccessFs::WriteFile | AccessFs::Truncate).bits() & all;
    rules.extend(grants.in_place.iter().map(|p| (p.clone(), in_place)));
    let net = match abi >= 4 {
        true => AccessNet::from_all(at).bits(),
        false => 0,
    };
    let scoped = match abi >= 6 {
        true => (Scope::AbstractUnixSocket | Scope::Signal).bits(),
        false => 0,
    };
    LandlockPlan {
        abi,
        fs: all,
        net,
        scoped,
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Runs `script` in `/bin/sh`, in `cwd`, held to `grants`: its stdout and stderr.
    fn held(v: u8, grants: &Grants, cwd: &Path, script: &str) -> (String, String) {
        let mut ruleset = Some(prepare(&plan(v, grants)).unwrap());
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]).current_dir(cwd);
        // SAFETY: the ruleset was made before the fork; the child only restricts itself.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                restrict(ruleset.take().expect("once"))
            });
        }
        let out = cmd.output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (text(&out.stdout), text(&out.stderr))
    }

    /// A child held to a plan writes only where granted and reads nothing it was not
    /// granted: a folder beside a granted one is as closed as a hidden one.
    #[test]
    fn a_held_child_writes_only_where_granted_and_reads_nothing_else() {
        let Some(v) = abi() else {
            eprintln!("skipped: this kernel has no Landlock");
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let (ok, no) = (tmp.path().join("ok"), tmp.path().join("no"));
        std::fs::create_dir_all(&ok).unwrap();
        std::fs::create_dir_all(&no).unwrap();
        std::fs::write(no.join("secret"), "s").unwrap();
        let grants = Grants {
            read: crate::sandbox::grants::host_reads(),
            write: vec![ok.clone()],
            devices: vec!["/dev/null".into()],
            in_place: Vec::new(),
        };
        let script = "echo x > ok/f && ! cat no/secret 2>/dev/null && \
            ! (echo y > no/g) 2>/dev/null && ! (echo z > f2) 2>/dev/null && echo fine";
        let (said, err) = held(v, &grants, tmp.path(), script);
        assert!(said.contains("fine"), "{said} {err}");
        assert!(ok.join("f").exists());
        assert!(!no.join("g").exists() && !tmp.path().join("f2").exists());
    }

    /// The boundary of the GPU's grant: a thread's name (what CUDA's `cuInit` writes)
    /// is writable with it and not without it, and it makes nothing writable that
    /// was not: `/proc` stays closed to a new file, the granted folders as before.
    #[test]
    fn a_gpu_attempt_names_its_threads_and_nothing_more() {
        let Some(v) = abi() else {
            eprintln!("skipped: this kernel has no Landlock");
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let mut grants = Grants {
            read: crate::sandbox::grants::host_reads(),
            devices: vec!["/dev/null".into()],
            ..Grants::default()
        };
        let script = "(printf cuda-init > /proc/thread-self/comm) 2>/dev/null \
            && echo named; (echo x > f) 2>/dev/null || echo closed";
        let (said, err) = held(v, &grants, tmp.path(), script);
        assert_eq!(said, "closed\n", "without the grant: {err}");
        grants.in_place = crate::sandbox::grants::GPU_WRITES_IN_PLACE
            .iter()
            .map(PathBuf::from)
            .collect();
        let (said, err) = held(v, &grants, tmp.path(), script);
        assert_eq!(said, "named\nclosed\n", "with the grant: {err}");
        assert!(!tmp.path().join("f").exists());
    }

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
