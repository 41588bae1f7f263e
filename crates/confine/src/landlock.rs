//! The Landlock layer as applied: the plan jax-runner makes for each attempt
//! (`sandbox/landlock.rs`), opened into a ruleset while every path is still
//! reachable, then enforced on the process.

use std::path::PathBuf;

/// What one script may reach, as Landlock rules: the folders it reads, writes and
/// the devices it uses, each granted beneath its path. Built by the runner for every
/// attempt (the same for a warm and a cold start), applied by `__sandbox-exec` or the
/// zygote's child just before the script.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LandlockPlan {
    /// The kernel's ABI the plan was made for.
    pub abi: u8,
    /// Filesystem rights handled (refused unless a rule grants them).
    pub fs: u64,
    /// Network rights handled: TCP bind and connect (ABI 4), with no rule granting any.
    pub net: u64,
    /// Scopes (ABI 6): abstract unix sockets and signals stay within the script.
    pub scoped: u64,
    /// `(path, rights)`: the rights granted beneath each path.
    pub rules: Vec<(PathBuf, u64)>,
}

/// The ruleset of `plan`, made and filled (paths opened now, so before a switch to the
/// sandbox user), ready for [`restrict`]. A path that is not there is skipped.
pub fn prepare(plan: &LandlockPlan) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{
        AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope,
    };
    let mut ruleset =
        Ruleset::default().handle_access(BitFlags::<AccessFs>::from_bits_truncate(plan.fs))?;
    if plan.net != 0 {
        ruleset = ruleset.handle_access(BitFlags::<AccessNet>::from_bits_truncate(plan.net))?;
    }
    if plan.scoped != 0 {
        ruleset = ruleset.scope(BitFlags::<Scope>::from_bits_truncate(plan.scoped))?;
    }
    let mut created = ruleset.create()?;
    // A rule on a file (an `/etc` entry, a device) may hold only the rights a file
    // has: reading a folder's entries is not among them.
    let file_rights = AccessFs::from_file(landlock::ABI::from(i32::from(plan.abi)));
    for (path, rights) in &plan.rules {
        let Ok(fd) = PathFd::new(path) else { continue };
        let mut access = BitFlags::<AccessFs>::from_bits_truncate(*rights);
        if !std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            access &= file_rights;
        }
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created)
}

/// Holds this process and everything it starts to the prepared ruleset (with
/// `no_new_privs`); an error when the kernel enforced none of it.
pub fn restrict(created: landlock::RulesetCreated) -> std::io::Result<()> {
    let status = created.restrict_self().map_err(std::io::Error::other)?;
    match status.ruleset {
        landlock::RulesetStatus::NotEnforced => Err(std::io::Error::other(
            "the kernel enforced none of the Landlock rules",
        )),
        _ => Ok(()),
    }
}
