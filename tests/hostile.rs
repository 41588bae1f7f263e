//! The sandbox as a boundary on the host (issue 23), with default options: the attacks
//! of `fixtures/hostile_root.py`, as root and as an ordinary user, warm and cold, each
//! one run beside an ordinary script that must still work; and a compilation cache
//! entry planted by one tree's script, which must not reach another tree's.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;

use common::user::*;
use common::*;
use serde_json::Value;

/// The host's side of the catalogue (traps set before a run, checked after it).
use common::catalogue::{check_attacks, root_only_folder, Traps as Host};

/// One runner invocation, with default options apart from `--python`, `--device cpu`
/// and (cold) `--warm-start off`, over a tree holding the attacker and an ordinary
/// script, with the host's descriptors left open to it.
fn run_catalogue(account: &Account, tree: &Tree, host: &Host, how: How) -> Output {
    command_for(account, tree, host, how)
        .output()
        .expect("the runner starts")
}

/// The catalogue's tree filled and the runner's command for it, not yet started.
fn command_for(account: &Account, tree: &Tree, host: &Host, how: How) -> std::process::Command {
    tree.fixture("hostile_root.py", "attacker/jax/hostile_root.py");
    tree.fixture("tree_victim.py", "victim/jax/tree_victim.py");
    tree.fixture("sibling_data.json", "victim/jax/sibling_data.json");
    account.give(&tree.root());
    let mut cmd = account.runner(tree);
    if !how.warm {
        cmd.args(["--warm-start", "off"]);
    }
    if !how.bwrap {
        // No bwrap on PATH: a root runner's built-in sandbox.
        cmd.env("PATH", "/nonexistent");
    }
    for value in host.env() {
        cmd.arg("--env").arg(value);
    }
    host.inherited.hand_to(&mut cmd);
    cmd
}

/// The run is whole: exit 0, a result for each script, the metrics counting both.
fn complete_results(tree: &Tree, out: &Output, case: &str) -> [Value; 2] {
    assert_eq!(code(out), 0, "{case}: {}", stderr(out));
    let totals = &tree.metrics()["totals"];
    assert_eq!(totals["total_scripts"], 2, "{case}: {totals}");
    [tree.result("hostile_root"), tree.result("tree_victim")]
}

/// Sandboxed (the default run), and started the way the case asked.
fn check_how_they_ran(results: &[Value; 2], how: How, failures: &mut Vec<String>) {
    let warm = how.warm;
    for r in results {
        let sandbox = &r["sandbox"];
        let layered = sandbox["layers"].as_array().is_some_and(|l| !l.is_empty());
        let kind = if how.bwrap { "bwrap" } else { "builtin" };
        if sandbox["kind"] != kind || !layered {
            failures.push(format!("{} ran outside {kind}: {sandbox}", r["id"]));
        }
        let start = &r["attempts"][0]["start"];
        let expected = if warm { "warm" } else { "cold" };
        if start != expected {
            failures.push(format!(
                "{} started {start}, not {expected}: {}",
                r["id"], r["attempts"][0]["cold_start_reason"]
            ));
        }
    }
}

/// The script's private `/tmp` and `$HOME` belong to the user it runs as.
fn check_scratch(report: &Value, failures: &mut Vec<String>) {
    let uid = &report["ids"]["uid"];
    for (dir, owner) in report["scratch_owners"].as_object().into_iter().flatten() {
        if owner != uid {
            failures.push(format!("{dir} belongs to uid {owner}, the script is {uid}"));
        }
    }
}

/// From the host: no file under the results has a setuid or setgid bit, and when the
/// runner is root nothing a script wrote is owned by root (the runner's own hidden
/// `.jax-runner-*` files aside).
fn check_files(tree: &Tree, results: &[Value; 2], account: &Account, failures: &mut Vec<String>) {
    for entry in walkdir::WalkDir::new(tree.results_dir()) {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().mode();
        if entry.file_type().is_file() && mode & 0o6000 != 0 {
            failures.push(format!("{} has mode {mode:o}", entry.path().display()));
        }
    }
    if !account.is_root() {
        return;
    }
    for r in results {
        let data = Path::new(r["data_dir"].as_str().unwrap());
        for entry in walkdir::WalkDir::new(data).min_depth(1) {
            let entry = entry.unwrap();
            let runners = entry
                .file_name()
                .to_string_lossy()
                .starts_with(".jax-runner-");
            if !runners && entry.metadata().unwrap().uid() == 0 {
                failures.push(format!("{} is owned by root", entry.path().display()));
            }
        }
    }
}

/// The ordinary script read its own source and its sibling, and wrote its data folder.
fn check_victim(victim: &Value, failures: &mut Vec<String>) {
    if victim["status"] != "succeeded" {
        failures.push(format!(
            "the ordinary script did not succeed: {} {}",
            victim["status"], victim["stderr_tail"]
        ));
        return;
    }
    let data = Path::new(victim["data_dir"].as_str().unwrap());
    let written = read_json(&data.join("simulation_results.json"));
    if written["sibling"] != 42 || written["success"] != true {
        failures.push(format!("the ordinary script wrote {written}"));
    }
}

/// How a case runs: warm or cold, with bwrap on PATH or without (a root runner's
/// built-in sandbox), and whether the tree sits in a folder only root may enter.
#[derive(Debug, Clone, Copy)]
struct How {
    warm: bool,
    bwrap: bool,
    private_parent: bool,
}

const WARM: How = How {
    warm: true,
    bwrap: true,
    private_parent: false,
};
const COLD: How = How {
    warm: false,
    ..WARM
};

/// One case of the matrix: who runs it, and how.
fn catalogue_case(account: Account, how: How) {
    let How {
        warm,
        bwrap,
        private_parent,
    } = how;
    let case = format!(
        "as {}, {}{}{}",
        account.who.name(),
        if warm { "warm" } else { "cold" },
        if bwrap { "" } else { ", no bwrap" },
        if private_parent {
            ", tree in a 0700 root folder"
        } else {
            ""
        }
    );
    if bwrap && !prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), &case) {
        return;
    }
    let host = Host::new(&account);
    let parent = private_parent.then(|| root_only_folder("jr-private-"));
    let tree = match &parent {
        Some(p) => account.tree_in(p.path()),
        None => account.tree_in(host.project()),
    };
    let started = std::time::Instant::now();
    let out = run_catalogue(&account, &tree, &host, how);
    eprintln!("{case}: the run took {:.1?}", started.elapsed());
    let results = complete_results(&tree, &out, &case);
    let report_path = Path::new(results[0]["data_dir"].as_str().unwrap()).join("hostile_root.json");
    let report = read_json(&report_path);
    let mut failures = Vec::new();
    check_how_they_ran(&results, how, &mut failures);
    check_attacks(&report, &mut failures);
    check_scratch(&report, &mut failures);
    check_files(&tree, &results, &account, &mut failures);
    failures.extend(host.what_got_through());
    check_victim(&results[1], &mut failures);
    assert!(
        failures.is_empty(),
        "{case}: {} check(s) failed:\n  {}\nthe script ran as uid_map {:?}, ids {}, CapEff {}",
        failures.len(),
        failures.join("\n  "),
        report["uid_map"],
        report["ids"],
        report["cap_eff"]
    );
}

#[test]
fn as_root_warm_nothing_reaches_the_host() {
    if let Some(root) = Account::root("as root, warm") {
        catalogue_case(root, WARM);
    }
}

#[test]
fn as_root_cold_nothing_reaches_the_host() {
    if let Some(root) = Account::root("as root, cold") {
        catalogue_case(root, COLD);
    }
}

#[test]
fn as_user_warm_nothing_reaches_the_host() {
    catalogue_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_nothing_reaches_the_host() {
    catalogue_case(Account::user(), COLD);
}

/// "Trees inside folders only root can enter keep working": the ordinary script still
/// reads its own source and the tree, and writes its data folder.
#[test]
fn as_root_warm_a_tree_in_a_private_folder_keeps_working() {
    if let Some(root) = Account::root("as root, warm, tree in a 0700 folder") {
        let how = How {
            private_parent: true,
            ..WARM
        };
        catalogue_case(root, how);
    }
}

#[test]
fn as_root_cold_a_tree_in_a_private_folder_keeps_working() {
    if let Some(root) = Account::root("as root, cold, tree in a 0700 folder") {
        let how = How {
            private_parent: true,
            ..COLD
        };
        catalogue_case(root, how);
    }
}

/// Without bwrap a root runner still never hands a script the host's uid 0: its
/// built-in sandbox (mount, network, IPC and UTS namespaces of the script's own, the
/// sandbox uid, the seccomp filter) holds the same catalogue, the tree in a 0700
/// folder included.
#[test]
fn as_root_without_bwrap_warm_nothing_reaches_the_host() {
    if let Some(root) = Account::root("as root, warm, no bwrap") {
        let how = How {
            bwrap: false,
            private_parent: true,
            ..WARM
        };
        catalogue_case(root, how);
    }
}

#[test]
fn as_root_without_bwrap_cold_nothing_reaches_the_host() {
    if let Some(root) = Account::root("as root, cold, no bwrap") {
        let how = How {
            bwrap: false,
            private_parent: true,
            ..COLD
        };
        catalogue_case(root, how);
    }
}

/// One run of `fixture` alone in a new tree of `account`'s, with default options (the
/// default compilation cache in the account's cache folder); returns what the script
/// wrote to `file` in its data folder.
fn run_alone(account: &Account, fixture: &str, file: &str, case: &str) -> Value {
    let tree = account.tree();
    tree.fixture(fixture, &format!("model/jax/{fixture}"));
    account.give(&tree.root());
    let out = account.runner(&tree).output().expect("the runner starts");
    assert_eq!(code(&out), 0, "{case}: {fixture}: {}", stderr(&out));
    let id = fixture.trim_end_matches(".py");
    let r = tree.result(id);
    assert_eq!(r["status"], "succeeded", "{case}: {r}");
    read_json(&Path::new(r["data_dir"].as_str().unwrap()).join(file))
}

/// A script of one tree overwrites its `x + 1` entry in the compilation cache with
/// the bytes of `x * 0 + 100`; a later run of another tree computing `x + 1` must
/// still get 2s.
fn cache_plant_case(account: Account) {
    let case = format!("as {}", account.who.name());
    let plant = run_alone(&account, "cache_poisoner.py", "poison.json", &case);
    let value = run_alone(&account, "cache_victim.py", "value.json", &case);
    assert_eq!(
        value["value"],
        serde_json::json!([2.0, 2.0, 2.0]),
        "{case}: another tree's script loaded what the poisoner planted in its cache \
         ({}, cache {})",
        plant["planted"],
        plant["cache"]
    );
}

#[test]
fn as_root_a_cache_entry_planted_by_one_tree_does_not_reach_another() {
    if let Some(root) = Account::root("the cache plant as root") {
        cache_plant_case(root);
    }
}

#[test]
fn as_user_a_cache_entry_planted_by_one_tree_does_not_reach_another() {
    cache_plant_case(Account::user());
}

/// A root runner in a container that grants no `CAP_SYS_ADMIN` (Docker's default) can
/// make neither bwrap's namespaces nor its own: its scripts still never run as the
/// host's root. They run as the sandbox user under Landlock and the seccomp filter,
/// which hold the catalogue with the uid's own rights; the tree must be one that user
/// may read (no fresh folders past a 0700 one without a mount namespace).
#[test]
fn as_root_without_cap_sys_admin_scripts_still_drop_to_the_sandbox_user() {
    let Some(account) = Account::root("as root, no CAP_SYS_ADMIN") else {
        return;
    };
    let host = Host::new(&account);
    let tree = account.tree();
    // Default options: warm start is asked for and cannot be had.
    let how = How {
        bwrap: false,
        ..WARM
    };
    let mut cmd = command_for(&account, &tree, &host, how);
    // SAFETY: one prctl between fork and exec; the runner then starts without the
    // capability, as in such a container.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            const CAP_SYS_ADMIN: libc::c_ulong = 21;
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    common::user::set_mode(&tree.root(), 0o755);
    let out = cmd.output().expect("the runner starts");
    let results = complete_results(&tree, &out, "no CAP_SYS_ADMIN");
    for r in &results {
        let sandbox = &r["sandbox"];
        assert_eq!(sandbox["kind"], "builtin", "{sandbox}");
        // No namespaces: Landlock (where the kernel has it), the uid and the filter.
        let layers: Vec<&str> = sandbox["layers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l.as_str())
            .filter(|l| !l.starts_with("landlock-v"))
            .collect();
        assert_eq!(layers, ["uid", "seccomp"], "{sandbox}");
        assert!(sandbox["uid"].as_u64().is_some_and(|u| u != 0), "{sandbox}");
        // Warm all the same: the zygote's child confines each script without namespaces.
        assert_eq!(r["attempts"][0]["start"], "warm", "{r}");
    }
    let report_path = Path::new(results[0]["data_dir"].as_str().unwrap()).join("hostile_root.json");
    let report = read_json(&report_path);
    let mut failures = Vec::new();
    check_attacks(&report, &mut failures);
    check_files(&tree, &results, &account, &mut failures);
    failures.extend(host.what_got_through());
    check_victim(&results[1], &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n  "));
}
