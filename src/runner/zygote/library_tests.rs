//! The zygote program's first step, against the system's `python3`: a confined zygote
//! that lacks jax-runner's library fails to start, whether the library was not named
//! or did not load; an unconfined one goes on without it (no keeper).

use std::io::Write;
use std::process::{Command, Stdio};

use super::{LOADER, ZYGOTE};

/// Runs the program with `args` and no control socket, and returns its exit status's
/// success and its standard error. Every start here fails (the runner's socket, fd 3,
/// is not there); what matters is where.
fn start(args: &[&str]) -> (bool, String) {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(LOADER)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    // The program may end before it has read all of its stdin: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(ZYGOTE.as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A library path that is not there.
const MISSING: &str = "--library=/nonexistent/libjax_runner_confine.so";

#[test]
fn a_confined_zygote_without_its_library_fails_at_the_library() {
    for mode in ["--confined", "--sandboxed"] {
        for args in [vec![mode, MISSING], vec![mode]] {
            let (ok, err) = start(&args);
            assert!(!ok, "{args:?}: {err}");
            assert!(err.contains("in load_library"), "{args:?}: {err}");
        }
    }
    // Unconfined, the same gaps are no error: the program goes on, to the socket.
    for args in [vec![MISSING], vec![]] {
        let (ok, err) = start(&args);
        assert!(!ok && err.contains("Traceback"), "{args:?}: {err}");
        assert!(!err.contains("in load_library"), "{args:?}: {err}");
    }
}
