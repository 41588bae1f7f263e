//! The validated run configuration: what the CLI becomes before the core sees it.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::environment::Environment;
use crate::error::ConfigError;
use crate::model::{Device, Reuse, SandboxMode, Setting, XlaPreset};
use crate::retry::RetryPolicy;

mod choices;
mod cluster;
mod exports;
pub mod layers;
mod options;
pub mod overrides;
pub mod profile;
pub mod select;
mod tree;
mod validate;
pub mod values;

pub use exports::ExportOptions;
pub use options::{
    Backend, DiscoverOptions, FailFast, Fallback, Layered, Layout, Progress, RunOptions,
};
pub use overrides::{settings_for, Override, ScriptSettings};
pub use select::Selection;
pub use tree::{absolute, validate_output_dir, PipelineTree};
use tree::{refuse_links, results_dir};
pub(crate) use validate::valid_env_name;
use validate::{at_least_one, extra_env, gpu_share, ray_options, retry_on, validate_limits};

/// Where the persistent XLA compilation cache lives, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompilationCache {
    Off,
    Dir(PathBuf),
}

impl CompilationCache {
    /// The folder used when `--compilation-cache` names none (unsandboxed runs; a
    /// sandboxed run keeps its own beside it).
    pub fn default_dir() -> PathBuf {
        crate::paths::cache_dir().join("jax-compilation-cache")
    }
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The pipeline output tree to search (absolute).
    pub output_dir: PathBuf,
    /// Where results, logs and metrics go (absolute, created).
    pub results_dir: PathBuf,
    /// The folders this run created for `results_dir` (innermost first): a run that
    /// finds nothing to run removes them again rather than leave empty reports.
    pub created_dirs: Vec<PathBuf>,
    pub device: Device,
    pub recursive: bool,
    /// Parallel scripts; `None` picks the default for the platform.
    pub jobs: Option<NonZeroUsize>,
    /// Wall-clock limit of one attempt.
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping a script.
    pub grace: Duration,
    /// `--python`, when given.
    pub python: Option<PathBuf>,
    pub compilation_cache: CompilationCache,
    pub retry: RetryPolicy,
    /// Move GPU scripts to the CPU when the GPU environment fails (`--fallback cpu`).
    pub fallback_to_cpu: bool,
    /// Cap on each log file, keeping head and tail.
    pub max_log_bytes: Option<u64>,
    /// What `history/` keeps of earlier runs (`--history-runs`, `--history-size`).
    pub history: HistoryBudget,
    /// Inspect the environment (doctor) once before the run.
    pub preflight: bool,
    pub sandbox: SandboxMode,
    /// `--memory-limit`, bytes.
    pub memory_limit: Option<u64>,
    /// `--max-procs` as given; [`RunConfig::process_limit`] is what a script gets (a
    /// Slurm node is sent that figure, so it holds the script to what its record says).
    pub max_procs: Option<u32>,
    /// `--env KEY=VALUE`.
    pub extra_env: Vec<(String, String)>,
    /// `--env-pass NAME`.
    pub pass_env: Vec<String>,
    /// Also write GNN's step-12 layout.
    pub gnn_layout: bool,
    /// GNN's step-12 folder (`<tree>/12_execute_output`): beside `11_render_output`,
    /// also when `--output-dir` is the render folder itself. Never searched.
    pub step12_dir: PathBuf,
    pub warm_start: WarmStart,
    /// `--resume` / `--rerun-failed`.
    pub reuse: Reuse,
    /// `--jax-trace`: a jax.profiler trace per script.
    pub jax_trace: bool,
    /// `--backend ray`: the cluster's dashboard address and token.
    pub ray: Option<RayOptions>,
    /// `--backend slurm`: where and how jobs are submitted.
    pub slurm: Option<SlurmOptions>,
    /// `-k/--filter` and `--exclude`: the scripts this run takes.
    pub selection: Selection,
    /// `--fail-fast` (1) or `--max-fail N`: no script starts after this many failures.
    pub max_fail: Option<NonZeroUsize>,
    /// `--fail-fast=now`: a spent budget also stops the running scripts.
    pub fail_now: bool,
    /// `--dry-run`: print the plan; write nothing, start nothing.
    pub dry_run: bool,
    /// `--no-capture`: each script's output also goes to the terminal as it comes.
    pub no_capture: bool,
    /// `--export-*`: the end-of-run documents also written where the user named.
    pub exports: Vec<crate::model::Export>,
    /// Per-script settings from the profile's overrides, first match first.
    pub overrides: Vec<Override>,
    /// Each option's effective value and source (see [`Setting`]).
    pub settings: std::collections::BTreeMap<String, Setting>,
    /// The `jax-runner.toml` profile in use, when a file was read.
    pub profile: Option<String>,
    /// This run's unique id (see [`crate::paths::run_id`]).
    pub run_id: String,
    /// The runner's command line, as it was started.
    pub argv: Vec<String>,
    /// `--gpu-share`: scripts per GPU; `None` keeps one.
    pub gpu_share: Option<GpuShare>,
    /// `--xla-preset`, added to GPU attempts' environment.
    pub xla_preset: Option<XlaPreset>,
    /// The runner's parent environment, read once: every later decision asks it.
    pub environment: Arc<Environment>,
}

/// `--gpu-share`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuShare {
    /// This many scripts per GPU.
    Fixed(NonZeroUsize),
    /// From free GPU memory and the history's GPU peaks.
    Auto,
}

/// The most scripts `--gpu-share N` may put on one GPU.
pub const MAX_GPU_SHARE: usize = 64;

impl RunConfig {
    /// The most processes (and threads: a pids cgroup counts both) one script's tree
    /// may hold: `--max-procs`, or [`default_max_procs`] on the machine that runs it.
    pub fn process_limit(&self) -> u32 {
        self.max_procs.unwrap_or_else(default_max_procs)
    }

    /// Whether any script may run on a GPU: the run's device or an override's.
    pub fn may_use_gpu(&self) -> bool {
        self.device != Device::Cpu
            || self
                .overrides
                .iter()
                .any(|o| o.device.is_some_and(|d| d != Device::Cpu))
    }
}

/// Where a Ray cluster is.
#[derive(Debug, Clone)]
pub struct RayOptions {
    /// `http://HOST:8265`.
    pub address: String,
    /// Bearer token for clusters with token authentication.
    pub token: Option<String>,
    /// `--ray-max-return`: the largest data folder a job sends back, bytes.
    pub max_return: u64,
}

/// How Slurm jobs are submitted (`--slurm-*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmOptions {
    /// `--slurm-partition`.
    pub partition: Option<String>,
    /// `--slurm-account`.
    pub account: Option<String>,
    /// `--slurm-qos`.
    pub qos: Option<String>,
    /// `--slurm-arg`, each passed to sbatch as given.
    pub args: Vec<String>,
}

/// `--warm-start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmStart {
    /// Wherever it can be done, inside the sandbox too.
    Auto,
    On,
    Off,
}

/// The process limit a script gets without `--max-procs`: 64 a core, at least 4,096.
/// A fork bomb, or a loop that starts processes and never waits for them, stops there,
/// not at the machine's last PID (32,768 on a small machine), with every other script
/// and the runner itself still able to fork. jax's own threads (about two a core for
/// the CPU client, a few dozen more a GPU) stay far below it; a script that needs
/// more asks with `--max-procs`.
pub fn default_max_procs() -> u32 {
    // Once a process: std reads the cgroup's quota files each time it is asked, and
    // every attempt asks (twenty system calls a script, measured).
    static LIMIT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        u32::try_from(cores.saturating_mul(64))
            .unwrap_or(u32::MAX)
            .max(4096)
    })
}

impl RunConfig {
    /// Validates the options; creates the results folder (a dry run creates nothing).
    /// A value a variable or a profile gave is blamed on it.
    pub fn from_options(opts: RunOptions) -> Result<Self, ConfigError> {
        let sources = opts.layered.sources.clone();
        Self::validate(opts).map_err(|e| match e {
            ConfigError::Invalid {
                option,
                value,
                reason,
            } => sources
                .get(option.trim_start_matches("--"))
                .and_then(|s| s.blame(option, &value, &reason))
                .unwrap_or(ConfigError::Invalid {
                    option,
                    value,
                    reason,
                }),
            other => other,
        })
    }

    fn validate(opts: RunOptions) -> Result<Self, ConfigError> {
        let output_dir = validate_output_dir(&opts.discover.output_dir)?;
        let tree = PipelineTree::of(&output_dir);
        // `--fail-fast` is `--max-fail 1`.
        let fail_fast = (opts.fail_fast != FailFast::Off).then_some(1);
        let max_fail = at_least_one("--max-fail", fail_fast.or(opts.max_fail))?;
        let jobs = at_least_one("--jobs", opts.jobs)?;
        validate_limits(&opts)?;
        let compilation_cache = match opts.compilation_cache.as_deref() {
            Some("off") | Some("none") => CompilationCache::Off,
            Some(dir) => CompilationCache::Dir(absolute(Path::new(dir))),
            None => CompilationCache::Dir(CompilationCache::default_dir()),
        };
        let ray = ray_options(&opts)?;
        let slurm = (opts.cluster.backend == Backend::Slurm).then(|| SlurmOptions {
            partition: opts.cluster.slurm_partition.clone(),
            account: opts.cluster.slurm_account.clone(),
            qos: opts.cluster.slurm_qos.clone(),
            args: opts.cluster.slurm_arg.clone(),
        });
        let gpu_share = gpu_share(opts.gpu_share.as_deref())?;
        let retry_on = retry_on(opts.retry_on.as_deref())?;
        let extra_env = extra_env(&opts.env)?;
        let exports = opts.exports.validate(opts.events.as_deref())?;
        let selection = Selection::of(&opts.discover, &output_dir)?;
        let layered = opts.layered;
        let overrides = layered
            .overrides
            .iter()
            .map(Override::parse)
            .collect::<Result<Vec<_>, _>>()?;
        // Before anything is written: a link on the results path is refused.
        refuse_links(opts.discover.results_dir.as_deref(), &tree)?;
        // Last: a value refused above leaves no folder behind.
        let (results_dir, created_dirs) = match opts.dry_run {
            true => (
                opts.discover
                    .results_dir
                    .as_deref()
                    .map_or_else(|| tree.default_results_dir(), absolute),
                Vec::new(),
            ),
            false => results_dir(opts.discover.results_dir.as_deref(), &tree)?,
        };
        Ok(RunConfig {
            gpu_share,
            xla_preset: opts.xla_preset,
            run_id: crate::paths::run_id(std::time::SystemTime::now()),
            // The runner's own command line, as it was started: about the process, not
            // its environment.
            argv: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            retry: RetryPolicy {
                retries: opts.retries,
                retry_on,
                base_delay: opts.retry_delay,
                ..RetryPolicy::default()
            },
            extra_env,
            ray,
            slurm,
            sandbox: opts.sandbox,
            memory_limit: opts.memory_limit,
            max_procs: opts.max_procs,
            warm_start: opts.warm_start,
            reuse: match (opts.resume, opts.rerun_failed) {
                (true, _) => Reuse::Resume,
                (false, true) => Reuse::RerunFailed,
                (false, false) => Reuse::None,
            },
            jax_trace: opts.jax_trace,
            selection,
            max_fail,
            fail_now: opts.fail_fast == FailFast::Now,
            dry_run: opts.dry_run,
            no_capture: opts.no_capture,
            exports,
            overrides,
            settings: layered.settings,
            profile: layered.profile,
            environment: layered.environment.clone(),
            gnn_layout: match opts.layout {
                Layout::Auto => tree.is_gnn,
                Layout::Gnn => true,
                Layout::Plain => false,
            },
            step12_dir: tree.step12_dir(),
            fallback_to_cpu: opts.fallback == Fallback::Cpu,
            max_log_bytes: opts.max_log_size,
            history: HistoryBudget {
                runs: opts.history_runs,
                bytes: opts.history_size,
            },
            preflight: !opts.no_preflight,
            recursive: opts.discover.recursive(),
            pass_env: opts.env_pass,
            output_dir,
            results_dir,
            created_dirs,
            device: opts.device,
            jobs,
            timeout: opts.timeout,
            grace: opts.grace,
            python: opts
                .python
                .map(|p| program_path(&p, layered.environment.var_os("PATH"))),
            compilation_cache,
        })
    }
}

/// What `history/` keeps of earlier runs: the newest by run id (which starts with the
/// run's start time), as many as fit both bounds. The current run's folder is never
/// removed, and counts towards `runs` where it is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBudget {
    /// Earlier runs' folders kept at most (`--history-runs`).
    pub runs: usize,
    /// Bytes the kept earlier runs' folders may hold together (`--history-size`).
    pub bytes: u64,
}

impl Default for HistoryBudget {
    /// As `--history-runs` and `--history-size` default.
    fn default() -> Self {
        HistoryBudget {
            runs: 10,
            bytes: 100 * 1024 * 1024,
        }
    }
}

/// `--python` as a shell finds a program: a bare name (`python3`, no `/`) on `PATH`,
/// the first executable file of that name; anything else relative to the current
/// folder. A name found nowhere stays as given, for the check to name.
pub fn program_path(given: &std::path::Path, path: Option<&std::ffi::OsStr>) -> PathBuf {
    if given.components().count() != 1 || given.to_string_lossy().contains('/') {
        return absolute(given);
    }
    crate::paths::find_on_path(&given.to_string_lossy(), path)
        .map(|found| absolute(&found))
        .unwrap_or_else(|| given.to_path_buf())
}

/// Options as a test starts from: CPU, no cache, no sandbox, one retry, clap's
/// defaults otherwise, and the test process's environment.
#[cfg(test)]
pub(crate) fn test_options(dir: &Path) -> RunOptions {
    let dir = dir.to_string_lossy();
    let mut o = RunOptions::from_args([
        "--output-dir",
        &dir,
        "--device",
        "cpu",
        "--compilation-cache",
        "off",
        "--sandbox",
        "off",
        "--warm-start",
        "off",
        "--timeout",
        "60s",
        "--grace",
        "1s",
        "--no-preflight",
    ])
    .expect("the test options parse");
    o.layered.environment = Arc::new(Environment::capture());
    o
}

#[cfg(test)]
mod tests;
