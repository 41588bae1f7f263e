//! The one-node Slurm cluster the Slurm backend's tests stand on (tests/common/slurm.rs):
//! a job submitted to it runs and Slurm reports how it ended, dropping it leaves no
//! process behind, and it cannot be reached from outside its network namespace.

mod common;

use std::time::{Duration, Instant};

use common::slurm::{field, processes_in_netns, TestSlurm, TERMINAL};

/// `sbatch --parsable ARGS` in the cluster; returns the job id.
fn submit(cluster: &TestSlurm, args: &[&str]) -> String {
    let out = cluster
        .command("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sbatch failed: {}",
        common::stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_job_runs_and_its_exit_code_is_seen() {
    let Some(cluster) = TestSlurm::for_test("a_job_runs_and_its_exit_code_is_seen") else {
        return;
    };
    let output = cluster.dir().join("o.txt");
    let id = submit(
        &cluster,
        &[
            &format!("--output={}", output.display()),
            "--wrap",
            "echo hi; exit 3",
        ],
    );
    let line = cluster.wait_for_job(&id, &TERMINAL, Duration::from_secs(60));
    assert_eq!(field(&line, "JobState"), Some("FAILED"), "{line}");
    assert_eq!(field(&line, "ExitCode"), Some("3:0"), "{line}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "hi\n");
}

#[test]
fn stopping_the_cluster_leaves_no_process() {
    let Some(cluster) = TestSlurm::for_test("stopping_the_cluster_leaves_no_process") else {
        return;
    };
    let id = submit(&cluster, &["--output=/dev/null", "--wrap", "sleep 300"]);
    cluster.wait_for_job(&id, &["RUNNING"], Duration::from_secs(60));
    let netns = cluster.netns().to_path_buf();
    let mut pids: Vec<u32> = cluster
        .daemon_pids()
        .into_iter()
        .map(|(_, pid)| pid)
        .collect();
    pids.push(cluster.netns_pid());
    // The job's processes are there: slurmstepd, the batch script, its sleep.
    let before = processes_in_netns(&netns);
    assert!(before.len() > pids.len(), "no job processes in {before:?}");

    drop(cluster);

    let gone = |pid: &u32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(
        pids.iter().all(gone),
        "still there: {:?}",
        pids.iter().filter(|p| !gone(p)).collect::<Vec<_>>()
    );
    assert_eq!(
        processes_in_netns(&netns),
        Vec::<u32>::new(),
        "left in {}",
        netns.display()
    );
}

#[test]
fn the_cluster_is_unreachable_outside_its_namespace() {
    let Some(cluster) = TestSlurm::for_test("the_cluster_is_unreachable_outside_its_namespace")
    else {
        return;
    };
    // The host's own network namespace, the cluster's slurm.conf: 127.0.0.1 there is
    // not the cluster's. The client gives up after MessageTimeout (5 s), well inside 15.
    let start = Instant::now();
    let out = std::process::Command::new("timeout")
        .args(["15", "squeue"])
        .envs(cluster.env())
        .output()
        .unwrap();
    let err = common::stderr(&out);
    assert_eq!(common::code(&out), 1, "squeue reached a controller: {err}");
    assert!(err.contains("Unable to contact slurm controller"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(14),
        "{:?}",
        start.elapsed()
    );
    // …while inside it the same command answers.
    let inside = cluster.command("squeue").output().unwrap();
    assert!(inside.status.success(), "{}", common::stderr(&inside));
}
