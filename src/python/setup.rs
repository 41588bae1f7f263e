//! The managed Python environment: a virtual environment in the user cache, built with
//! `python3 -m venv` from a pinned requirements file kept in the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::error::PythonError;
use crate::lock::FileLock;

const CPU_REQUIREMENTS: &str = include_str!("../../requirements/jax-cpu.txt");
const CUDA12_REQUIREMENTS: &str = include_str!("../../requirements/jax-cuda12.txt");
/// Written last, so a half-built environment is never taken for a finished one.
const READY_MARKER: &str = ".jax-runner-ready";

/// Which set of wheels the managed environment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// CPU-only jaxlib.
    Cpu,
    /// jax with the CUDA 12 plugin and its CUDA/cuDNN wheels.
    Cuda12,
}

impl Flavor {
    /// CUDA wheels when NVML reports an NVIDIA driver, else CPU.
    pub fn for_host() -> Flavor {
        match crate::gpu::nvidia_gpu_count() {
            Some(n) if n > 0 => Flavor::Cuda12,
            _ => Flavor::Cpu,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Flavor::Cpu => "cpu",
            Flavor::Cuda12 => "cuda12",
        }
    }

    pub fn requirements(self) -> &'static str {
        match self {
            Flavor::Cpu => CPU_REQUIREMENTS,
            Flavor::Cuda12 => CUDA12_REQUIREMENTS,
        }
    }

    /// The jax and jaxlib pins, as `pip install` arguments.
    pub fn pinned_jax(self) -> String {
        self.requirements()
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("jax==") || l.starts_with("jaxlib=="))
            .map(|l| format!("'{l}'"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The environment's folder: named by flavor and a hash of the pins, so changing
    /// the requirements makes a fresh environment instead of mutating an old one.
    pub fn venv_dir(self) -> PathBuf {
        let digest = Sha256::digest(self.requirements().as_bytes());
        let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        crate::paths::cache_dir()
            .join("venvs")
            .join(format!("jax-{}-{hash}", self.name()))
    }
}

/// Installs `packages` (pip requirement strings) into the managed environment of
/// `flavor`, which must exist; pip's output goes to the setup log beside it. The
/// pinned jax stays as it is: pip is told to keep it (`-c` the pins).
pub fn add_packages(flavor: Flavor, packages: &[String]) -> Result<(), PythonError> {
    let venv = flavor.venv_dir();
    let log = venv.with_extension("setup.log");
    let fail = |source| PythonError::Setup {
        step: "install the packages asked for (pip install)",
        venv: venv.clone(),
        log: log.clone(),
        source,
    };
    let _lock = FileLock::acquire(&venv.with_extension("lock")).map_err(|e| fail(Some(e)))?;
    let pins = venv.join("requirements.txt");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| fail(Some(e)))?;
    let err = out.try_clone().map_err(|e| fail(Some(e)))?;
    tracing::warn!("installing {} into {}", packages.join(", "), venv.display());
    let status = Command::new(python_in(&venv))
        .args(["-m", "pip", "install", "--disable-pip-version-check", "-c"])
        .arg(&pins)
        .args(packages)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| fail(Some(e)))?;
    match status.success() {
        true => Ok(()),
        false => Err(fail(None)),
    }
}

fn python_in(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// The managed environment's interpreter, when it is complete.
pub fn existing(flavor: Flavor) -> Option<PathBuf> {
    let venv = flavor.venv_dir();
    venv.join(READY_MARKER).is_file().then(|| python_in(&venv))
}

/// The managed environment's interpreter, created first when missing, from the
/// fastest build on `path_var` of the first `python3`'s version (`base.rs`); from
/// that first `python3` when the faster one cannot make a virtual environment.
pub fn ensure(flavor: Flavor, path_var: Option<&std::ffi::OsStr>) -> Result<PathBuf, PythonError> {
    if let Some(python) = existing(flavor) {
        return Ok(python);
    }
    let bases = super::base::bases(path_var);
    let (last, before) = bases.split_last().ok_or(PythonError::NoBasePython)?;
    for base in before {
        match create(flavor, base) {
            Err(PythonError::Setup {
                step: MAKE_VENV, ..
            }) => tracing::warn!(
                "setup: {} could not make the environment; making it from {}",
                base.display(),
                last.display()
            ),
            made => return made,
        }
    }
    create(flavor, last)
}

/// The step of [`create`] that the base interpreter does.
const MAKE_VENV: &str = "create the virtual environment (python3 -m venv)";

/// Creates the managed environment (or waits for another process creating it) and
/// returns its interpreter. Output of venv and pip goes to a log beside it.
pub fn create(flavor: Flavor, base_python: &Path) -> Result<PathBuf, PythonError> {
    let venv = flavor.venv_dir();
    let parent = venv.parent().expect("venv dir has a parent");
    std::fs::create_dir_all(parent).map_err(|source| PythonError::CacheDir {
        path: parent.to_path_buf(),
        source,
    })?;
    let log = venv.with_extension("setup.log");
    let fail = |step, source| PythonError::Setup {
        step,
        venv: venv.clone(),
        log: log.clone(),
        source,
    };
    let _lock = FileLock::acquire(&venv.with_extension("lock"))
        .map_err(|e| fail("lock the environment folder", Some(e)))?;
    if let Some(python) = existing(flavor) {
        return Ok(python); // another process finished it while we waited
    }
    tracing::warn!(
        "creating the managed Python environment {} ({} wheels, pinned jax); this happens once and takes a minute or two",
        venv.display(),
        flavor.name()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .map_err(|e| fail("remove a half-built environment", Some(e)))?;
    }
    let log_file =
        std::fs::File::create(&log).map_err(|e| fail("create the setup log", Some(e)))?;
    let run = |step: &'static str, cmd: &mut Command| -> Result<(), PythonError> {
        let out = log_file.try_clone().map_err(|e| fail(step, Some(e)))?;
        let err = log_file.try_clone().map_err(|e| fail(step, Some(e)))?;
        tracing::info!("setup: {step}");
        let status = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| fail(step, Some(e)))?;
        if status.success() {
            Ok(())
        } else {
            Err(fail(step, None))
        }
    };
    run(
        MAKE_VENV,
        Command::new(base_python).arg("-m").arg("venv").arg(&venv),
    )?;
    let requirements = venv.join("requirements.txt");
    std::fs::write(&requirements, flavor.requirements())
        .map_err(|e| fail("write requirements.txt", Some(e)))?;
    run(
        "install the pinned requirements (pip install -r requirements.txt)",
        Command::new(python_in(&venv))
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
    )?;
    std::fs::write(venv.join(READY_MARKER), flavor.requirements())
        .map_err(|e| fail("mark the environment ready", Some(e)))?;
    tracing::info!(
        "managed Python environment ready: {}",
        python_in(&venv).display()
    );
    Ok(python_in(&venv))
}
