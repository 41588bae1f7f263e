//! `--backend slurm` against a real one-node Slurm (slurmctld, slurmd, munged) that
//! each test starts in a network namespace of its own and stops by PID
//! (`common::slurm`). The runner runs inside that namespace too, as a login node
//! would; the tree is on the one file system the node and the runner share.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::slurm::{Node, TestSlurm};
use common::slurm_run::*;
use common::*;
use serde_json::Value;

/// Every data file under a results folder's `data/`, relative, with its bytes.
fn data_files(results: &Path) -> Vec<(String, Vec<u8>)> {
    let data = results.join("data");
    let mut files: Vec<_> = walkdir::WalkDir::new(&data)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".jax-runner"))
        .map(|e| {
            let rel = e.path().strip_prefix(&data).unwrap().display().to_string();
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_sample_gives_the_same_results_as_a_local_run() {
    let Some(slurm) = TestSlurm::for_test("the_sample_gives_the_same_results_as_a_local_run")
    else {
        return;
    };
    let (local, remote) = (Tree::new(), Tree::new());
    for t in [&local, &remote] {
        copy_tree(&repo().join("output"), &t.root());
    }
    let out = local.run(&["-q"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&slurm, &remote.root(), &["-q"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (lm, rm) = (local.metrics(), remote.metrics());
    let ids = script_ids(&lm);
    assert_eq!(ids.len(), 3);
    assert_eq!(ids, script_ids(&rm));
    for id in &ids {
        let (l, r) = (local.result(id), result(&remote.root(), id));
        for field in ["status", "device_used", "device_mismatch", "exit_code"] {
            assert_eq!(l[field], r[field], "{id}: {field}");
        }
        let job = &r["attempts"][0]["slurm"];
        assert!(
            job["job_id"].as_str().is_some_and(|j| !j.is_empty()),
            "{r:#}"
        );
        assert_eq!(
            job["reported"], true,
            "the node recorded the attempt: {r:#}"
        );
        assert!(r["attempts"][0]["peak_memory_mb"].as_f64().unwrap_or(0.0) > 0.0);
    }
    let (l, r) = (
        data_files(&local.results_dir()),
        data_files(&remote.results_dir()),
    );
    assert!(!l.is_empty());
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&l),
        names(&r),
        "the same data files, written in place"
    );
    for ((name, a), (_, b)) in l.iter().zip(&r) {
        if name.ends_with("simulation_results.json") {
            // Every simulated value bit for bit; only the script's own timing differs.
            let values = |bytes: &[u8]| {
                let mut v: Value = serde_json::from_slice(bytes).unwrap();
                v.as_object_mut().unwrap().remove("elapsed_s");
                v
            };
            assert!(values(a) == values(b), "{name}: the same values");
        }
    }
    assert!(slurm.queued().is_empty(), "nothing left queued");
}

#[test]
fn a_script_over_its_timeout_is_timed_out_and_its_job_ends() {
    let Some(slurm) =
        TestSlurm::for_test("a_script_over_its_timeout_is_timed_out_and_its_job_ends")
    else {
        return;
    };
    let t = Tree::new();
    t.write(
        "jax/slow.py",
        "import time\nprint('up', flush=True)\ntime.sleep(120)\n",
    );
    let started = Instant::now();
    let out = run(&slurm, &t.root(), &["--timeout", "3", "--grace", "1"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(100));
    let r = result(&t.root(), "slow");
    assert_eq!(r["status"], "timed_out", "{r:#}");
    assert_eq!(r["attempts"][0]["slurm"]["reported"], true, "{r:#}");
    assert!(slurm.queued().is_empty());
}

#[test]
fn a_failing_script_is_retried_as_a_new_job() {
    let Some(slurm) = TestSlurm::for_test("a_failing_script_is_retried_as_a_new_job") else {
        return;
    };
    let t = Tree::new();
    // Fails on its first run, succeeds on its second: the marker is in its own folder.
    t.write(
        "jax/flaky.py",
        "import os, sys\nm = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ran')\n\
         first = not os.path.exists(m)\nopen(m, 'a').close()\nif first:\n    raise SystemExit('first try fails')\nprint('ok')\n",
    );
    let out = run(
        &slurm,
        &t.root(),
        &[
            "--sandbox",
            "off",
            "--retries",
            "2",
            "--retry-on",
            "script_error",
            "--retry-delay",
            "0",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = result(&t.root(), "flaky");
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{r:#}");
    assert_eq!(attempts[0]["class"], "script_error", "{r:#}");
    let ids: Vec<_> = attempts
        .iter()
        .map(|a| a["slurm"]["job_id"].clone())
        .collect();
    assert_ne!(ids[0], ids[1], "each attempt is a job of its own");
    // The node wrote the first attempt's stderr in place, in the run's own log.
    let log = attempts[0]["stderr_log"].as_str().unwrap();
    let first = std::fs::read_to_string(log).unwrap();
    assert!(first.contains("first try fails"), "{log}: {first}");
}

#[test]
fn ctrl_c_cancels_every_queued_and_running_job() {
    let Some(slurm) = TestSlurm::for_test("ctrl_c_cancels_every_queued_and_running_job") else {
        return;
    };
    let t = Tree::new();
    for i in 0..4 {
        t.write(
            &format!("jax/sleep{i}.py"),
            "import time\ntime.sleep(300)\n",
        );
    }
    // Four jobs on a node of fewer CPUs: some run, the rest wait in the queue.
    let mut child = spawn(&slurm, &t.root(), &["--jobs", "4", "--sandbox", "off"]);
    let jobs = wait_for_jobs(&slurm, 4);
    assert_eq!(jobs.len(), 4, "four jobs submitted: {jobs:?}");
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        slurm.queued().is_empty(),
        "squeue is empty: {:?}",
        slurm.queued()
    );
    for i in 0..4 {
        let r = result(&t.root(), &format!("sleep{i}"));
        assert_eq!(r["status"], "interrupted", "{r:#}");
        assert_eq!(r["attempts"][0]["slurm"]["cancelled"], true, "{r:#}");
    }
}

#[test]
fn a_gpu_run_on_a_partition_without_gpus_fails_before_submitting() {
    let Some(slurm) =
        TestSlurm::for_test("a_gpu_run_on_a_partition_without_gpus_fails_before_submitting")
    else {
        return;
    };
    let t = Tree::new();
    t.write("jax/a.py", "print(1)\n");
    let mut cmd = runner(&slurm, &t.root(), &["--slurm-partition", "gpu"]);
    cmd.args(["--device", "gpu"]);
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("has no GPU"), "{}", stderr(&out));
    assert!(slurm.queued().is_empty());
    let out = runner(&slurm, &t.root(), &["--slurm-partition", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
}

#[test]
fn the_next_run_cancels_what_a_killed_runner_left_queued() {
    let Some(slurm) = TestSlurm::for_test("the_next_run_cancels_what_a_killed_runner_left_queued")
    else {
        return;
    };
    let t = Tree::new();
    t.write("jax/sleep.py", "import time\ntime.sleep(300)\n");
    let mut child = spawn(&slurm, &t.root(), &["--sandbox", "off"]);
    let left = wait_for_jobs(&slurm, 1);
    assert_eq!(left.len(), 1);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        slurm.queued(),
        left,
        "the killed runner's job is still queued"
    );
    let next = Tree::new();
    next.write("jax/quick.py", "print('quick')\n");
    let out = run(&slurm, &next.root(), &["--sandbox", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&left[0]),
        "the run says what it cancelled: {}",
        stderr(&out)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !slurm.queued().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(slurm.queued().is_empty(), "{:?}", slurm.queued());
}

#[test]
fn a_job_that_can_never_start_fails_with_slurms_reason_and_leaves_nothing_queued() {
    let Some(slurm) = TestSlurm::for_test(
        "a_job_that_can_never_start_fails_with_slurms_reason_and_leaves_nothing_queued",
    ) else {
        return;
    };
    let t = Tree::new();
    t.write("jax/a.py", "print(1)\n");
    // `short` allows a minute per job; the runner asks --timeout plus its margin.
    let out = run(
        &slurm,
        &t.root(),
        &["--slurm-partition", "short", "--timeout", "5m"],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = result(&t.root(), "a");
    assert_eq!(r["status"], "failed", "{r:#}");
    // Slurm's own reason, whichever it gives (PartitionTimeLimit, PartitionConfig).
    assert!(
        r.to_string()
            .contains("it can never start: PENDING (Partition"),
        "{r:#}"
    );
    assert!(slurm.queued().is_empty(), "{:?}", slurm.queued());
}

#[test]
fn fail_fast_now_cancels_the_jobs_still_running() {
    let Some(slurm) = TestSlurm::for_test("fail_fast_now_cancels_the_jobs_still_running") else {
        return;
    };
    let t = Tree::new();
    t.write("jax/a_sleeps.py", "import time\ntime.sleep(300)\n");
    // Fails once the sleeper's job runs, so the stop has a running job to cancel.
    t.write(
        "jax/b_fails.py",
        "import time\ntime.sleep(3)\nraise SystemExit('b fails')\n",
    );
    let out = run(
        &slurm,
        &t.root(),
        &["--jobs", "2", "--fail-fast=now", "--sandbox", "off"],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(slurm.queued().is_empty(), "{:?}", slurm.queued());
    let r = result(&t.root(), "a_sleeps");
    assert_eq!(r["status"], "interrupted", "{r:#}");
    assert_eq!(r["attempts"][0]["slurm"]["cancelled"], true, "{r:#}");
    assert_eq!(result(&t.root(), "b_fails")["status"], "failed");
}

#[test]
fn without_slurms_commands_the_run_says_what_is_missing() {
    let t = Tree::new();
    t.write("jax/a.py", "print(1)\n");
    let out = t
        .cmd()
        .args(["--backend", "slurm"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("failed to run sinfo"), "{err}");
    assert!(
        err.contains("sbatch, squeue, scontrol, scancel, sinfo"),
        "{err}"
    );
    assert!(!t.results_dir().join("a_results.json").exists());
}

/// A GPU job whose node has no working GPU for jax fails with a GPU environment error,
/// and the script is run again as a CPU job, as a local run falls back.
#[test]
fn a_gpu_job_that_finds_no_gpu_falls_back_to_a_cpu_job() {
    if !prereq::require(
        prereq::Prereq::Slurm,
        prereq::slurm(),
        "slurm, GPU fallback",
    ) {
        return;
    }
    let slurm = TestSlurm::start_with(Node {
        fake_gpu: true,
        ..Node::default()
    })
    .unwrap();
    let t = Tree::new();
    t.fixture("ok_jax.py", "jax/ok_jax.py");
    let mut cmd = runner(&slurm, &t.root(), &["--slurm-partition", "gpu"]);
    cmd.args(["--device", "gpu"]);
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = result(&t.root(), "ok_jax");
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{r:#}");
    assert_eq!(attempts[0]["device"], "gpu", "{r:#}");
    assert_eq!(attempts[0]["class"], "gpu_environment", "{r:#}");
    assert_eq!(attempts[1]["device"], "cpu", "{r:#}");
    assert_eq!(r["device_used"], "cpu", "{r:#}");
    let jobs: Vec<_> = attempts
        .iter()
        .map(|a| a["slurm"]["job_id"].clone())
        .collect();
    assert_ne!(jobs[0], jobs[1], "the CPU attempt is a job of its own");
    assert!(slurm.queued().is_empty());
}
