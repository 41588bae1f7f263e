//! What the integration tier needs from the machine beyond Python: root, bubblewrap,
//! headless Chromium, a tmpfs it may mount, cgroups it may make, munge and Slurm. A test
//! that finds one missing fails and says what to install or change: CI must never pass
//! a test that did not run. Where a prerequisite is absent on purpose, `JAX_RUNNER_TEST_SKIP` names it
//! (`JAX_RUNNER_TEST_SKIP=root,chromium`), and the tests that need it print that they
//! skip and return.

/// The variable that names prerequisites absent on purpose, separated by commas.
pub const SKIP_VAR: &str = "JAX_RUNNER_TEST_SKIP";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    /// The tests run as root (the root cases, the switch to the test user).
    Root,
    /// `bwrap` on PATH, and it works here.
    Bwrap,
    /// `chromium` on PATH.
    Chromium,
    /// Mounting a tmpfs (root, outside a container that forbids it).
    Tmpfs,
    /// A writable cgroup file system for the runner's per-attempt cgroups.
    Cgroups,
    /// munge and Slurm's daemons and clients, for a one-node cluster (`slurm`).
    Slurm,
}

const ALL: [Prereq; 6] = [
    Prereq::Root,
    Prereq::Bwrap,
    Prereq::Chromium,
    Prereq::Tmpfs,
    Prereq::Cgroups,
    Prereq::Slurm,
];

impl Prereq {
    pub fn name(self) -> &'static str {
        match self {
            Prereq::Root => "root",
            Prereq::Bwrap => "bwrap",
            Prereq::Chromium => "chromium",
            Prereq::Tmpfs => "tmpfs",
            Prereq::Cgroups => "cgroups",
            Prereq::Slurm => "slurm",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Prereq::Root => "run the integration tier as root, as `.ci/run` does in CI",
            Prereq::Bwrap => "`.ci/run` installs it; locally `apt-get install -y bubblewrap`",
            Prereq::Chromium => "`.ci/run` installs it; locally `apt-get install -y chromium`",
            Prereq::Tmpfs => "run as root where `mount -t tmpfs` is allowed",
            Prereq::Cgroups => "run as root with a writable /sys/fs/cgroup",
            Prereq::Slurm => "run as root; `.ci/run` installs it through `.ci/slurm-setup`",
        }
    }
}

/// The prerequisites `JAX_RUNNER_TEST_SKIP` names; a name it does not know fails, so
/// a typo cannot turn a skip into a silent pass or a failure into a puzzle.
fn skipped() -> Vec<Prereq> {
    let value = std::env::var(SKIP_VAR).unwrap_or_default();
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            ALL.into_iter()
                .find(|p| p.name() == name)
                .unwrap_or_else(|| {
                    let known: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
                    panic!("{SKIP_VAR} names `{name}`; it knows {}", known.join(", "))
                })
        })
        .collect()
}

/// `case` cannot run because `what` is missing (`why` says how it was found so): fails
/// the test, unless `JAX_RUNNER_TEST_SKIP` names `what`; then says on stderr that
/// `case` skips, and returns, for the caller to return too.
pub fn missing(what: Prereq, case: &str, why: &str) {
    if skipped().contains(&what) {
        super::user::visible(&format!(
            "SKIPPED {case}: no {} ({why}); {SKIP_VAR} names it",
            what.name()
        ));
        return;
    }
    panic!(
        "{case} needs {}, and {why}: {}. If it is absent on purpose, set {SKIP_VAR}={}",
        what.name(),
        what.fix(),
        what.name()
    );
}

/// Whether `case` may run: `true` when `what` is `present`; otherwise see [`missing`]
/// (fails, or `false` when the skip is asked for).
pub fn require(what: Prereq, present: Result<(), String>, case: &str) -> bool {
    // Read however it ends, so a misspelt name fails wherever the variable is set.
    skipped();
    match present {
        Ok(()) => true,
        Err(why) => {
            missing(what, case, &why);
            false
        }
    }
}

/// Whether the tests run as root, as [`require`] wants it.
pub fn root() -> Result<(), String> {
    if super::user::tests_run_as_root() {
        Ok(())
    } else {
        // SAFETY: geteuid has no preconditions.
        Err(format!("the tests run as uid {}", unsafe {
            libc::geteuid()
        }))
    }
}

/// Whether bubblewrap works here, as [`require`] wants it.
pub fn bwrap() -> Result<(), String> {
    jax_runner::sandbox::bwrap::detect()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether a one-node Slurm cluster can start here, as [`require`] wants it.
pub fn slurm() -> Result<(), String> {
    super::slurm::available()
}
