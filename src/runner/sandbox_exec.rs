//! `jax-runner __sandbox-exec`: the last step of a cold sandboxed start, inside the
//! sandbox just before the script. It gives the scratch folders (`/tmp`, `/dev/shm`,
//! `$HOME`) to the sandbox user and drops to it (a root runner's bwrap hands over with
//! only the four capabilities that needs), sets `no_new_privs`,
//! installs the seccomp filters, marks every descriptor above 2 close-on-exec, and
//! replaces itself with the interpreter. Started only by the runner, never by a user.
//!
//! Arguments: `[--user UID:GID] [--own PATH]... [--seccomp-fd N]... -- PROGRAM ARGS...`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use super::identity::become_user;

/// Exit code when the sandbox could not be completed: the script never started.
pub const FAILED: i32 = 70;

/// What the runner asked for.
#[derive(Debug, Default, PartialEq)]
struct Request {
    user: Option<(u32, u32)>,
    own: Vec<std::path::PathBuf>,
    seccomp_fds: Vec<i32>,
    program: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Request, String> {
    let mut r = Request::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = |it: &mut std::slice::Iter<OsString>| {
            it.next()
                .and_then(|v| v.to_str().map(str::to_string))
                .ok_or_else(|| format!("{} needs a value", arg.to_string_lossy()))
        };
        match arg.to_str() {
            Some("--user") => {
                let v = value(&mut it)?;
                let (u, g) = v.split_once(':').ok_or("--user takes UID:GID")?;
                let n = |s: &str| s.parse::<u32>().map_err(|e| format!("--user {v}: {e}"));
                r.user = Some((n(u)?, n(g)?));
            }
            Some("--own") => {
                let path = it.next().ok_or("--own needs a value")?;
                r.own.push(path.into());
            }
            Some("--seccomp-fd") => {
                let v = value(&mut it)?;
                r.seccomp_fds
                    .push(v.parse().map_err(|e| format!("--seccomp-fd {v}: {e}"))?);
            }
            Some("--") => {
                r.program = it.cloned().collect();
                break;
            }
            _ => return Err(format!("unexpected argument {}", arg.to_string_lossy())),
        }
    }
    if r.program.is_empty() {
        return Err("no program after --".into());
    }
    Ok(r)
}

/// Reads a filter program the runner passed on an inherited descriptor, then closes it.
fn read_program(fd: i32) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    // SAFETY: the runner passed this descriptor for us alone; we own it from here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A scratch folder (a fresh tmpfs) made the sandbox user's alone: mode 0700, its
/// owner, never following a link.
fn give(dir: &std::path::Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Gid, Mode, Uid, CWD};
    rustix::fs::chmodat(CWD, dir, Mode::from_raw_mode(0o700), AtFlags::empty())?;
    let (u, g) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    rustix::fs::chownat(CWD, dir, u, g, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Runs the helper; returns only when it failed (with [`FAILED`]).
pub fn run(args: &[OsString]) -> i32 {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("jax-runner sandbox: failed to {what}: {e}");
        FAILED
    };
    let req = match parse(args) {
        Ok(r) => r,
        Err(e) => return fail("read its arguments", &e),
    };
    let mut programs = Vec::new();
    for fd in &req.seccomp_fds {
        match read_program(*fd) {
            Ok(p) => programs.push(p),
            Err(e) => return fail("read the seccomp filter", &e),
        }
    }
    if let Some((uid, gid)) = req.user {
        for dir in &req.own {
            if let Err(e) = give(dir, uid, gid) {
                return fail(&format!("give {} to uid {uid}", dir.display()), &e);
            }
        }
        if let Err(e) = become_user(uid, gid) {
            return fail(&format!("become uid {uid}"), &e);
        }
    }
    if let Err(e) = super::seccomp::apply_prepared(&programs) {
        return fail("install the seccomp filter", &e);
    }
    if let Err(e) = super::sys::cloexec_from(3) {
        return fail("close the runner's descriptors", &e);
    }
    let err = std::process::Command::new(&req.program[0])
        .args(&req.program[1..])
        .exec();
    fail(&format!("start {}", req.program[0].to_string_lossy()), &err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_parse_and_bad_ones_say_why() {
        let r = parse(&os(&[
            "--user",
            "61184:61184",
            "--own",
            "/tmp",
            "--seccomp-fd",
            "5",
            "--seccomp-fd",
            "6",
            "--",
            "python",
            "s.py",
        ]))
        .unwrap();
        assert_eq!(r.user, Some((61184, 61184)));
        assert_eq!(r.own, [std::path::PathBuf::from("/tmp")]);
        assert_eq!(r.seccomp_fds, [5, 6]);
        assert_eq!(r.program, os(&["python", "s.py"]));
        assert!(parse(&os(&["--user", "x", "--", "p"])).is_err());
        assert!(parse(&os(&["--seccomp-fd", "3"])).is_err());
    }
}
