//! The runner's own stop: when a file the runner writes for itself (a log, a result,
//! the execution log) cannot be written because its file system is full (`ENOSPC`,
//! `EDQUOT`), or a Slurm job's node cannot see the runner's files (no shared file
//! system), every later script would run only to lose its output. The first such
//! failure raises the [`Halt`]: no script starts after it, retries are dropped, the
//! run says why, and the binary exits with the error code. Scripts already running
//! finish.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

/// Why the runner stopped starting scripts: the file it failed to write (or a node
/// failed to see), and the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaltReason {
    pub path: PathBuf,
    pub error: String,
    pub kind: HaltKind,
}

/// What stopped the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltKind {
    /// The runner's file system is full.
    DiskFull,
    /// A Slurm job's node does not share the runner's file system.
    NotShared,
}

impl std::fmt::Display for HaltReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            HaltKind::DiskFull => write!(
                f,
                "failed to write {} ({}): the runner's file system is full",
                self.path.display(),
                self.error
            ),
            HaltKind::NotShared => write!(
                f,
                "a compute node cannot see {} ({}): the tree and its results must be on a file system the nodes share",
                self.path.display(),
                self.error
            ),
        }
    }
}

/// Shared by everything that writes the runner's files and everything that starts
/// scripts; cloning shares it.
#[derive(Debug, Clone)]
pub struct Halt {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    reason: OnceLock<HaltReason>,
    raised: watch::Sender<bool>,
}

impl Default for Halt {
    fn default() -> Self {
        Halt {
            inner: Arc::new(Inner {
                reason: OnceLock::new(),
                raised: watch::Sender::new(false),
            }),
        }
    }
}

impl Halt {
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the halt when `error` says the file system is full; true when it did
    /// (or had already). Other errors concern one file only and leave the run going.
    pub fn check(&self, path: &Path, error: &std::io::Error) -> bool {
        if !is_disk_full(error) {
            return false;
        }
        self.raise(path, error.to_string());
        true
    }

    /// Raises the halt: writing `path` failed with `error` for lack of space.
    pub fn raise(&self, path: &Path, error: String) {
        self.raise_for(HaltKind::DiskFull, path, error);
    }

    /// Raises the halt of `kind` for `path`; the first reason stays.
    pub fn raise_for(&self, kind: HaltKind, path: &Path, error: String) {
        let first = self.inner.reason.set(HaltReason {
            path: path.to_path_buf(),
            error,
            kind,
        });
        if first.is_ok() {
            let what = match kind {
                HaltKind::DiskFull => "free space, then run again with --resume",
                HaltKind::NotShared => "run from a folder the nodes share",
            };
            tracing::error!(
                "{}: no more scripts start; {what}",
                self.inner.reason.get().expect("just set")
            );
            self.inner.raised.send_replace(true);
        }
    }

    /// The first failure, once raised.
    pub fn reason(&self) -> Option<HaltReason> {
        self.inner.reason.get().cloned()
    }

    pub fn is_raised(&self) -> bool {
        self.inner.reason.get().is_some()
    }

    /// Resolves once the halt is raised (at once if it already is).
    pub async fn raised(&self) {
        let mut rx = self.inner.raised.subscribe();
        let _ = rx.wait_for(|raised| *raised).await;
    }
}

/// `ENOSPC` or `EDQUOT`: nothing more the runner writes there will fit.
pub fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_full_file_system_raises_it_and_the_first_reason_stays() {
        let halt = Halt::new();
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        assert!(!halt.check(Path::new("/r/a.json"), &denied));
        assert!(!halt.is_raised());
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(halt.check(Path::new("/r/log"), &full));
        let quota = std::io::Error::from_raw_os_error(libc::EDQUOT);
        assert!(halt.clone().check(Path::new("/r/other"), &quota));
        halt.raised().await;
        let reason = halt.reason().unwrap();
        assert_eq!(reason.path, Path::new("/r/log"));
        assert!(reason.to_string().contains("full"), "{reason}");
    }
}
