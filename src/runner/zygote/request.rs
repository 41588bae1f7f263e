//! What one warm start asks of the zygote: the script, its folder, the environment a
//! cold start would give it, and, sandboxed, the attempt's confinement (the same
//! record a cold start hands `__sandbox-exec`, with the view and a PID namespace of
//! its own), which the child applies through the jax-runner library. Built once per
//! attempt, owned, and lent to [`Zygote::spawn`].

use std::path::Path;

use super::Zygote;
use crate::error::ZygoteError;
use crate::runner::attempt::AttemptSpec;
use crate::sandbox::apply::Confinement;

/// What a script needs from the zygote.
#[derive(Debug, serde::Serialize)]
pub struct Request<'a> {
    pub script: &'a str,
    pub cwd: &'a str,
    pub env: std::collections::BTreeMap<String, String>,
    pub runner_pid: u32,
    pub cgroup_procs: Vec<String>,
    /// Sandboxed in a view of its own: the child builds it (and waits for the go).
    pub view: bool,
    /// Sandboxed: the confinement the child hands the library before the script runs,
    /// as JSON text inside the request: the zygote and its child pass it on as one
    /// string, never building (or, in the child, walking and copying the pages of) a
    /// hundred objects of a record only the library reads.
    #[serde(serialize_with = "as_text")]
    pub plan: Option<&'a Confinement>,
    /// Sandboxed: the child confines the script (user, Landlock, filter) before it runs.
    pub confined: bool,
    /// For a slot's zygote: it forks the script as its own child and answers its end.
    pub resident: bool,
}

/// `plan` as a JSON string holding the record's JSON.
fn as_text<S: serde::Serializer>(plan: &Option<&Confinement>, s: S) -> Result<S::Ok, S::Error> {
    match plan {
        Some(p) => {
            let text = serde_json::to_string(p).map_err(serde::ser::Error::custom)?;
            s.serialize_some(&text)
        }
        None => s.serialize_none(),
    }
}

/// An owned warm-start request, or why this attempt must start cold.
pub struct WarmRequest {
    script: String,
    cwd: String,
    env: std::collections::BTreeMap<String, String>,
    cgroup_procs: Vec<String>,
    view: bool,
    plan: Option<Confinement>,
    resident: bool,
}

impl WarmRequest {
    pub fn borrow(&self) -> Request<'_> {
        Request {
            script: &self.script,
            cwd: &self.cwd,
            env: self.env.clone(),
            runner_pid: std::process::id(),
            cgroup_procs: self.cgroup_procs.clone(),
            view: self.view,
            plan: self.plan.as_ref(),
            confined: self.plan.is_some(),
            resident: self.resident,
        }
    }

    /// Whether the process started waits for the runner's go, after the runner moved
    /// it into the attempt's cgroup: in a view of its own, from the run's zygote (a
    /// slot's zygote forks it in its cgroup already).
    pub fn waits_for_go(&self) -> bool {
        self.view && !self.resident
    }
}

/// The request for `spec`, or why it cannot start warm from this zygote: one that
/// serves sandboxed scripts (in views of their own, or not) serves only those.
pub fn warm_request(spec: &AttemptSpec, zygote: &Zygote) -> Result<WarmRequest, ZygoteError> {
    let view = match (&spec.sandbox, zygote.sandboxed) {
        (Some(_), false) => return Err(ZygoteError::Sandboxed),
        (None, true) => return Err(ZygoteError::NotSandboxed),
        (Some(_), true) => zygote.namespaces,
        (None, false) => false,
    };
    // A slot's zygote made in the run's part of the view: the script builds its own
    // part on a copy of it, and only a script whose run's part is that one may.
    let own_part = match (zygote.slot_view(), spec.sandbox.as_ref()) {
        (Some(made), Some(sb)) if view => match &sb.split {
            Some(split) if split.slot == made => Some(split.script.as_slice()),
            _ => return Err(ZygoteError::OtherView),
        },
        _ => None,
    };
    let plan = spec.sandbox.as_ref().map(|sb| {
        let steps = view.then_some(own_part.unwrap_or(sb.steps.as_slice()));
        match zygote.resident {
            true => sb.confine.for_slot(steps),
            false => sb.confine.for_warm(steps),
        }
    });
    // The plan travels as JSON: every path in it must be text.
    if let Some(p) = &plan {
        let paths = p
            .steps
            .iter()
            .map(|s| s.path())
            .chain(
                p.landlock
                    .iter()
                    .flat_map(|l| l.rules.iter().map(|r| r.0.as_path())),
            )
            .chain(std::iter::once(p.cwd.as_path()));
        if paths.into_iter().any(|p| p.to_str().is_none()) {
            return Err(ZygoteError::NotUtf8("sandbox path"));
        }
    }
    let utf8 = |p: &Path, what: &'static str| {
        p.to_str()
            .map(str::to_string)
            .ok_or(ZygoteError::NotUtf8(what))
    };
    // The token goes into the zygote's fixed slot (see `TOKEN_SLOT`).
    if spec.token.len() > super::TOKEN_SLOT {
        return Err(ZygoteError::TokenTooLong(super::TOKEN_SLOT));
    }
    Ok(WarmRequest {
        script: utf8(&spec.script, "script path")?,
        cwd: utf8(&spec.cwd, "working directory path")?,
        env: warm_env(spec)?,
        // Inside a view the cgroup files are out of reach: the runner places it. A
        // slot's zygote forks it in its cgroup already.
        cgroup_procs: match (&spec.cgroup, view || zygote.resident) {
            (Some(c), false) => c.procs_paths(),
            _ => Vec::new(),
        },
        view,
        plan,
        resident: zygote.resident,
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
