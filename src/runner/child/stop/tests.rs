use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// `python3 -c CODE`, once it has printed its first line (its handlers are set then).
fn python(code: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new("python3")
        .args(["-c", code])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, out)
}

/// Polls `what` for up to 10 s.
fn within(what: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn the_shim_registers_the_signal_the_runner_sends() {
    let registered = format!("faulthandler.register({STACKS_SIGNAL}, all_threads=True)");
    assert!(
        crate::runner::telemetry::SHIM.contains(&registered),
        "the shim must register {STACKS_SIGNAL}"
    );
    // A real-time signal glibc leaves to programs: none of the named ones, which
    // scripts and libraries handle for themselves.
    assert!((libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&STACKS_SIGNAL));
    assert!(!crate::runner::telemetry::SHIM.contains("faulthandler.register(15"));
}

#[test]
fn a_process_that_catches_the_signal_writes_its_stacks_and_runs_on() {
    let code = format!(
        "import faulthandler, sys, time\n\
         faulthandler.register({STACKS_SIGNAL}, all_threads=True)\n\
         def spin():\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.01)\n\
         spin()\n"
    );
    let (mut child, _out) = python(&code);
    let pid = child.id();
    assert!(catches(pid, STACKS_SIGNAL));
    assert!(
        !catches(pid, libc::SIGUSR2),
        "a signal it has no handler for"
    );
    assert!(sys::signal_raw(pid as i32, STACKS_SIGNAL));
    assert!(
        within(|| !pending(pid, STACKS_SIGNAL)),
        "the signal was never taken"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!sys::ended(pid), "asked for its stacks, it must live on");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("(most recent call first):") && err.contains(" in spin\n"),
        "{err}"
    );
}

#[test]
fn a_blocked_signal_stays_pending_and_one_not_caught_is_not_caught() {
    let code = format!(
        "import faulthandler, signal, time\n\
         faulthandler.register({STACKS_SIGNAL}, all_threads=True)\n\
         signal.pthread_sigmask(signal.SIG_BLOCK, {{{STACKS_SIGNAL}}})\n\
         print('ready', flush=True)\ntime.sleep(60)\n"
    );
    let (mut child, _out) = python(&code);
    let pid = child.id();
    assert!(!pending(pid, STACKS_SIGNAL));
    assert!(sys::signal_raw(pid as i32, STACKS_SIGNAL));
    assert!(
        within(|| pending(pid, STACKS_SIGNAL)),
        "a blocked signal waits"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(pending(pid, STACKS_SIGNAL), "and goes on waiting");
    child.kill().unwrap();
    child.wait().unwrap();

    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    assert!(within(|| sys::state(sleeper.id()) == Some('S')));
    assert!(
        !catches(sleeper.id(), STACKS_SIGNAL),
        "sleep handles nothing"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}
