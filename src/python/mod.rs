//! The Python side: which interpreter runs the scripts, and what it has installed.
//! Chosen once per run, in order: `--python`, `JAX_RUNNER_PYTHON`, the active
//! `VIRTUAL_ENV`, `python3` on PATH when it imports jax, else the managed environment.

mod base;
mod cache;
pub mod setup;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::environment::Environment;
use crate::error::PythonError;

const PROBE: &str = include_str!("probe.py");
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the interpreter came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `--python`.
    Flag,
    /// `JAX_RUNNER_PYTHON`.
    Env,
    /// The active `VIRTUAL_ENV`.
    Virtualenv,
    /// `python3` on PATH.
    Path,
    /// The environment jax-runner manages in the user cache.
    Managed,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Env => "env",
            Source::Virtualenv => "virtualenv",
            Source::Path => "path",
            Source::Managed => "managed",
        }
    }

    /// Why this interpreter, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Flag => "--python",
            Source::Env => "JAX_RUNNER_PYTHON",
            Source::Virtualenv => "VIRTUAL_ENV",
            Source::Path => "python3 on PATH",
            Source::Managed => "managed environment",
        }
    }
}

/// What the probe reports about an interpreter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonInfo {
    /// `sys.executable`.
    pub executable: String,
    /// `sys.prefix`.
    pub prefix: String,
    /// `sys.base_prefix` (the installation a venv was made from).
    #[serde(default)]
    pub base_prefix: String,
    /// `platform.python_version()`.
    pub python_version: String,
    /// Installed jax distribution version.
    pub jax_version: Option<String>,
    /// Installed jaxlib distribution version.
    pub jaxlib_version: Option<String>,
    /// Whether `import jax` worked.
    pub jax_importable: bool,
    /// The exception when it did not.
    pub import_error: Option<String>,
    /// jax-related distributions (jax*, libtpu*, nvidia-*), normalised name to version.
    #[serde(default)]
    pub distributions: std::collections::BTreeMap<String, String>,
    /// PJRT plugins jax would discover (entry points and `jax_plugins.*` modules).
    #[serde(default)]
    pub jax_plugins: Vec<String>,
    /// `sys.path` (empty entries left out): a sandboxed script is granted reads of
    /// these folders, wherever the installation keeps them.
    #[serde(default)]
    pub sys_path: Vec<PathBuf>,
    /// The user site (`site.getusersitepackages()`), granted the same way.
    #[serde(default)]
    pub user_site: Option<PathBuf>,
}

/// The chosen interpreter.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// The command scripts are started with.
    pub path: PathBuf,
    pub source: Source,
    pub info: PythonInfo,
}

/// The inputs of the choice, captured so tests can set them without touching the
/// process environment.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    pub flag: Option<PathBuf>,
    pub env_var: Option<PathBuf>,
    pub virtual_env: Option<PathBuf>,
    pub path_var: Option<OsString>,
}

impl Resolver {
    /// Reads `JAX_RUNNER_PYTHON`, `VIRTUAL_ENV` and `PATH` from the runner's
    /// environment.
    pub fn from_env(flag: Option<PathBuf>, env: &Environment) -> Self {
        let var = |name| env.non_empty(name).map(OsString::from);
        Resolver {
            flag,
            env_var: var("JAX_RUNNER_PYTHON").map(PathBuf::from),
            virtual_env: var("VIRTUAL_ENV").map(PathBuf::from),
            path_var: var("PATH"),
        }
    }

    /// Picks and probes the interpreter a run uses, creating the managed environment
    /// when nothing else has jax; an explicit choice without jax is an error with the
    /// command that fixes it.
    pub fn resolve(&self) -> Result<Interpreter, PythonError> {
        require_jax(self.choose(true)?)
    }

    /// The interpreter a run would use, for inspection: never creates anything and
    /// does not require jax (doctor reports on a broken interpreter too).
    pub fn inspect(&self) -> Result<Interpreter, PythonError> {
        self.choose(false)
    }

    fn choose(&self, create: bool) -> Result<Interpreter, PythonError> {
        let explicit = [
            (self.flag.clone(), Source::Flag),
            (self.env_var.clone(), Source::Env),
            (
                self.virtual_env
                    .as_ref()
                    .map(|v| v.join("bin").join("python")),
                Source::Virtualenv,
            ),
        ];
        if let Some((Some(path), source)) = explicit.into_iter().find(|(p, _)| p.is_some()) {
            return probe_as(&path, source);
        }
        let on_path = find_on_path("python3", self.path_var.as_deref());
        let mut path_without_jax = None;
        if let Some(path) = &on_path {
            if let Ok(found) = probe_as(path, Source::Path) {
                if found.info.jax_importable {
                    return Ok(found);
                }
                tracing::debug!(python = %path.display(), "python3 on PATH has no jax; using the managed environment");
                path_without_jax = Some(found);
            }
        }
        let flavor = setup::Flavor::for_host();
        match (setup::existing(flavor), create, path_without_jax) {
            (Some(python), _, _) => probe_as(&python, Source::Managed),
            (None, true, _) => probe_as(
                &setup::ensure(flavor, self.path_var.as_deref())?,
                Source::Managed,
            ),
            (None, false, Some(found)) => Ok(found),
            (None, false, None) => Err(PythonError::NoBasePython),
        }
    }
}

fn require_jax(interp: Interpreter) -> Result<Interpreter, PythonError> {
    if interp.info.jax_importable {
        return Ok(interp);
    }
    let reason = interp
        .info
        .import_error
        .clone()
        .unwrap_or_else(|| "jax is not installed".into());
    let fix = format!(
        "{} -m pip install {}   (or run `jax-runner setup` and drop {})",
        shell_quote(&interp.path),
        setup::Flavor::Cpu.pinned_jax(),
        interp.source.describe()
    );
    Err(PythonError::NoJax {
        path: interp.path,
        reason,
        fix,
    })
}

/// Probes `path` and tags it with where it came from.
pub fn probe_as(path: &Path, source: Source) -> Result<Interpreter, PythonError> {
    if !is_executable(path) {
        return Err(PythonError::NotFound {
            path: path.to_path_buf(),
            source_name: source.describe(),
        });
    }
    let info = probe(path)?;
    Ok(Interpreter {
        path: path.to_path_buf(),
        source,
        info,
    })
}

/// What the probe says about an interpreter: remembered from an earlier run while
/// nothing it depends on changed (see [`cache`]), else asked afresh.
pub fn probe(path: &Path) -> Result<PythonInfo, PythonError> {
    let dir = crate::paths::cache_dir();
    if let Some(info) = cache::lookup(&dir, path) {
        return Ok(info);
    }
    let (info, folders) = probe_fresh(path)?;
    cache::store(&dir, path, &info, &folders);
    Ok(info)
}

/// The probe's view of what its answer depends on.
#[derive(Deserialize)]
struct ProbeInputs {
    #[serde(default)]
    sys_path: Vec<PathBuf>,
    user_site: Option<PathBuf>,
}

/// Runs the embedded probe in the interpreter and parses its report; returns it with
/// the folders it depends on.
fn probe_fresh(path: &Path) -> Result<(PythonInfo, Vec<PathBuf>), PythonError> {
    let mut cmd = Command::new(path);
    // The probe comes on stdin (`python -`): a program that is no Python then names
    // `-` in its complaint, not the probe's whole text.
    cmd.arg("-").env("JAX_PLATFORMS", "cpu");
    let (status, stdout, stderr) = capture_input(cmd, Some(PROBE.as_bytes()), PROBE_TIMEOUT)
        .map_err(|source| PythonError::Spawn {
            path: path.to_path_buf(),
            source,
        })?;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let inputs = line.and_then(|l| serde_json::from_str::<ProbeInputs>(l).ok());
    match line.map(serde_json::from_str::<PythonInfo>) {
        Some(Ok(info)) => {
            let folders = inputs
                .map(|i| i.sys_path.into_iter().chain(i.user_site).collect())
                .unwrap_or_default();
            Ok((info, folders))
        }
        _ => Err(PythonError::Probe {
            path: path.to_path_buf(),
            message: format!(
                "{status}; stderr: {}",
                stderr.lines().last().unwrap_or("").trim()
            ),
        }),
    }
}

/// Runs a short command to completion with a time limit, capturing its output.
/// Returns the exit status (or `timed out after …`), stdout and stderr.
pub fn capture(cmd: Command, limit: Duration) -> std::io::Result<(String, String, String)> {
    capture_input(cmd, None, limit)
}

/// [`capture`], with `input` written to the command's standard input.
/// Spawns `cmd`, trying again for up to a second while the kernel answers `ETXTBSY`:
/// an interpreter (or wrapper script) written a moment ago can still be open for
/// writing in a process another thread forked meanwhile, until that child execs.
fn spawn_when_not_busy(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn capture_input(
    mut cmd: Command,
    input: Option<&'static [u8]>,
    limit: Duration,
) -> std::io::Result<(String, String, String)> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = spawn_when_not_busy(&mut cmd)?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        // On a thread: a program that never reads its input must not block the timer.
        std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, data);
        });
    }
    let out_pipe = child.stdout.take().expect("piped");
    let err_pipe = child.stderr.take().expect("piped");
    // Both pipes drain on threads so a chatty or hung child cannot block the timer.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let out_reader = drain(Box::new(out_pipe));
    let err_reader = drain(Box::new(err_pipe));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status.to_string();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break format!("timed out after {}s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok((status, stdout, stderr))
}

pub use crate::paths::find_on_path;
use crate::paths::is_executable;

/// Quotes a path for a copy-pasteable shell command.
pub fn shell_quote(path: &Path) -> String {
    let s = path.to_string_lossy();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests;
