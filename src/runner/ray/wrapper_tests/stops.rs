//! The wrapper's stops: Ray's (a timeout's or Ctrl-C's, which ask for the script's
//! stacks first) and its watchdog's, at `--max-procs` or `--memory-limit`.

use super::*;

/// Starts the wrapper on `script` and returns it with its log once the script has
/// printed `ready`.
fn start_job(
    tmp: &Path,
    script: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    std::fs::write(tmp.join("job/script.py"), script).unwrap();
    let mut child = Command::new("python3")
        .args(["-m", WRAPPER_MODULE])
        .current_dir(tmp.join("job"))
        .env("PYTHONPATH", tmp.join("pkg"))
        .env("GNN_OUTPUT_DIR", tmp.join("node/data"))
        .env("TMPDIR", tmp.join("node-tmp"))
        .env("JAX_RUNNER_RAY_SCRIPT", "script.py")
        .env("JAX_RUNNER_RAY_NONCE", "n1")
        .env("JAX_RUNNER_RAY_MAX_RETURN", "1000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, out)
}

#[test]
fn a_stopped_job_still_reports() {
    let tmp = setup();
    let script = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(1)\n";
    let (mut child, mut out) = start_job(tmp.path(), script);
    // What Ray's stop sends first.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut out, &mut log).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let r = find(&log, "n1").expect("a return block after the stop");
    assert_eq!(r.report.signal, Some(libc::SIGTERM));
    assert_eq!(r.stdout, b"ready\n");
}

/// As a local stop does, a stop on Ray asks for the script's stacks before SIGTERM: a
/// script whose own SIGTERM handler exits still names the line its time ran out at.
#[test]
fn a_stopped_job_writes_its_stacks_before_sigterm() {
    let tmp = setup();
    let script = format!(
        "import faulthandler, signal, sys, time\n\
         faulthandler.register({}, all_threads=True)\n\
         signal.signal(signal.SIGTERM, lambda *_: (print('left', flush=True), sys.exit(0)))\n\
         def spin():\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.01)\n\
         spin()\n",
        crate::runner::child::stop::STACKS_SIGNAL
    );
    let (mut child, mut out) = start_job(tmp.path(), &script);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut out, &mut log).unwrap();
    child.wait().unwrap();
    let r = find(&log, "n1").expect("a return block after the stop");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(
        stderr.matches("(most recent call first):").count(),
        1,
        "{stderr}"
    );
    // In `spin`, from its first line on (it prints `ready` there).
    assert!(stderr.contains(" in spin\n"), "{stderr}");
    // The stacks first, then the script's own handler.
    assert_eq!(r.stdout, b"ready\nleft\n");
}

/// The wrapper holds a job to `--max-procs` and `--memory-limit` as the runner's
/// watchdog holds a local attempt: the script's group is killed at the first sample
/// past either, and the report says which. Below both, the same scripts end on their
/// own.
#[test]
fn the_wrapper_holds_a_job_to_its_limits() {
    const THREADS: &str = "import threading, time\n\
        park = threading.Event()\n\
        ts = [threading.Thread(target=park.wait, daemon=True) for _ in range(100)]\n\
        [t.start() for t in ts]\n\
        time.sleep(1)\n";
    const MEMORY: &str = "import time\n\
        b = bytearray(200 << 20)\n\
        b[::4096] = b'x' * len(b[::4096])\n\
        time.sleep(1)\n";
    let tmp = setup();
    let t = tmp.path();
    let data = t.join("node/data");
    for (body, env, hit) in [
        (
            THREADS,
            ("JAX_RUNNER_RAY_MAX_PROCS", "64"),
            Some("process_limit"),
        ),
        (THREADS, ("JAX_RUNNER_RAY_MAX_PROCS", "200"), None),
        (
            MEMORY,
            ("JAX_RUNNER_RAY_MEMORY_LIMIT", "104857600"),
            Some("memory_limit"),
        ),
        (MEMORY, ("JAX_RUNNER_RAY_MEMORY_LIMIT", "419430400"), None),
    ] {
        let child = start_with(t, "script.py", body, &data, &[env]);
        let out = child.wait_with_output().unwrap();
        let log = String::from_utf8(out.stdout).unwrap();
        let r = find(&log, "n1").expect("a return block");
        assert_eq!(
            r.report.limit_hit.as_deref(),
            hit,
            "{env:?}: {:?}",
            r.report
        );
        let signal = hit.map(|_| libc::SIGKILL);
        assert_eq!(r.report.signal, signal, "{env:?}: {:?}", r.report);
    }
}

/// Ray gives up on a job by killing the job's own processes (its supervisor died, a
/// stop's grace ran out), and the wrapper is one of them: however the wrapper ends, the
/// script's group, which has its own, ends with it: the script and a child it started.
#[test]
fn a_killed_wrapper_takes_the_scripts_group_with_it() {
    let tmp = setup();
    let script = "import os, subprocess, sys, time\n\
        kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n\
        print('ready', os.getpid(), kid.pid, flush=True)\n\
        time.sleep(120)\n";
    let mut child = start_with(tmp.path(), "script.py", script, &tmp.path().join("d"), &[]);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let pids: Vec<i32> = line
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("{line}"))
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{line}");
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    // Gone, or a zombie its new parent has yet to reap: nothing of it runs.
    let running = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pids.iter().any(|p| running(*p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|p| running(*p)).collect();
    for p in &left {
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "the script's processes outlived the wrapper: {left:?}"
    );
}
