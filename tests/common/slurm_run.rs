//! Running jax-runner against the test Slurm (`slurm.rs`): the runner inside the
//! cluster's namespaces, as root or as an account, and what its run left.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::slurm::TestSlurm;
use super::user::Account;
use super::{python, read_json, Tree};

/// `jax-runner --backend slurm` on `tree`, inside the cluster's namespace.
pub fn runner(slurm: &TestSlurm, tree: &Path, args: &[&str]) -> Command {
    let mut cmd = slurm.command(assert_cmd::cargo::cargo_bin("jax-runner"));
    cmd.arg("--output-dir")
        .arg(tree)
        .arg("--python")
        .arg(python())
        .args(["--compilation-cache", "off", "--device", "cpu"])
        .args(["--backend", "slurm"])
        .args(args)
        .env_remove("JAX_PLATFORM_NAME");
    cmd
}

pub fn run(slurm: &TestSlurm, tree: &Path, args: &[&str]) -> Output {
    runner(slurm, tree, args).output().unwrap()
}

pub fn spawn(slurm: &TestSlurm, tree: &Path, args: &[&str]) -> Child {
    runner(slurm, tree, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn result(tree: &Path, id: &str) -> Value {
    read_json(&tree.join(format!("execution_results/jax/{id}_results.json")))
}

/// Waits (bounded) until the cluster's queue holds `n` jobs; their ids.
pub fn wait_for_jobs(slurm: &TestSlurm, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = slurm.queued();
        if q.len() >= n || Instant::now() > deadline {
            return q;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `jax-runner --backend slurm` on `tree` as `account` (its jobs then run as it too),
/// in the cluster's namespaces, which only root may enter: setpriv drops to the
/// account once inside.
pub fn as_account(slurm: &TestSlurm, account: &Account, tree: &Tree) -> Command {
    let mut cmd = slurm.command("setpriv");
    cmd.arg(format!("--reuid={}", account.uid))
        .arg(format!("--regid={}", account.gid))
        .args(["--clear-groups", "--"])
        .arg(&account.bin)
        .arg("--output-dir")
        .arg(tree.root())
        .arg("--python")
        .arg(&account.python)
        .args(["--device", "cpu", "--compilation-cache", "off"])
        .args(["--backend", "slurm"])
        .env("HOME", account.home())
        .env("JAX_RUNNER_CACHE_DIR", account.cache_dir());
    cmd
}
