//! `jax-runner __sandbox-exec`: the last step of every sandboxed cold start, just
//! before the script: inside bwrap, or in place of it (the built-in layer alone). It
//! applies the attempt's [`Confinement`] (the built-in sandbox's namespaces and mounts,
//! the scratch folders given to the sandbox user, Landlock's rules, the switch to the
//! sandbox user, the seccomp filters, every descriptor above 2 closed) and replaces
//! itself with the interpreter. A root runner's bwrap hands over with only the four
//! capabilities the switch needs. Started only by the runner, never by a user.
//!
//! Arguments: `--plan-fd N [--seccomp-fd N]... -- PROGRAM ARGS...`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use super::apply::Confinement;

/// Exit code when the sandbox could not be completed: the script never started.
pub const FAILED: i32 = 70;

/// What the runner asked for.
#[derive(Debug, Default, PartialEq)]
struct Request {
    plan_fd: Option<i32>,
    seccomp_fds: Vec<i32>,
    program: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Request, String> {
    let mut r = Request::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let fd = |it: &mut std::slice::Iter<OsString>| {
            let v = it
                .next()
                .and_then(|v| v.to_str())
                .ok_or_else(|| format!("{} needs a value", arg.to_string_lossy()))?;
            v.parse::<i32>()
                .map_err(|e| format!("{} {v}: {e}", arg.to_string_lossy()))
        };
        match arg.to_str() {
            Some("--plan-fd") => r.plan_fd = Some(fd(&mut it)?),
            Some("--seccomp-fd") => r.seccomp_fds.push(fd(&mut it)?),
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
    let plan = match req.plan_fd.map(Confinement::from_fd) {
        Some(Ok(plan)) => plan,
        Some(Err(e)) => return fail("read the sandbox's plan", &e),
        None => Confinement::default(),
    };
    let mut programs = Vec::new();
    for fd in &req.seccomp_fds {
        match read_program(*fd) {
            Ok(p) => programs.push(p),
            Err(e) => return fail("read the seccomp filter", &e),
        }
    }
    if let Err((what, e)) = plan.apply(&programs) {
        return fail(what, &e);
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
            "--plan-fd",
            "4",
            "--seccomp-fd",
            "5",
            "--seccomp-fd",
            "6",
            "--",
            "python",
            "s.py",
        ]))
        .unwrap();
        assert_eq!(r.plan_fd, Some(4));
        assert_eq!(r.seccomp_fds, [5, 6]);
        assert_eq!(r.program, os(&["python", "s.py"]));
        assert!(parse(&os(&["--plan-fd", "x", "--", "p"])).is_err());
        assert!(parse(&os(&["--seccomp-fd", "3"])).is_err());
    }
}
