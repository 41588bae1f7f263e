//! What each sandbox layer can do on this machine, found by trying it: bwrap's own
//! probe, a user namespace made in a forked child, the Landlock ABI query, the seccomp
//! filter for this processor, the uid map, and a per-attempt cgroup made and removed.
//! Each probe is a system call or one short process, so all of them together take well
//! under a second. [`advice`] turns what they saw into findings.

mod advice;

use std::io;
use std::process::Command;

pub use advice::expected_layers;

use crate::model::doctor::{
    BwrapProbe, CgroupProbe, LandlockProbe, SandboxReport, SandboxUserProbe, SeccompProbe,
    UsernsProbe,
};
use crate::runner::limits::AttemptCgroup;
use crate::sandbox::bwrap;
use crate::sandbox::user::{FIRST_UID, LAST_UID};
use crate::sandbox::{landlock, seccomp};

/// Tries every layer and judges each.
pub fn inspect() -> SandboxReport {
    let root = rustix::process::geteuid().is_root();
    let mut report = SandboxReport {
        layers: Vec::new(),
        root,
        builtin_namespaces: crate::sandbox::layers::namespaces_here(),
        bwrap: bwrap(),
        user_namespaces: user_namespaces(),
        landlock: landlock_probe(),
        seccomp: seccomp_probe(),
        sandbox_user: sandbox_user(root),
        cgroups: cgroups(),
        findings: Vec::new(),
    };
    advice::judge(&mut report);
    report
}

/// bwrap as the runner would find and try it.
fn bwrap() -> BwrapProbe {
    use crate::error::SandboxError;
    match bwrap::detect() {
        Ok(b) => BwrapProbe {
            path: Some(b.path.display().to_string()),
            version: Some(b.version),
            works: true,
            userns: b.userns,
            privileged: b.privileged,
            too_old: false,
            error: None,
        },
        Err(e) => {
            // The bwrap `detect` looked for: the process's PATH, as it starts it.
            let path = crate::paths::find_on_path("bwrap", std::env::var_os("PATH").as_deref());
            let version = match &e {
                SandboxError::TooOld { version } => Some(version.clone()),
                _ => path.as_ref().and_then(|p| {
                    let out = Command::new(p).arg("--version").output().ok()?;
                    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
                }),
            };
            BwrapProbe {
                path: path.map(|p| p.display().to_string()),
                version: version.filter(|v| !v.is_empty()),
                too_old: matches!(e, SandboxError::TooOld { .. }),
                error: Some(e.to_string()),
                ..BwrapProbe::default()
            }
        }
    }
}

/// Whether a forked child can make a user namespace and map its own uid in it (what
/// bwrap does for an ordinary user; AppArmor's restriction lets the first step pass and
/// refuses the second), and the settings that decide.
fn user_namespaces() -> UsernsProbe {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // Built before the fork: the child only makes system calls.
    let uid_map = format!("{uid} {uid} 1\n").into_bytes();
    let gid_map = format!("{gid} {gid} 1\n").into_bytes();
    // SAFETY: between fork and exec only unshare, open, write and close, on buffers
    // built before the fork.
    let made = unsafe {
        crate::sandbox::layers::try_in_child(move || {
            rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER)?;
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/gid_map", &gid_map)?;
            write_proc(c"/proc/self/uid_map", &uid_map)
        })
    };
    let sysctl = |name: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/proc/sys/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    UsernsProbe {
        works: made.is_ok(),
        error: made.err().map(|e| errno_name(&e)),
        apparmor_restricted: sysctl("kernel/apparmor_restrict_unprivileged_userns").map(|v| v != 0),
        max_user_namespaces: sysctl("user/max_user_namespaces"),
        unprivileged_clone: sysctl("kernel/unprivileged_userns_clone").map(|v| v != 0),
    }
}

/// Writes `bytes` to a `/proc` file, without allocating (between fork and exec).
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: open, write and close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// The kernel's Landlock ABI, or why there is none.
fn landlock_probe() -> LandlockProbe {
    let kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm")
        .ok()
        .map(|s| s.trim().to_string());
    let abi = landlock::abi();
    let newest = landlock::covers(u8::MAX);
    let covers: Vec<String> = abi
        .map(landlock::covers)
        .unwrap_or_default()
        .into_iter()
        .map(String::from)
        .collect();
    LandlockProbe {
        abi,
        not_covered: newest
            .into_iter()
            .filter(|c| !covers.iter().any(|have| have == c))
            .map(String::from)
            .collect(),
        covers,
        error: abi.is_none().then(landlock_errno),
        kernel,
        lsm,
    }
}

/// Why the kernel answers no Landlock ABI: the error of `landlock::query` (`ENOSYS`:
/// not in this kernel; `EOPNOTSUPP`: built in, not enabled at boot).
fn landlock_errno() -> String {
    match landlock::query() {
        Ok(v) => format!("the kernel answered {v}"),
        Err(e) if e.raw_os_error().is_some() => errno_name(&e),
        Err(e) => e.to_string(),
    }
}

fn seccomp_probe() -> SeccompProbe {
    let mut calls: Vec<&str> = seccomp::denied().iter().map(|d| d.call).collect();
    calls.sort_unstable();
    calls.dedup();
    SeccompProbe {
        arch: std::env::consts::ARCH.into(),
        filter: seccomp::programs().is_some(),
        granted_calls: seccomp::granted(),
        denied_calls: calls.len(),
        kernel: std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:"))),
    }
}

/// Root's scripts switch to a uid of the dynamic range, which this user namespace must
/// map; an ordinary user's run as that user.
fn sandbox_user(root: bool) -> SandboxUserProbe {
    let uid = rustix::process::getuid().as_raw();
    if !root {
        return SandboxUserProbe {
            mapped: true,
            uid,
            ..SandboxUserProbe::default()
        };
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    SandboxUserProbe {
        switched: true,
        first_uid: Some(FIRST_UID),
        last_uid: Some(LAST_UID),
        mapped: maps(&map, FIRST_UID, LAST_UID),
        uid,
    }
}

/// Whether one line of a `uid_map` (`inside outside count`) covers `first..=last`.
fn maps(uid_map: &str, first: u32, last: u32) -> bool {
    uid_map.lines().any(|line| {
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        matches!(n[..], [inside, _, count] if inside <= u64::from(first) && inside + count > u64::from(last))
    })
}

/// Makes (and removes) an attempt cgroup the way a run does, asking for both limits.
fn cgroups() -> CgroupProbe {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("doctor-{}-{n}", std::process::id());
    // Limits no process meets: nothing joins the probe's cgroup.
    let probe = AttemptCgroup::create(&name, Some(100_000), Some(1 << 40));
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let version = hierarchy(
        &read("/proc/self/cgroup"),
        &read("/sys/fs/cgroup/cgroup.controllers"),
    );
    CgroupProbe {
        version: version.into(),
        pids: probe.as_ref().is_some_and(AttemptCgroup::enforces_pids),
        memory: probe.as_ref().is_some_and(AttemptCgroup::enforces_memory),
    }
}

/// `v1` when a v1 hierarchy holds `pids` or `memory` (`/proc/self/cgroup`), `v2` when
/// the unified one has them (`root_controllers`: its `cgroup.controllers`), `none`
/// otherwise.
fn hierarchy(proc_cgroup: &str, root_controllers: &str) -> &'static str {
    let mut unified = false;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers) = (parts.next(), parts.next().unwrap_or(""));
        if controllers.split(',').any(|c| c == "pids" || c == "memory") {
            return "v1";
        }
        unified |= line.starts_with("0::");
    }
    if unified
        && root_controllers
            .split_whitespace()
            .any(|c| c == "pids" || c == "memory")
    {
        "v2"
    } else {
        "none"
    }
}

/// `EPERM`, `ENOSYS`, … for the errors these probes meet; the message otherwise.
fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EUSERS) => "EUSERS",
        _ => return e.to_string(),
    };
    name.into()
}

#[cfg(test)]
mod tests;
