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
use std::ffi::OsString;

use crate::config::RunConfig;

/// What of the run a sandbox is cut from: its configuration and what the runner made
/// for every script (the telemetry shim, the compilation cache).
#[derive(Debug, Clone, Copy)]
pub struct RunPlace<'a> {
    pub config: &'a RunConfig,
    pub shim_dir: Option<&'a Path>,
    pub compilation_cache: Option<&'a Path>,
}

/// One attempt, as its sandbox needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptPlace<'a> {
    /// The script's id and the attempt's number, naming its private folder.
    pub id: &'a str,
    pub number: u32,
    /// Its data folder, writable.
    pub data_dir: &'a Path,
    /// A GPU attempt: the GPU's device nodes are granted.
    pub gpu: bool,
    /// `--memory-limit` (after overrides), which bounds each scratch tmpfs.
    pub memory_limit: Option<u64>,
}

/// A sandboxed attempt: bwrap's command for a cold start (or none: the built-in layer
/// alone), the view's mounts as steps for a warm one, and the last steps before the
/// script for either.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// bwrap and its arguments, ending in `--`; `None` for the built-in layer alone.
    pub bwrap: Option<(PathBuf, Vec<OsString>)>,
    /// The view's mounts as steps (for the zygote's child); empty without a view.
    pub steps: Vec<MountStep>,
    /// The same view in two parts, the run's and the script's (for a worker slot's
    /// zygote, which makes the run's once); `None` without a view.
    pub split: Option<view::Split>,
    /// The last steps before the script: `__sandbox-exec`'s cold, the zygote child's
    /// warm.
    pub confine: Confinement,
    /// `jax-runner` itself, which finishes a cold start (`__sandbox-exec`).
    pub helper: PathBuf,
}

impl SandboxSpec {
    /// bwrap's path, when bwrap sandboxes the attempt.
    pub fn bwrap_path(&self) -> Option<&Path> {
        self.bwrap.as_ref().map(|(p, _)| p.as_path())
    }
}

/// How to start the zygote inside the sandbox.
#[derive(Debug, Clone)]
pub struct ZygoteSandbox {
    /// bwrap and its arguments up to `--` (see `bwrap::zygote_args`); `None` for
    /// the built-in sandbox, where a root runner's zygote builds each script's
    /// namespaces from the host's view.
    pub bwrap: Option<(PathBuf, Vec<OsString>)>,
    /// The seccomp programs every script's process installs before its first line.
    pub seccomp: super::seccomp::Filters,
    /// The unprivileged user every script drops to (a root runner's).
    pub user: Option<super::user::SandboxUser>,
    /// Each script gets a view of its own (namespaces and mounts, from its request's
    /// steps); without, each is held by Landlock and the filter on the host's view.
    pub namespaces: bool,
    /// The confinement library, whose `jax_runner_confine` applies each request's plan.
    pub library: PathBuf,
}

impl ZygoteSandbox {
    /// What the zygote's test child tries at start: the namespaces and a fresh
    /// `/proc`, the sandbox user, every capability dropped, the filters.
    pub fn probe_plan(&self) -> Confinement {
        Confinement {
            steps: vec![MountStep::Tmpfs("/tmp".into())],
            pid_namespace: true,
            user: self.user,
            cwd: PathBuf::from("/"),
            ..Default::default()
        }
    }
}

/// What a sandboxed run needs to build each script's sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSetup {
    pub sandboxing: Sandboxing,
    /// `$HOME`, hidden inside.
    pub home: Option<PathBuf>,
    /// Interpreter folders to keep readable inside a hidden `$HOME`.
    pub python_paths: Vec<PathBuf>,
    /// The seccomp programs, where there are some for this machine.
    pub seccomp: super::seccomp::Filters,
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
    fn readable(&self, run: RunPlace<'_>) -> Vec<PathBuf> {
        let mut readable = self.python_paths.clone();
        if let Some(pp) = run.config.environment.var_os("PYTHONPATH") {
            readable.extend(std::env::split_paths(&pp).filter(|p| p.is_absolute()));
        }
        readable.extend(run.shim_dir.map(Path::to_path_buf));
        readable.push(self.helper.clone());
        readable
    }

    /// Before an attempt: its data folder given to the sandbox user, and, where the
    /// script gets no view of its own, its private temporary folder made (returned,
    /// for `TMPDIR` and `HOME`, and to remove after the attempt).
    /// An error names the path it failed on.
    pub fn prepare(
        &self,
        at: AttemptPlace<'_>,
    ) -> Result<Option<PathBuf>, (PathBuf, std::io::Error)> {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| (path, source)
        };
        self.identity
            .own(at.data_dir)
            .map_err(failed(at.data_dir))?;
        if self.sandboxing.has_view() {
            return Ok(None);
        }
        let name = format!("{}-{}", sanitize_id(at.id), at.number);
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
        run: RunPlace<'_>,
        at: AttemptPlace<'_>,
        cwd: &Path,
        private: Option<&Path>,
    ) -> SandboxSpec {
        let config = run.config;
        let mut readable = self.readable(run);
        readable.push(cwd.to_path_buf());
        let mut writable = vec![at.data_dir.to_path_buf()];
        writable.extend(run.compilation_cache.map(Path::to_path_buf));
        let user = self.identity.switched_to();
        let view = Mounts {
            home: self.home.clone(),
            readable,
            writable,
            cwd: cwd.to_path_buf(),
            gpu: at.gpu,
            outputs: vec![config.results_dir.clone(), config.step12_dir.clone()],
            sources: vec![config.output_dir.clone()],
            user,
            // Each scratch tmpfs holds at most the memory limit (what it holds also
            // counts against the limit: see `scratch.rs`).
            scratch_size: at.memory_limit,
        };
        let (steps, split) = match self.sandboxing.has_view() {
            true => {
                let (steps, split) = view::steps_and_split(&view);
                (steps, Some(split))
            }
            false => (Vec::new(), None),
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
            .map(|b| (b.path.clone(), bwrap::args(b, &view, &steps)));
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
            split,
            steps,
            confine,
            helper: self.helper.clone(),
        }
    }

    /// What Landlock grants in `view`: reads of the host's granted paths
    /// (`grants::host_reads`) and the view's readable folders, writes of the writable
    /// folders and the view's scratch or else the private temporary folder, the
    /// granted devices and a GPU's nodes, and what a GPU attempt writes in place
    /// under `/proc`. The same list the view is built from.
    fn grants(&self, view: &Mounts, scratch: &[PathBuf], private: Option<&Path>) -> Grants {
        let mut read = grants::host_reads();
        read.extend(view.readable.iter().cloned());
        let mut write = view.writable.clone();
        write.extend(scratch.iter().cloned());
        write.extend(private.map(Path::to_path_buf));
        let mut devices: Vec<PathBuf> = grants::DEVICES.iter().map(PathBuf::from).collect();
        let mut in_place = Vec::new();
        if view.gpu {
            devices.extend(bwrap::nvidia_devices());
            in_place.extend(grants::GPU_WRITES_IN_PLACE.iter().map(PathBuf::from));
        }
        Grants {
            read,
            write,
            devices,
            in_place,
        }
    }

    /// How to start the warm-start zygote inside the sandbox, or why it cannot be.
    /// With a view of its own, it sees what any script of the run may be given (the
    /// scripts' folders, the outputs (writable, for the data folders) and the
    /// interpreter) and each script's view is cut from it; without one it runs on the
    /// host's and each script is held by Landlock and the filter alone.
    pub fn zygote(&self, run: RunPlace<'_>) -> Result<ZygoteSandbox, String> {
        if let Some(why) = self.sandboxing.no_warm_start() {
            return Err(why.into());
        }
        let library = bwrap::library()
            .map_err(|why| format!("warm start inside the sandbox needs its library: {why}"))?;
        let config = run.config;
        let mut readable = self.readable(run);
        readable.push(config.output_dir.clone());
        readable.push(library.clone());
        let mut writable = vec![config.results_dir.clone(), config.step12_dir.clone()];
        writable.extend(run.compilation_cache.map(Path::to_path_buf));
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
