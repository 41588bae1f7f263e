//! No script reads another process (issue 34's audit): the runner's plumbing beside a
//! script (its PID namespace's init, its slot's zygote, holding the slot's earlier
//! requests; its parent), the other script running beside it and any other process
//! its view shows keep their environment, memory map and memory from it, in every
//! mode: as root and as the ordinary test
//! user, warm and cold, bwrap on PATH or hidden. A user's warm script under bwrap read
//! its init's memory before the init was made non-dumpable (`seal` in
//! `src/runner/zygote_sandbox.py`).

mod common;

use common::modes::*;
use common::user::*;
use common::*;
use serde_json::Value;

fn case(account: Account, how: How) {
    let case = format!("reads others {}", describe(&account, how));
    if !root_here(how, &case) || !bwrap_here(how, &case) {
        return;
    }
    // Two scripts at once, each reading two seconds in: where they share a PID
    // namespace (the built-in layer) each sees the other running.
    let (tree, mut cmd) = setup(&account, how, "reads_others.py");
    // Another source: two of one family would not run at once (one compiles first).
    let body = std::fs::read_to_string(tree.root().join("m/jax/reads_others.py")).unwrap();
    tree.write("n/jax/reads_others_too.py", &format!("import sys\n{body}"));
    account.give(&tree.root());
    cmd.args(["--jobs", "2", "--env", "READ_AFTER=2"]);
    let out = output(&account, how, cmd);
    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
    let mut both = Vec::new();
    for id in ["reads_others", "reads_others_too"] {
        let r = tree.result(id);
        check_start(&r, how, &account, &case);
        let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
        let found: Value = serde_json::from_str(log.trim()).unwrap();
        // A script alone in its PID namespace still sees its init.
        assert!(
            !found["seen"].as_array().unwrap().is_empty(),
            "{case}: {found}"
        );
        assert_eq!(found["readable"], serde_json::json!([]), "{case}: {found}");
        // The runner still reads the script itself, dumpable as before: its
        // proportional set size (where no cgroup counts it, as for an ordinary user).
        if !account.is_root() {
            assert_eq!(r["memory_source"], "pss", "{case}: {r}");
        }
        both.push(found);
    }
    // Outside a PID namespace of its own (its PID is the host's), each saw the other
    // running, and read nothing of it.
    let me = |f: &Value| f["me"].as_u64().unwrap();
    if me(&both[0]) > 2 && me(&both[1]) > 2 {
        for (one, other) in [(&both[0], &both[1]), (&both[1], &both[0])] {
            let saw = one["seen"].as_array().unwrap();
            assert!(
                saw.contains(&other["me"]),
                "{case}: {one} did not see {other}"
            );
        }
    }
}

#[test]
fn as_user_warm_with_bwrap_a_script_reads_no_other_process() {
    case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_user_cold_with_bwrap_a_script_reads_no_other_process() {
    case(
        Account::user(),
        How {
            warm: false,
            ..WARM_BWRAP
        },
    );
}

#[test]
fn as_user_warm_without_bwrap_a_script_reads_no_other_process() {
    case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_script_reads_no_other_process() {
    case(Account::user(), COLD);
}

#[test]
fn as_root_warm_with_bwrap_a_script_reads_no_other_process() {
    if let Some(root) = Account::root("reads others as root, warm, bwrap on PATH") {
        case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_cold_with_bwrap_a_script_reads_no_other_process() {
    if let Some(root) = Account::root("reads others as root, cold, bwrap on PATH") {
        case(
            root,
            How {
                warm: false,
                ..WARM_BWRAP
            },
        );
    }
}

#[test]
fn as_root_warm_without_bwrap_a_script_reads_no_other_process() {
    if let Some(root) = Account::root("reads others as root, warm, bwrap hidden") {
        case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_a_script_reads_no_other_process() {
    if let Some(root) = Account::root("reads others as root, cold, bwrap hidden") {
        case(root, COLD);
    }
}
