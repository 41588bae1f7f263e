//! Typed errors of the library, one enum per operation, and the top-level [`Error`]
//! that the binary maps to exit codes.

use std::path::PathBuf;
use std::sync::Arc;

/// A configuration the runner cannot use: caught before any work starts.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("output directory {path} does not exist: pass --output-dir with the folder that holds the rendered scripts")]
    OutputDirMissing { path: PathBuf },
    #[error("output directory {path} is not a directory: pass --output-dir with the folder that holds the rendered scripts")]
    OutputDirNotADirectory { path: PathBuf },
    #[error("failed to read output directory {path}: pass --output-dir with a folder this user can list")]
    OutputDirUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "failed to create results directory {path}: pass --results-dir DIR to write elsewhere"
    )]
    ResultsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A symlink on the results path below `--output-dir` (`execution_results`,
    /// `execution_results/jax`, `12_execute_output`): refused before anything is
    /// written, as the tree may be another user's and the link lead anywhere.
    #[error("failed to use the {what}: `{}` is a symbolic link (to `{}`); jax-runner does not write through links in the tree. {fix}", link.display(), target.display())]
    ResultsLink {
        what: &'static str,
        link: PathBuf,
        target: PathBuf,
        fix: &'static str,
    },
    #[error(
        "failed to lock the results folder with {path}: pass --results-dir DIR to write elsewhere"
    )]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another jax-runner (pid {holder}) is writing {path}: wait for it to finish, or pass --results-dir with another folder")]
    ResultsLocked { path: PathBuf, holder: String },
    #[error("--sandbox on, but {reason}: install it with `{hint}`, or run with --sandbox off")]
    SandboxUnavailable { reason: String, hint: &'static str },
    #[error("the sandbox user (uid {uid}) cannot reach {what} {needed}: {closed} (mode {mode:04o}) is closed to it, and without mount namespaces here nothing can open a way for it; run jax-runner as an ordinary user, let others pass through with `chmod o+x {closed}`, keep {what} elsewhere, or run with --sandbox off")]
    SandboxCannotReach {
        uid: u32,
        what: &'static str,
        needed: PathBuf,
        closed: PathBuf,
        mode: u32,
    },
    #[error("invalid value {value:?} for {option}: {reason}")]
    Invalid {
        option: &'static str,
        value: String,
        reason: String,
    },
    #[error("failed to read the config file {path}")]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse the config file {path}: {message}")]
    ConfigSyntax { path: PathBuf, message: String },
    #[error("{path}:{line}: `{key}` {reason}")]
    ConfigKey {
        path: PathBuf,
        line: usize,
        key: String,
        reason: String,
    },
    #[error("invalid value {value:?} in the variable {name}: {reason}")]
    Variable {
        name: String,
        value: String,
        reason: String,
    },
    #[error("profile `{name}` is not in {path} (it has: {known}): add [profile.{name}] or pick another with --profile")]
    UnknownProfile {
        name: String,
        path: PathBuf,
        known: String,
    },
}

/// Discovery failed as a whole (single unreadable entries are warnings, not errors).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// `-k/--filter` and `--exclude` left nothing of a tree that has scripts: nothing
    /// runs and nothing of the results folder changes.
    #[error("{selected} of {total} scripts selected by {selection}: nothing to run, and the results folder is left as it was (`jax-runner list` shows the ids and paths the patterns match)")]
    NothingSelected {
        selected: usize,
        total: usize,
        selection: String,
    },
    #[error("failed to read the render manifest {path}")]
    Manifest {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("failed to parse the render manifest {path}: {message}")]
    ManifestJson { path: PathBuf, message: String },
    #[error("failed to read the render manifest {path}: it is {size} bytes, more than the {limit} bytes jax-runner reads (GNN writes a few KiB per model); check that step 11 wrote it, or move it aside to run what the tree walk finds")]
    ManifestTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
}

/// The Python interpreter could not be found, probed or provisioned.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("python interpreter {path} ({source_name}) does not exist or is not executable")]
    NotFound {
        path: PathBuf,
        source_name: &'static str,
    },
    #[error("failed to run {path} to probe it")]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("probing {path} failed ({message}): is it a Python 3 interpreter? pass --python with one that has jax, or run `jax-runner setup`")]
    Probe { path: PathBuf, message: String },
    #[error("{path} cannot import jax ({reason}); fix it with:\n    {fix}")]
    NoJax {
        path: PathBuf,
        reason: String,
        fix: String,
    },
    #[error("no python3 found on PATH to create the managed environment: install Python 3.11 or newer (for example `apt-get install python3 python3-venv`) or pass --python")]
    NoBasePython,
    #[error("failed to {step} while creating the managed environment {venv} (log: {log}); retry with `jax-runner setup`, or pass --python with an interpreter that has jax")]
    Setup {
        step: &'static str,
        venv: PathBuf,
        log: PathBuf,
        #[source]
        source: Option<std::io::Error>,
    },
    #[error("failed to create the cache directory {path}")]
    CacheDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writing a report file failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("failed to write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to move {path}, a file of a script this run does not have, into {to}")]
    Move {
        path: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to remove {path}, an earlier run's history folder")]
    Prune {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to render junit.xml")]
    Junit(#[source] quick_junit::SerializeError),
    #[error("failed to write a report: its writer panicked: {message}")]
    Panicked { message: String },
    /// Several end-of-run documents failed on one event; the dispatcher lists each.
    #[error("failed to write {} reports", .0.len())]
    Several(Vec<ReportError>),
    #[error("{0}; no script started after that: free space, then run again with --resume to skip what succeeded")]
    NoSpace(crate::halt::HaltReason),
    #[error("failed to serialize {what}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl ReportError {
    /// The error of a report writer that panicked, with the panic's message.
    pub fn panicked(panic: Box<dyn std::any::Any + Send>) -> ReportError {
        ReportError::Panicked {
            message: panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default(),
        }
    }

    /// This error, or each of several, one by one.
    pub fn flatten(self) -> Vec<ReportError> {
        match self {
            ReportError::Several(all) => all.into_iter().flat_map(Self::flatten).collect(),
            one => vec![one],
        }
    }
}

/// Everything that can stop a command; the binary maps each to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Python(#[from] PythonError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Ray(#[from] RayError),
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    #[error("failed to start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// A stop request (SIGINT, SIGTERM, SIGHUP) came before the first script started.
    #[error(
        "interrupted during start-up: no script ran, and the previous run's results are untouched"
    )]
    Interrupted,
}

/// A cluster failure.
#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error("failed to reach the Ray cluster at {address}: {message}")]
    Unreachable { address: String, message: String },
    #[error("the Ray cluster at {address} answered {status} to {what}: {body}")]
    Refused {
        address: String,
        what: String,
        status: u16,
        body: String,
    },
    #[error("the Ray cluster at {address} has no GPU, and a GPU run was asked for: use --device cpu, or add GPU nodes")]
    NoGpu { address: String },
    #[error("failed to package {path}: {message}")]
    Package { path: PathBuf, message: String },
}

/// A Slurm failure: a client command that would not answer, or a cluster that cannot
/// run what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("failed to run {command}: {source}; is Slurm's client (sbatch, squeue, scontrol, scancel, sinfo) on PATH?")]
    Missing {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Refused { command: String, stderr: String },
    #[error("the Slurm partition {partition:?} does not exist (sinfo lists: {known}); pass --slurm-partition with one of them")]
    NoPartition { partition: String, known: String },
    #[error("the Slurm partition {partition} has no GPU (no gpu GRES on its nodes), and a GPU run was asked for: use --device cpu, or --slurm-partition with GPUs")]
    NoGpu { partition: String },
    #[error("failed to write the job's files in {path}: {source}")]
    Files {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}; no script started after that")]
    Halted(String),
    #[error("the compute node {node} cannot see {path}: the tree and its results must be on a file system the nodes share (run jax-runner from such a folder, or use --backend local inside an allocation)")]
    NotShared { node: String, path: PathBuf },
}

/// Why bubblewrap cannot sandbox scripts on this machine.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("bwrap is not installed")]
    NotInstalled,
    #[error("--sandbox landlock leaves bwrap out")]
    NotAsked,
    #[error("bwrap could not start: {0}")]
    Start(std::io::Error),
    #[error("bwrap cannot create namespaces here: {stderr}")]
    Namespaces { stderr: String },
    #[error("{version} is too old: it lacks --perms and --dir (bubblewrap 0.5 or newer has them)")]
    TooOld { version: String },
}

/// Why the warm-start zygote cannot start a script (it then starts cold).
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    #[error("socketpair: {0}")]
    Socket(std::io::Error),
    #[error("cannot read the runner's scheduling values and resource limits: {0}")]
    Baseline(std::io::Error),
    #[error("cannot start {python}: {source}")]
    Start {
        python: PathBuf,
        source: std::io::Error,
    },
    #[error("the zygote exited while importing jax")]
    Exited,
    #[error("the zygote did not get ready: {0}")]
    NotReady(std::io::Error),
    #[error("zygote lock poisoned")]
    Poisoned,
    #[error("zygote unreachable: {0}")]
    Unreachable(std::io::Error),
    #[error("the zygote is gone")]
    Gone,
    #[error("bad zygote reply: {0}")]
    Protocol(String),
    #[error("{0}")]
    Refused(String),
    #[error("the zygote could not fork")]
    NoFork,
    #[error("sandboxed, and the zygote runs outside the sandbox")]
    Sandboxed,
    #[error("unsandboxed, and the zygote runs inside the sandbox")]
    NotSandboxed,
    #[error("the slot's zygote lives in a view made for other scripts")]
    OtherView,
    #[error("the zygote cannot build a script's sandbox here: {0}")]
    SandboxProbe(String),
    #[error("failed to place the script in its cgroup: {0}")]
    Cgroup(std::io::Error),
    #[error("the {0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("the attempt's leak-tracing token is longer than the zygote's {0} bytes")]
    TokenTooLong(usize),
}

/// The messages of `err` and of every error beneath it, outermost first.
pub fn chain(err: &dyn std::error::Error) -> Vec<String> {
    let mut out = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        out.push(e.to_string());
        source = e.source();
    }
    out
}
