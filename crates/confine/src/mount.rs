//! What a sandboxed script sees, as the steps that make it: the one list a cold start
//! hands to bubblewrap (or applies itself, in `namespaces.rs`) and a warm start's
//! child applies through the library. jax-runner builds the list (`sandbox/view.rs`).

use std::path::{Path, PathBuf};

/// One step, applied in order: later mounts land on top of earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "wire::Step", try_from = "wire::Step")]
pub enum MountStep {
    /// An empty tmpfs over the folder, hiding what is there (read-only at the end).
    Tmpfs(PathBuf),
    /// An empty tmpfs the script may write (`/tmp`, `/dev/shm`, `$HOME`): the sandbox
    /// user's own (mode 0700) when the runner is root, else mode 1777; at most `size`
    /// bytes when there is a memory limit.
    Scratch { path: PathBuf, size: Option<u64> },
    /// A folder made (mode 0755) inside a tmpfs, on the way to a bind below it.
    Dir(PathBuf),
    /// The path, hidden by an earlier tmpfs, bound back onto itself read-only.
    ReadOnly(PathBuf),
    /// The path bound onto itself writable.
    Writable(PathBuf),
    /// An empty device bound over a file (one at the host's top level), so it reads as
    /// nothing.
    Mask(PathBuf),
    /// A tmpfs made read-only once everything under it is in place: a write there
    /// would only vanish with the sandbox, so it is refused instead.
    RemountReadOnly(PathBuf),
}

impl MountStep {
    /// The folder the step applies to.
    pub fn path(&self) -> &Path {
        match self {
            MountStep::Tmpfs(p)
            | MountStep::Scratch { path: p, .. }
            | MountStep::Dir(p)
            | MountStep::ReadOnly(p)
            | MountStep::Writable(p)
            | MountStep::Mask(p)
            | MountStep::RemountReadOnly(p) => p,
        }
    }
}

/// The steps as the zygote reads them: `{"op": "scratch", "path": "/tmp", "size": N}`,
/// `size` only on a bounded scratch step.
mod wire {
    use std::path::PathBuf;

    use super::MountStep;

    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Op {
        Tmpfs,
        Scratch,
        Dir,
        ReadOnly,
        Writable,
        Mask,
        RemountReadOnly,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Step {
        op: Op,
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    }

    impl From<MountStep> for Step {
        fn from(s: MountStep) -> Step {
            let size = match &s {
                MountStep::Scratch { size, .. } => *size,
                _ => None,
            };
            let op = match &s {
                MountStep::Tmpfs(_) => Op::Tmpfs,
                MountStep::Scratch { .. } => Op::Scratch,
                MountStep::Dir(_) => Op::Dir,
                MountStep::ReadOnly(_) => Op::ReadOnly,
                MountStep::Writable(_) => Op::Writable,
                MountStep::Mask(_) => Op::Mask,
                MountStep::RemountReadOnly(_) => Op::RemountReadOnly,
            };
            let path = s.path().to_path_buf();
            Step { op, path, size }
        }
    }

    impl TryFrom<Step> for MountStep {
        type Error = &'static str;

        fn try_from(s: Step) -> Result<MountStep, Self::Error> {
            if s.size.is_some() && !matches!(s.op, Op::Scratch) {
                return Err("only a scratch step has a size");
            }
            let p = s.path;
            Ok(match s.op {
                Op::Tmpfs => MountStep::Tmpfs(p),
                Op::Scratch => MountStep::Scratch {
                    path: p,
                    size: s.size,
                },
                Op::Dir => MountStep::Dir(p),
                Op::ReadOnly => MountStep::ReadOnly(p),
                Op::Writable => MountStep::Writable(p),
                Op::Mask => MountStep::Mask(p),
                Op::RemountReadOnly => MountStep::RemountReadOnly(p),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_step_carries_its_bound_on_the_wire() {
        let scratch = MountStep::Scratch {
            path: "/nonexistent-home".into(),
            size: Some(1 << 20),
        };
        let json = serde_json::to_value(&scratch).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"op": "scratch", "path": "/nonexistent-home", "size": 1048576})
        );
        assert_eq!(serde_json::from_value::<MountStep>(json).unwrap(), scratch);
        let tmpfs = serde_json::to_value(MountStep::Tmpfs("/run".into())).unwrap();
        assert_eq!(tmpfs, serde_json::json!({"op": "tmpfs", "path": "/run"}));
        let bad = serde_json::json!({"op": "dir", "path": "/x", "size": 1});
        assert!(serde_json::from_value::<MountStep>(bad).is_err());
    }
}
