//! `--backend slurm`'s boundaries against the real test Slurm (`common::slurm`): the
//! hostile catalogue confined on the node (as root with and without bwrap, and as an
//! ordinary user, whose jobs run as that user), a node that does not share the tree,
//! a user the nodes do not know, and the compilation cache a sandboxed node writes.

mod common;

use std::path::Path;

use common::slurm::{Node, TestSlurm};
use common::slurm_run::*;
use common::user::Account;
use common::*;

/// The hostile catalogue (`fixtures/hostile_root.py`) as a Slurm job, beside an
/// ordinary script: the node's sandbox holds every attack the local one holds, with
/// bwrap on the node and without it (the built-in layer alone).
fn hostile_case(case: &str, account: Option<Account>, bwrap: bool) {
    use common::catalogue::{check_attacks, Traps};
    let Some(account) = account else {
        return;
    };
    if !prereq::require(prereq::Prereq::Slurm, prereq::slurm(), case) {
        return;
    }
    // The nodes know the user, as a cluster's do.
    let user = (!account.is_root()).then_some((account.uid, account.gid));
    let slurm = TestSlurm::start_with(Node {
        user,
        ..Node::default()
    })
    .unwrap_or_else(|e| panic!("{case}: {e}"));
    let host = Traps::new(&account);
    let tree = account.tree_in(host.project());
    tree.fixture("hostile_root.py", "attacker/jax/hostile_root.py");
    tree.fixture("tree_victim.py", "victim/jax/tree_victim.py");
    tree.fixture("sibling_data.json", "victim/jax/sibling_data.json");
    account.give(&tree.root());
    let mut cmd = as_account(&slurm, &account, &tree);
    // The job inherits the runner's PATH: one with Slurm's commands and no bwrap.
    let bin = tempfile::tempdir().unwrap();
    if !bwrap {
        for tool in [
            "sbatch", "squeue", "scontrol", "scancel", "sinfo", "nsenter", "setpriv",
        ] {
            let real = common::slurm::which(tool).unwrap();
            std::os::unix::fs::symlink(real, bin.path().join(tool)).unwrap();
        }
        cmd.env("PATH", bin.path());
    }
    for value in host.env() {
        cmd.arg("--env").arg(value);
    }
    host.inherited.hand_to(&mut cmd);
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
    let (attacker, victim) = (tree.result("hostile_root"), tree.result("tree_victim"));
    for r in [&attacker, &victim] {
        let job = &r["attempts"][0]["slurm"];
        assert_eq!(job["reported"], true, "{r:#}");
        let layers = job["sandbox_layers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(layers.iter().any(|l| l == "seccomp"), "{case}: {job}");
        assert_eq!(layers.iter().any(|l| l == "bwrap"), bwrap, "{case}: {job}");
    }
    let data = Path::new(attacker["data_dir"].as_str().unwrap());
    let report = read_json(&data.join("hostile_root.json"));
    let mut failures = Vec::new();
    check_attacks(&report, &mut failures);
    failures.extend(host.what_got_through());
    assert_eq!(victim["status"], "succeeded", "{case}: {victim:#}");
    assert!(failures.is_empty(), "{case}: {}", failures.join("\n"));
}

#[test]
fn hostile_scripts_reach_nothing_from_their_node() {
    let case = "slurm, as root, bwrap on the node";
    hostile_case(case, Account::root(case), true);
}

#[test]
fn hostile_scripts_reach_nothing_from_a_node_without_bwrap() {
    let case = "slurm, as root, no bwrap on the node";
    hostile_case(case, Account::root(case), false);
}

/// As on a real cluster: the user's jobs run as the user, confined by what an
/// ordinary user's sandbox has.
#[test]
fn an_ordinary_users_hostile_scripts_reach_nothing_from_their_node() {
    hostile_case(
        "slurm, as a user, bwrap on the node",
        Some(Account::user()),
        true,
    );
}

#[test]
fn a_node_that_cannot_see_the_tree_stops_the_run_with_the_reason() {
    if !prereq::require(
        prereq::Prereq::Slurm,
        prereq::slurm(),
        "slurm, no shared tree",
    ) {
        return;
    }
    let t = Tree::new();
    for i in 0..3 {
        t.write(&format!("jax/s{i}.py"), "print('ran')\n");
    }
    // slurmd (and its jobs) see an empty folder where the tree is.
    let slurm = TestSlurm::start_with(Node {
        hidden: Some(&t.root()),
        ..Node::default()
    })
    .unwrap();
    let out = run(&slurm, &t.root(), &["--jobs", "1"]);
    assert_eq!(
        code(&out),
        2,
        "{}\n{:#}",
        stderr(&out),
        result(&t.root(), "s0")
    );
    let err = stderr(&out);
    assert!(err.contains("a compute node cannot see"), "{err}");
    assert!(err.contains("file system the nodes share"), "{err}");
    // The first job said so; nothing else was submitted, and every script says why.
    let m = read_json(
        &t.root()
            .join("execution_results/jax/performance_metrics.json"),
    );
    assert_eq!(m["totals"]["succeeded"], 0, "{m:#}");
    let ran: usize = (0..3)
        .map(|i| result(&t.root(), &format!("s{i}")))
        .filter(|r| r["attempts"].as_array().is_some_and(|a| !a.is_empty()))
        .count();
    assert_eq!(ran, 1, "one job found it out; the rest never started");
    assert!(slurm.queued().is_empty());
}

/// A sandboxed script can write the compilation cache, so a Slurm run's default cache
/// is a sandboxed run's (one per tree), never the one unsandboxed runs load.
#[test]
fn a_slurm_runs_default_cache_is_the_sandboxed_one_of_its_tree() {
    let Some(slurm) = TestSlurm::for_test("a_slurm_runs_default_cache_is_the_sandboxed_one") else {
        return;
    };
    let t = Tree::new();
    t.write("jax/a.py", "print(1)\n");
    let cache_home = tempfile::tempdir().unwrap();
    let out = slurm
        .command(assert_cmd::cargo::cargo_bin("jax-runner"))
        .arg("--output-dir")
        .arg(t.root())
        .arg("--python")
        .arg(python())
        .args(["--device", "cpu", "--backend", "slurm", "-q"])
        .env("JAX_RUNNER_CACHE_DIR", cache_home.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let cache = t.metrics()["run"]["compilation_cache"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cache.contains("jax-compilation-cache-sandboxed"), "{cache}");
}

/// The runner's user is unknown on the nodes: Slurm requeues the job after each failed
/// launch, and the run fails it with that reason rather than wait for ever.
#[test]
fn a_user_the_nodes_do_not_know_fails_with_the_reason_and_leaves_nothing_queued() {
    let Some(slurm) = TestSlurm::for_test("a user the nodes do not know") else {
        return;
    };
    let account = Account::user();
    if account.is_root() || !common::user::tests_run_as_root() {
        return;
    }
    let tree = account.tree();
    tree.write("jax/a.py", "print(1)\n");
    account.give(&tree.root());
    let out = as_account(&slurm, &account, &tree).output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = tree.result("a");
    assert!(
        r.to_string().contains("its node failed to launch it"),
        "{r:#}"
    );
    assert!(slurm.queued().is_empty(), "{:?}", slurm.queued());
}
