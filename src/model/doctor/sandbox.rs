//! The sandbox part of the doctor's report: what each layer of the sandbox can do on
//! this machine (bubblewrap, user namespaces, Landlock, seccomp, the sandbox user,
//! per-attempt cgroups), the layers a run here would use, and for each layer that is
//! missing or weak the one command or setting that would strengthen it.

use serde::{Deserialize, Serialize};

// Doc comments below are the schema's descriptions (`schemas/doctor.schema.json`):
// changing one changes the committed schema.

/// A layer of the sandbox.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxLayer {
    /// bubblewrap's namespaces and mounts.
    Bwrap,
    /// Whether this user may make a user namespace (what an ordinary user's bwrap gives
    /// each script).
    UserNamespaces,
    /// The kernel's Landlock access control.
    Landlock,
    /// The seccomp filter every sandboxed script runs under.
    Seccomp,
    /// Who a script is on the host.
    SandboxUser,
    /// A cgroup per attempt, for `--max-procs` and `--memory-limit`.
    Cgroups,
}

impl SandboxLayer {
    /// Its name, as the report writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxLayer::Bwrap => "bwrap",
            SandboxLayer::UserNamespaces => "user-namespaces",
            SandboxLayer::Landlock => "landlock",
            SandboxLayer::Seccomp => "seccomp",
            SandboxLayer::SandboxUser => "sandbox-user",
            SandboxLayer::Cgroups => "cgroups",
        }
    }
}

/// How much of a layer this machine gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LayerState {
    /// It works here in full.
    Active,
    /// It works, with less than it could (an older Landlock ABI, one cgroup controller
    /// of two, bwrap without a user namespace).
    Partial,
    /// Not available here.
    Missing,
    /// Not used for this runner (user namespaces and the uid switch depend on whether
    /// the runner is root).
    Unused,
}

/// One layer: its state, in words, and how to strengthen it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayerFinding {
    /// The layer.
    pub layer: SandboxLayer,
    /// How much of it works here.
    pub state: LayerState,
    /// What it does here, or why it does not.
    pub message: String,
    /// The one command or setting that would strengthen it, when there is one.
    pub fix: Option<String>,
}

/// bubblewrap, as found on `PATH` and tried here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BwrapProbe {
    /// Where `PATH` finds `bwrap`.
    pub path: Option<String>,
    /// What `bwrap --version` prints (`bubblewrap 0.8.0`).
    pub version: Option<String>,
    /// Whether it built a run's namespaces here (`bwrap … true`).
    pub works: bool,
    /// It gives each script a user namespace of its own (an ordinary user's run).
    pub userns: bool,
    /// It runs without a user namespace because the runner is root (scripts then drop
    /// to the sandbox uid).
    pub privileged: bool,
    /// It lacks the options a run needs (`--perms`, `--dir`: bubblewrap 0.5 has them).
    pub too_old: bool,
    /// Why it does not work: not installed, too old, or bwrap's own words.
    pub error: Option<String>,
}

/// Whether this user may make a user namespace, and the kernel settings that decide.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsernsProbe {
    /// A forked child made one (`unshare(CLONE_NEWUSER)`) and mapped its own uid in it.
    pub works: bool,
    /// The error when it could not (`EPERM`, `ENOSPC`, …).
    pub error: Option<String>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later), when
    /// the kernel has it: AppArmor takes every capability inside a namespace an
    /// unconfined program makes.
    pub apparmor_restricted: Option<bool>,
    /// `user.max_user_namespaces` (0 forbids them).
    pub max_user_namespaces: Option<u64>,
    /// `kernel.unprivileged_userns_clone` (older Debian kernels), when the kernel has it.
    pub unprivileged_clone: Option<bool>,
}

/// The kernel's Landlock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LandlockProbe {
    /// Its ABI version (1 on 5.13, 6 on 6.12, 7 on 6.15), when the kernel has it.
    pub abi: Option<u8>,
    /// What Landlock at this ABI holds a script to.
    pub covers: Vec<String>,
    /// What a newer ABI would add.
    pub not_covered: Vec<String>,
    /// Why there is none: `ENOSYS` (the kernel is older than 5.13 or built without it),
    /// `EOPNOTSUPP` (built in but not enabled at boot), or another error.
    pub error: Option<String>,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The security modules enabled at boot (`/sys/kernel/security/lsm`), when readable.
    pub lsm: Option<String>,
}

/// The seccomp filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SeccompProbe {
    /// The processor (`x86_64`).
    pub arch: String,
    /// jax-runner has a filter for it (x86_64, aarch64, riscv64).
    pub filter: bool,
    /// How many system calls the allow-list grants at most (some only with safe
    /// arguments); every other call is refused.
    #[serde(default)]
    pub granted_calls: usize,
    /// How many of the refused calls the filter names, with the errno each gets (the
    /// ones that matter most: mounts, namespaces, ptrace, …; some refused only with
    /// certain arguments).
    pub denied_calls: usize,
    /// The kernel has seccomp (`Seccomp:` in `/proc/self/status`).
    pub kernel: bool,
}

/// Who a script is on the host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxUserProbe {
    /// Scripts switch to a uid of their own (the runner is root).
    pub switched: bool,
    /// The first uid they may take (systemd's dynamic range), when they switch.
    pub first_uid: Option<u32>,
    /// The last uid they may take, when they switch.
    pub last_uid: Option<u32>,
    /// This user namespace maps that whole range (a container mapping fewer uids does
    /// not); always true when scripts do not switch.
    pub mapped: bool,
    /// The uid an ordinary user's scripts run as (the runner's own).
    pub uid: u32,
}

/// Whether the runner can make a cgroup per attempt here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CgroupProbe {
    /// The hierarchy holding the `pids` and `memory` controllers: `v1`, `v2`, or
    /// `none`.
    pub version: String,
    /// A cgroup made here takes a `pids.max` (the kernel enforces `--max-procs`).
    pub pids: bool,
    /// A cgroup made here takes a memory limit (the kernel enforces `--memory-limit`).
    pub memory: bool,
}

/// What each sandbox layer can do on this machine; `jax-runner doctor` fills it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxReport {
    /// The layers a run here uses by default, as a result's `sandbox.layers` lists them
    /// (`bwrap`, `landlock-v7`, `uid`, `seccomp`).
    pub layers: Vec<String>,
    /// The runner is root.
    pub root: bool,
    /// A root runner without a working bwrap can make each script's mount and network
    /// namespaces itself (it holds `CAP_SYS_ADMIN`); false for an ordinary user.
    pub builtin_namespaces: bool,
    /// bubblewrap.
    pub bwrap: BwrapProbe,
    /// User namespaces.
    pub user_namespaces: UsernsProbe,
    /// Landlock.
    pub landlock: LandlockProbe,
    /// The seccomp filter.
    pub seccomp: SeccompProbe,
    /// The sandbox user.
    pub sandbox_user: SandboxUserProbe,
    /// Per-attempt cgroups.
    pub cgroups: CgroupProbe,
    /// One finding per layer, in the order above.
    pub findings: Vec<LayerFinding>,
}
