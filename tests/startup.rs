//! Start-up and the run's own files as fault inputs (issue 15): a signal during
//! start-up, an output folder that cannot be read, and a results file system that
//! fills up during the run.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// An interpreter that takes `seconds` to start: the runner's probe waits on it.
fn slow_python(dir: &Path, seconds: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("slow-python");
    let script = format!(
        "#!/bin/sh\nsleep {seconds}\nexec '{}' \"$@\"\n",
        python().display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Waits up to `limit` for the child; kills it and fails when it does not exit.
fn wait_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the runner did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until a process other than the runner (whose own arguments name it) runs
/// `program`: the runner has started it. Fails if the runner exits first or a minute
/// passes.
fn wait_for_process(runner: &mut std::process::Child, program: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = runner.id();
    let started = || {
        processes_mentioning(program.to_str().unwrap())
            .into_iter()
            .any(|p| p != pid)
    };
    while !started() {
        if let Some(status) = runner.try_wait().unwrap() {
            panic!(
                "the runner ended ({status}) before it started {}",
                program.display()
            );
        }
        if Instant::now() > deadline {
            let _ = runner.kill();
            panic!(
                "the runner did not start {} within a minute",
                program.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_signal_during_start_up_exits_130_and_keeps_the_previous_run() {
    for (name, sig) in [
        ("SIGTERM", libc::SIGTERM),
        ("SIGINT", libc::SIGINT),
        ("SIGHUP", libc::SIGHUP),
    ] {
        let t = Tree::new();
        t.fixture("ok_plain.py", "m/jax/ok_plain.py");
        let results = t.results_dir();
        std::fs::create_dir_all(results.join("logs")).unwrap();
        let previous = [
            ("execution_log.txt", "the previous run's log\n"),
            ("ok_plain_results.json", "{\"previous\": true}\n"),
            ("performance_metrics.json", "{\"previous\": true}\n"),
            ("logs/ok_plain.stdout.log", "previous output\n"),
        ];
        for (file, body) in previous {
            std::fs::write(results.join(file), body).unwrap();
        }
        let slow = slow_python(&t.root(), 20);
        let python = slow.to_str().unwrap();
        let mut child = t.spawn(&["--python", python, "--sandbox", "off"]);
        // The probe is sleeping: start-up is under way (the handlers come before it).
        wait_for_process(&mut child, &slow);
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = wait_within(&mut child, Duration::from_secs(10));
        assert_eq!(status.code(), Some(130), "{name}: {status:?}");
        for (file, body) in previous {
            assert_eq!(
                std::fs::read_to_string(results.join(file)).unwrap(),
                body,
                "{name} changed {file}"
            );
        }
    }
}

#[test]
fn an_unreadable_output_dir_is_a_usage_error() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // Others may enter the top folder and write the results; nobody may list `out`.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tmp.path().join("out");
    let results = tmp.path().join("results");
    std::fs::create_dir_all(out.join("m/jax")).unwrap();
    std::fs::write(out.join("m/jax/s.py"), "print(1)\n").unwrap();
    std::fs::create_dir_all(&results).unwrap();
    std::fs::set_permissions(&results, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o311)).unwrap();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"));
    cmd.arg("--output-dir")
        .arg(&out)
        .arg("--results-dir")
        .arg(&results);
    // Root reads every folder: run as nobody then.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        cmd.uid(65534).gid(65534).env("HOME", tmp.path());
    }
    let done = cmd.output().unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(2), "{err}");
    assert!(
        err.contains("failed to read output directory") && err.contains("out"),
        "{err}"
    );
}

/// A small tmpfs, unmounted when dropped. Where it cannot be mounted the test fails,
/// unless `JAX_RUNNER_TEST_SKIP=tmpfs` says so on purpose (then `None`).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str, case: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let done = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        let mounted = match done {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "`mount -t tmpfs` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("`mount` cannot run: {e}")),
        };
        prereq::require(prereq::Prereq::Tmpfs, mounted, case).then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let umount = |extra: &[&str]| {
            std::process::Command::new("umount")
                .args(extra)
                .arg(self.dir.path())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !umount(&[]) {
            umount(&["-l"]);
        }
    }
}

#[test]
fn a_full_results_file_system_stops_new_scripts_and_says_so() {
    let Some(disk) = SmallDisk::mount("2m", "a full results file system") else {
        return;
    };
    let t = Tree::new();
    let ran = t.root().join("ran.txt");
    // Each script writes 1 MiB of output, the runner's own log of it.
    for i in 0..6 {
        t.write(
            &format!("m{i}/jax/flood.py"),
            "import os, sys\n\
             open(os.environ['RAN'], 'a').write(__file__ + '\\n')\n\
             sys.stdout.write(('x' * 1023 + '\\n') * 1024)\n",
        );
    }
    let out = t
        .cmd()
        .args(["--sandbox", "off", "--warm-start", "off", "--no-preflight"])
        .args(["--jobs", "1", "--layout", "plain", "--results-dir"])
        .arg(disk.dir.path())
        .arg("--env")
        .arg(format!("RAN={}", ran.display()))
        .output()
        .unwrap();
    let err = stderr(&out);
    let summary = String::from_utf8_lossy(&out.stdout);
    let started = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .count();
    assert_eq!(code(&out), 2, "{err}\n{summary}");
    assert!(
        (1..6).contains(&started),
        "{started} of 6 scripts started on a full disk"
    );
    assert!(
        err.contains("No space left on device") && err.contains("no script started after that"),
        "{err}"
    );
    // The scripts the halt kept from starting are counted on one line.
    assert!(
        err.contains("   INTR ") && err.contains(" not started"),
        "{err}"
    );
}
