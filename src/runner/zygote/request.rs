//! What one warm start asks of the zygote: the script, its folder, the environment a
//! cold start would give it, and, sandboxed, the mount steps and Landlock rules its
//! child applies. Built once per attempt, owned, and lent to [`Zygote::spawn`].

use std::path::Path;

use super::Zygote;
use crate::error::ZygoteError;
use crate::runner::attempt::AttemptSpec;
use crate::runner::mounts::MountStep;

/// What a script needs from the zygote.
#[derive(Debug, serde::Serialize)]
pub struct Request<'a> {
    pub script: &'a str,
    pub cwd: &'a str,
    pub env: std::collections::BTreeMap<String, String>,
    pub runner_pid: u32,
    pub cgroup_procs: Vec<String>,
    /// Sandboxed in a view of its own: the mount steps the child applies before the
    /// script runs.
    pub steps: Option<&'a [MountStep]>,
    /// Sandboxed: Landlock's rules the child holds the script to, where the kernel has
    /// Landlock.
    pub landlock: Option<&'a crate::runner::landlock::LandlockPlan>,
    /// Sandboxed: the child confines the script (user, Landlock, filter) before it runs.
    pub confined: bool,
}

/// An owned warm-start request, or why this attempt must start cold.
pub struct WarmRequest {
    script: String,
    cwd: String,
    env: std::collections::BTreeMap<String, String>,
    cgroup_procs: Vec<String>,
    steps: Option<Vec<MountStep>>,
    landlock: Option<crate::runner::landlock::LandlockPlan>,
    confined: bool,
}

impl WarmRequest {
    pub fn borrow(&self) -> Request<'_> {
        Request {
            script: &self.script,
            cwd: &self.cwd,
            env: self.env.clone(),
            runner_pid: std::process::id(),
            cgroup_procs: self.cgroup_procs.clone(),
            steps: self.steps.as_deref(),
            landlock: self.landlock.as_ref(),
            confined: self.confined,
        }
    }

    /// Whether the script runs in a view of its own (its cgroup is joined by the runner
    /// and it waits for the runner's go).
    pub fn sandboxed(&self) -> bool {
        self.steps.is_some()
    }
}

/// The request for `spec`, or why it cannot start warm from this zygote: one that
/// serves sandboxed scripts (in views of their own, or not) serves only those.
pub fn warm_request(spec: &AttemptSpec, zygote: &Zygote) -> Result<WarmRequest, ZygoteError> {
    let steps = match (&spec.sandbox, zygote.sandboxed) {
        (Some(_), false) => return Err(ZygoteError::Sandboxed),
        (None, true) => return Err(ZygoteError::NotSandboxed),
        (Some(sb), true) if zygote.namespaces => {
            if sb.steps.iter().any(|s| s.path().to_str().is_none()) {
                return Err(ZygoteError::NotUtf8("sandbox mount path"));
            }
            Some(sb.steps.clone())
        }
        _ => None,
    };
    let utf8 = |p: &Path, what: &'static str| {
        p.to_str()
            .map(str::to_string)
            .ok_or(ZygoteError::NotUtf8(what))
    };
    let landlock = spec
        .sandbox
        .as_ref()
        .and_then(|sb| sb.confine.landlock.clone());
    if landlock
        .iter()
        .flat_map(|l| &l.rules)
        .any(|(p, _)| p.to_str().is_none())
    {
        return Err(ZygoteError::NotUtf8("Landlock path"));
    }
    Ok(WarmRequest {
        script: utf8(&spec.script, "script path")?,
        cwd: utf8(&spec.cwd, "working directory path")?,
        env: warm_env(spec)?,
        // Inside a view the cgroup files are out of reach: the runner places it.
        cgroup_procs: match (&spec.cgroup, &steps) {
            (Some(c), None) => c.procs_paths(),
            _ => Vec::new(),
        },
        steps,
        landlock,
        confined: spec.sandbox.is_some(),
    })
}

/// The same environment a cold start would get: the parent's (unless cleared), less
/// the removed variables, plus the attempt's, plus the leak-tracing token.
fn warm_env(spec: &AttemptSpec) -> Result<std::collections::BTreeMap<String, String>, ZygoteError> {
    let mut env = std::collections::BTreeMap::new();
    if !spec.env_clear {
        // The process's own environment, not the run's snapshot: a cold start's child
        // inherits exactly this, and a warm one must match it.
        for (k, v) in std::env::vars_os() {
            let (Ok(k), Ok(v)) = (k.into_string(), v.into_string()) else {
                return Err(ZygoteError::NotUtf8("environment"));
            };
            env.insert(k, v);
        }
    }
    for key in spec.env_remove {
        env.remove(*key);
    }
    for (k, v) in &spec.env {
        let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
            return Err(ZygoteError::NotUtf8("environment"));
        };
        env.insert(k.to_string(), v.to_string());
    }
    env.insert(
        crate::runner::reaper::TOKEN_VAR.to_string(),
        spec.token.clone(),
    );
    Ok(env)
}
