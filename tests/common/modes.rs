//! The ways a case runs the binary, shared by the tests that cover every mode (issue
//! 31): as root or the ordinary test user; warm or cold; bwrap on PATH, hidden from it
//! (the built-in layer, and a root runner's own namespaces), or on PATH on a machine
//! without user namespaces.

use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use super::user::*;
use super::*;

/// How a case runs.
#[derive(Debug, Clone, Copy)]
pub struct How {
    pub warm: bool,
    /// bwrap on PATH, or hidden from it (`PATH=/nonexistent`: the built-in layer,
    /// and a root runner's own namespaces).
    pub bwrap: bool,
    /// The runner (an ordinary user's) in a user namespace whose
    /// `user.max_user_namespaces` is 0: a machine without user namespaces, where bwrap
    /// is on PATH but cannot work (see `Account::spawn_without_user_namespaces`).
    pub no_userns: bool,
}

pub const WARM: How = How {
    warm: true,
    bwrap: false,
    no_userns: false,
};
pub const COLD: How = How {
    warm: false,
    ..WARM
};
pub const WARM_BWRAP: How = How {
    bwrap: true,
    ..WARM
};
/// bwrap on PATH, on a machine that has no user namespaces for it.
pub const WARM_NO_USERNS: How = How {
    no_userns: true,
    ..WARM_BWRAP
};
pub const COLD_NO_USERNS: How = How {
    warm: false,
    ..WARM_NO_USERNS
};

/// The fixture's processes in a PID namespace die with it (the kernel's doing, not
/// the runner's sweep), so only without one must the result list each as a leak.
/// bwrap makes one where it works; a root runner's own namespaces make one for a
/// warm start's init, none for a cold start.
pub fn namespaced(how: How, account: &Account) -> bool {
    (how.bwrap && !how.no_userns) || (account.is_root() && how.warm)
}

/// Runs the case's runner to its end.
pub fn output(account: &Account, how: How, mut cmd: Command) -> Output {
    if !how.no_userns {
        return cmd.output().expect("the runner runs");
    }
    account
        .spawn_without_user_namespaces(&cmd, |_| {})
        .wait_with_output()
        .expect("the runner ends")
}

/// Starts the case's runner, stdio closed; the child's PID is the runner's (see
/// `Account::spawn_without_user_namespaces`).
pub fn spawn(account: &Account, how: How, mut cmd: Command) -> Child {
    if !how.no_userns {
        return cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the runner starts");
    }
    account.spawn_without_user_namespaces(&cmd, |outer| {
        outer.stdout(Stdio::null()).stderr(Stdio::null());
    })
}

/// Whether the case may run: the no-user-namespace cases need root to make the
/// namespace (see `common::prereq`).
pub fn root_here(how: How, case: &str) -> bool {
    !how.no_userns || prereq::require(prereq::Prereq::Root, prereq::root(), case)
}

/// A tree holding `fixture` (as `m/jax/<fixture>`), given to the account, and the
/// runner's command for the case, the marker in the scripts' environment.
pub fn setup(account: &Account, how: How, fixture: &str) -> (Tree, Command) {
    let tree = account.tree();
    tree.fixture(fixture, &format!("m/jax/{fixture}"));
    account.give(&tree.root());
    let mut cmd = account.runner(&tree);
    if !how.warm {
        cmd.args(["--warm-start", "off"]);
    }
    if !how.bwrap {
        cmd.env("PATH", "/nonexistent");
    }
    (tree, cmd)
}

pub fn describe(account: &Account, how: How) -> String {
    format!(
        "as {}, {}, bwrap {}",
        account.who.name(),
        if how.warm { "warm" } else { "cold" },
        match (how.bwrap, how.no_userns) {
            (_, true) => "on PATH, no user namespaces",
            (true, false) => "on PATH",
            (false, false) => "hidden",
        }
    )
}

/// The case ran as asked: sandboxed, warm or cold, without bwrap where there are no
/// user namespaces, and in a root runner's own namespaces where bwrap is hidden.
pub fn check_start(r: &Value, how: How, account: &Account, case: &str) {
    let start = &r["attempts"][0]["start"];
    let expected = if how.warm { "warm" } else { "cold" };
    assert_eq!(
        start, expected,
        "{case}: started {start}: {}",
        r["attempts"][0]["cold_start_reason"]
    );
    assert!(
        r["sandbox"]["layers"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{case}: ran unsandboxed: {}",
        r["sandbox"]
    );
    let has = |layer: &str| {
        r["sandbox"]["layers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == layer))
    };
    if how.no_userns {
        assert!(!has("bwrap"), "{case}: {}", r["sandbox"]);
    }
    if account.is_root() && !how.bwrap {
        assert!(has("namespaces"), "{case}: {}", r["sandbox"]);
    }
}

/// Whether bwrap is here when the case needs it (see `common::prereq`).
/// Without user namespaces bwrap cannot work, whether it is here or not.
pub fn bwrap_here(how: How, case: &str) -> bool {
    !how.bwrap || how.no_userns || prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), case)
}
