//! A sandboxed run's setup, and each attempt's sandbox cut from it: the view (bwrap's
//! arguments, or the mount steps the built-in sandbox and the zygote's child apply),
//! Landlock's grants, and the last steps before the script ([`Confinement`]). One
//! place decides what a script may read and write, for every layer and every start.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::apply::Confinement;
use super::bwrap;
use super::grants;
use super::landlock::{self, Grants};
use super::layers::Sandboxing;
use super::user::Identity;
use super::view::{self, MountStep, Mounts};
use crate::model::Platform;
use crate::runner::attempt::{AttemptError, AttemptRequest, SandboxSpec};
use crate::runner::backends::Shared;
use crate::runner::zygote::ZygoteSandbox;

/// What a sandboxed run needs to build each script's sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSetup {
    pub sandboxing: Sandboxing,
    /// `$HOME`, hidden inside.
    pub home: Option<PathBuf>,
    /// Interpreter folders to keep readable inside a hidden `$HOME`.
    pub python_paths: Vec<PathBuf>,
    /// The seccomp programs, where there are some for this machine.
    pub seccomp: Vec<PathBuf>,
    /// Who the scripts are on the host.
    pub identity: Arc<Identity>,
    /// `jax-runner` itself, which finishes a cold start (`__sandbox-exec`).
    pub helper: PathBuf,
    /// Where the private temporary folders of a run without a view of its own go
    /// (one per attempt, removed after it).
    pub private_root: PathBuf,
}

impl SandboxSetup {
    /// Folders every sandboxed script reads: the interpreter's, the shim's, the
    /// parent's `PYTHONPATH` (which passes in, so its folders must stay visible), and
    /// the helper that finishes a cold start.
    fn readable(&self, shared: &Shared) -> Vec<PathBuf> {
        let mut readable = self.python_paths.clone();
        if let Some(pp) = shared.config.environment.var_os("PYTHONPATH") {
            readable.extend(std::env::split_paths(&pp).filter(|p| p.is_absolute()));
        }
        readable.extend(shared.shim_dir.clone());
        readable.push(self.helper.clone());
        readable
    }

    /// Before an attempt: its data folder given to the sandbox user, and, where the
    /// script gets no view of its own, its private temporary folder made (returned,
    /// for `TMPDIR` and `HOME`, and to remove after the attempt).
    pub fn prepare(&self, req: &AttemptRequest<'_>) -> Result<Option<PathBuf>, AttemptError> {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AttemptError::Prepare { path, source }
        };
        self.identity
            .own(req.data_dir)
            .map_err(failed(req.data_dir))?;
        if self.sandboxing.has_view() {
            return Ok(None);
        }
        let name = format!("{}-{}", sanitize_id(&req.script.id), req.number);
        let dir = self.private_root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .and_then(|()| self.identity.own(&dir))
            .map_err(failed(&dir))?;
        Ok(Some(dir))
    }

    /// One attempt's sandbox: its own folder and the interpreter readable, its data
    /// folder, its scratch (or private temporary folder) and the compilation cache
    /// writable, every other script's folder and the run's outputs hidden.
    pub fn attempt(
        &self,
        shared: &Shared,
        req: &AttemptRequest<'_>,
        cwd: &Path,
        private: Option<&Path>,
    ) -> SandboxSpec {
        let config = &shared.config;
        let mut readable = self.readable(shared);
        readable.push(cwd.to_path_buf());
        let mut writable = vec![req.data_dir.to_path_buf()];
        writable.extend(shared.compilation_cache.clone());
        let user = self.identity.switched_to();
        let view = Mounts {
            home: self.home.clone(),
            readable,
            writable,
            cwd: cwd.to_path_buf(),
            gpu: req.platform == Platform::Gpu,
            outputs: vec![config.results_dir.clone(), config.step12_dir.clone()],
            sources: vec![config.output_dir.clone()],
            user,
            // Each scratch tmpfs holds at most the memory limit (what it holds also
            // counts against the limit: see `scratch.rs`).
            scratch_size: req.settings.memory_limit,
        };
        let steps = match self.sandboxing.has_view() {
            true => view::steps(&view),
            false => Vec::new(),
        };
        let scratch: Vec<PathBuf> = steps
            .iter()
            .filter_map(|s| match s {
                MountStep::Scratch { path, .. } => Some(path.clone()),
                _ => None,
            })
            .collect();
        let bwrap = self
            .sandboxing
            .bwrap
            .as_ref()
            .map(|b| (b.path.clone(), bwrap::args(b, &view)));
        let builtin_view = bwrap.is_none() && self.sandboxing.namespaces;
        let confine = Confinement {
            steps: if builtin_view {
                steps.clone()
            } else {
                Vec::new()
            },
            own: if bwrap.is_some() {
                scratch.clone()
            } else {
                Vec::new()
            },
            user,
            landlock: self
                .sandboxing
                .landlock
                .map(|abi| landlock::plan(abi, &self.grants(&view, &scratch, private))),
            cwd: cwd.to_path_buf(),
            parent: bwrap.is_none().then(std::process::id),
            ..Confinement::default()
        };
        SandboxSpec {
            bwrap,
            steps,
            confine,
            helper: self.helper.clone(),
        }
    }

    /// What Landlock grants in `view`: reads of the host's granted paths
    /// (`grants::host_reads`) and the view's readable folders, writes of the writable
    /// folders and the view's scratch or else the private temporary folder, the
    /// granted devices and a GPU's nodes. The same list the view is built from.
    fn grants(&self, view: &Mounts, scratch: &[PathBuf], private: Option<&Path>) -> Grants {
        let mut read = grants::host_reads();
        read.extend(view.readable.iter().cloned());
        let mut write = view.writable.clone();
        write.extend(scratch.iter().cloned());
        write.extend(private.map(Path::to_path_buf));
        let mut devices: Vec<PathBuf> = grants::DEVICES.iter().map(PathBuf::from).collect();
        if view.gpu {
            devices.extend(bwrap::nvidia_devices());
        }
        Grants {
            read,
            write,
            devices,
        }
    }

    /// How to start the warm-start zygote inside the sandbox, or why it cannot be.
    /// With a view of its own, it sees what any script of the run may be given (the
    /// scripts' folders, the outputs (writable, for the data folders) and the
    /// interpreter) and each script's view is cut from it; without one it runs on the
    /// host's and each script is held by Landlock and the filter alone.
    pub fn zygote(&self, shared: &Shared) -> Result<ZygoteSandbox, String> {
        if let Some(why) = self.sandboxing.no_warm_start() {
            return Err(why.into());
        }
        let library = bwrap::library()
            .map_err(|why| format!("warm start inside the sandbox needs its library: {why}"))?;
        let config = &shared.config;
        let mut readable = self.readable(shared);
        readable.push(config.output_dir.clone());
        readable.push(library.clone());
        let mut writable = vec![config.results_dir.clone(), config.step12_dir.clone()];
        writable.extend(shared.compilation_cache.clone());
        let base = Mounts {
            home: self.home.clone(),
            readable,
            writable,
            cwd: PathBuf::from("/"),
            gpu: config.may_use_gpu(),
            ..Default::default()
        };
        let bwrap = self
            .sandboxing
            .bwrap
            .as_ref()
            .map(|b| (b.path.clone(), bwrap::zygote_args(b, &base)));
        Ok(ZygoteSandbox {
            bwrap,
            namespaces: self.sandboxing.has_view(),
            seccomp: self.seccomp.clone(),
            user: self.identity.switched_to(),
            library,
        })
    }
}

/// A fresh folder for a run's private temporary folders: in the system's temporary
/// folder, under a name nobody made before (made here, never reused), mode 0711 so a
/// root runner's sandbox user reaches its own folder inside.
pub fn private_root() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for n in 0..100 {
        let dir =
            std::env::temp_dir().join(format!("jax-runner-{}-{nanos:09}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free name for a temporary folder"))
}

/// A script id as a folder name: letters, digits, `-`, `_` and `.` (ids are made so).
fn sanitize_id(id: &str) -> String {
    id.chars()
        .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
            true => c,
            false => '_',
        })
        .collect()
}
