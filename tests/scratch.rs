//! The scratch counts against `--memory-limit` (issue 30, item 7): a script that parks
//! 3 × 700 MB of files in its private `/tmp`, `/dev/shm` and `$HOME`, memory no process
//! maps, is stopped under `--memory-limit 300M` and its peak shows what it held, as
//! root (cgroup, or watchdog) and as an ordinary user (watchdog), with bwrap and
//! without, warm and cold. Beside it in each run, the same script writing 20 MB to
//! each place succeeds.

mod common;

use common::user::*;
use common::*;
use serde_json::Value;

/// How a case runs.
#[derive(Debug, Clone, Copy)]
struct How {
    warm: bool,
    /// bwrap on PATH, or hidden from it (`PATH=/nonexistent`): a root runner's own
    /// namespaces, an ordinary user's Landlock alone with a private folder.
    bwrap: bool,
    /// `--sandbox landlock`: no view, the private folder on the host's disk.
    layer_alone: bool,
}

const LIMIT: &str = "300M";

fn case(account: Account, how: How) {
    let name = format!(
        "as {}, {}, {}",
        account.who.name(),
        if how.warm { "warm" } else { "cold" },
        match (how.layer_alone, how.bwrap) {
            (true, _) => "--sandbox landlock",
            (false, true) => "bwrap on PATH",
            (false, false) => "bwrap hidden",
        }
    );
    if how.bwrap
        && !how.layer_alone
        && !prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), &name)
    {
        return;
    }
    let tree = account.tree();
    let fixture = tree.fixture("fills_scratch.py", "big/jax/fills_scratch.py");
    let body = std::fs::read_to_string(&fixture).unwrap();
    tree.write(
        "small/jax/fills_little.py",
        &format!("import os\nos.environ['FILL_MB'] = '20'\n{body}"),
    );
    account.give(&tree.root());
    if how.layer_alone {
        // Without a mount namespace no fresh folder opens the tree to the sandbox user.
        set_mode(&tree.root(), 0o755);
    }
    let mut cmd = account.runner(&tree);
    cmd.args(["--memory-limit", LIMIT, "--retries", "0", "--jobs", "2"]);
    if !how.warm {
        cmd.args(["--warm-start", "off"]);
    }
    if !how.bwrap {
        cmd.env("PATH", "/nonexistent");
    }
    if how.layer_alone {
        cmd.args(["--sandbox", "landlock"]);
    }
    let out = cmd.output().expect("the runner starts");
    let big = tree.result("fills_scratch");
    let little = tree.result("fills_little");
    let log = |r: &Value| std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    eprintln!(
        "{name}: {} by {}, peak {} MB: {}",
        big["class"],
        big["sandbox"]["memory_limit_enforced_by"],
        big["peak_memory_mb"],
        big["matched_line"]
    );
    assert_eq!(code(&out), 1, "{name}: {}", stderr(&out));
    let kind = if how.bwrap && !how.layer_alone {
        "bwrap"
    } else {
        "builtin"
    };
    assert_eq!(big["sandbox"]["kind"], kind, "{name}: {}", big["sandbox"]);
    let start = if how.warm { "warm" } else { "cold" };
    assert_eq!(big["attempts"][0]["start"], start, "{name}: {big}");
    assert_ne!(big["status"], "succeeded", "{name}: {big}");
    assert_eq!(big["class"], "out_of_memory", "{name}: {big}");
    let peak = big["peak_memory_mb"].as_f64().unwrap();
    assert!(
        peak >= 250.0,
        "{name}: the peak shows the scratch: {peak} MB"
    );
    let line = big["matched_line"].as_str().unwrap_or_default();
    assert!(
        line.contains("kernel") || line.contains("in its scratch"),
        "{name}: the reason names the scratch: {line}"
    );
    assert!(
        !log(&big).contains("fills_scratch done"),
        "{name}: the script finished: {}",
        log(&big)
    );
    assert_eq!(little["status"], "succeeded", "{name}: {little}");
    assert!(log(&little).contains("fills_scratch done"), "{name}");
}

const BWRAP: How = How {
    warm: true,
    bwrap: true,
    layer_alone: false,
};
const HIDDEN: How = How {
    bwrap: false,
    ..BWRAP
};

#[test]
fn as_root_warm_with_bwrap() {
    if let Some(root) = Account::root("scratch as root, warm, bwrap") {
        case(root, BWRAP);
    }
}

#[test]
fn as_root_cold_with_bwrap() {
    if let Some(root) = Account::root("scratch as root, cold, bwrap") {
        case(
            root,
            How {
                warm: false,
                ..BWRAP
            },
        );
    }
}

#[test]
fn as_root_warm_without_bwrap() {
    if let Some(root) = Account::root("scratch as root, warm, bwrap hidden") {
        case(root, HIDDEN);
    }
}

#[test]
fn as_root_cold_without_bwrap() {
    if let Some(root) = Account::root("scratch as root, cold, bwrap hidden") {
        case(
            root,
            How {
                warm: false,
                ..HIDDEN
            },
        );
    }
}

#[test]
fn as_root_the_built_in_layer_alone() {
    if let Some(root) = Account::root("scratch as root, --sandbox landlock") {
        case(
            root,
            How {
                layer_alone: true,
                ..BWRAP
            },
        );
    }
}

#[test]
fn as_user_warm_with_bwrap() {
    case(Account::user(), BWRAP);
}

#[test]
fn as_user_cold_with_bwrap() {
    case(
        Account::user(),
        How {
            warm: false,
            ..BWRAP
        },
    );
}

#[test]
fn as_user_warm_without_bwrap() {
    case(Account::user(), HIDDEN);
}

#[test]
fn as_user_cold_without_bwrap() {
    case(
        Account::user(),
        How {
            warm: false,
            ..HIDDEN
        },
    );
}
