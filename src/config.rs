//! The validated run configuration: what the CLI becomes before the core sees it.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ConfigError;
use crate::model::{Device, Reuse, SandboxMode, Setting, XlaPreset};
use crate::retry::RetryPolicy;

pub mod overrides;
pub mod profile;
pub mod select;
mod tree;
mod validate;
pub mod values;

pub use overrides::{settings_for, Override, ScriptSettings};
pub use select::Selection;
use tree::results_dir;
pub use tree::{absolute, validate_output_dir, PipelineTree};
pub(crate) use validate::valid_env_name;
use validate::{extra_env, gpu_share, invalid, ray_options, retry_on, validate_limits};

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
    /// Inspect the environment (doctor) once before the run.
    pub preflight: bool,
    pub sandbox: SandboxMode,
    /// `--memory-limit`, bytes.
    pub memory_limit: Option<u64>,
    /// `--max-procs`.
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
    /// `-k/--filter` and `--exclude`: the scripts this run takes.
    pub selection: Selection,
    /// `--fail-fast` (1) or `--max-fail N`: no script starts after this many failures.
    pub max_fail: Option<NonZeroUsize>,
    /// `--dry-run`: print the plan; write nothing, start nothing.
    pub dry_run: bool,
    /// `--no-capture`: each script's output also goes to the terminal as it comes.
    pub no_capture: bool,
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

/// `--warm-start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmStart {
    /// Wherever it can be done, inside the sandbox too.
    Auto,
    On,
    Off,
}

/// The raw choices from the edge, before validation.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub output_dir: PathBuf,
    pub results_dir: Option<PathBuf>,
    pub device: Device,
    pub recursive: bool,
    pub jobs: Option<usize>,
    pub timeout: Duration,
    pub grace: Duration,
    pub python: Option<PathBuf>,
    /// `None` means the default folder in the user cache; `Some("off")` disables it.
    pub compilation_cache: Option<String>,
    /// Retries after the first attempt.
    pub retries: u32,
    /// Failure class names to retry; `None` keeps the default set.
    pub retry_on: Option<Vec<String>>,
    /// Delay before the first retry (doubles after each).
    pub retry_delay: Duration,
    /// `--fallback cpu` (or `none`).
    pub fallback_to_cpu: bool,
    pub max_log_bytes: Option<u64>,
    pub preflight: bool,
    pub sandbox: SandboxMode,
    pub memory_limit: Option<u64>,
    pub max_procs: Option<u32>,
    /// `KEY=VALUE` strings.
    pub env: Vec<String>,
    pub env_pass: Vec<String>,
    /// `Some(true)`: GNN layout; `Some(false)`: plain; `None`: when the tree holds
    /// `11_render_output`.
    pub gnn_layout: Option<bool>,
    pub warm_start: WarmStart,
    pub reuse: Reuse,
    pub jax_trace: bool,
    /// `Some(address)` for `--backend ray`.
    pub ray_address: Option<String>,
    pub ray_token: Option<String>,
    /// `--ray-max-return`, bytes.
    pub ray_max_return: u64,
    /// `-k/--filter` patterns.
    pub filters: Vec<String>,
    /// `--exclude` patterns.
    pub excludes: Vec<String>,
    /// `--max-fail N`; `--fail-fast` is 1.
    pub max_fail: Option<usize>,
    pub dry_run: bool,
    pub no_capture: bool,
    /// The profile's `[[overrides]]` tables, as read.
    pub overrides: Vec<profile::OverrideEntry>,
    /// Where each option's value came from.
    pub settings: std::collections::BTreeMap<String, Setting>,
    /// The profile in use, when a config file was read.
    pub profile: Option<String>,
    /// `--gpu-share N|auto`, unparsed.
    pub gpu_share: Option<String>,
    pub xla_preset: Option<XlaPreset>,
}

impl RunConfig {
    /// Validates the options; creates the results folder (a dry run creates nothing).
    pub fn from_options(opts: RunOptions) -> Result<Self, ConfigError> {
        let output_dir = validate_output_dir(&opts.output_dir)?;
        let tree = PipelineTree::of(&output_dir);
        let (results_dir, created_dirs) = match opts.dry_run {
            true => (
                opts.results_dir
                    .as_deref()
                    .map_or_else(|| tree.default_results_dir(), absolute),
                Vec::new(),
            ),
            false => results_dir(opts.results_dir.as_deref(), &tree)?,
        };
        let max_fail = match opts.max_fail {
            None => None,
            Some(n) => Some(
                NonZeroUsize::new(n)
                    .ok_or_else(|| invalid("--max-fail", n, "must be at least 1"))?,
            ),
        };
        let overrides = opts
            .overrides
            .iter()
            .map(Override::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let jobs = match opts.jobs {
            None => None,
            Some(n) => Some(
                NonZeroUsize::new(n).ok_or_else(|| invalid("--jobs", n, "must be at least 1"))?,
            ),
        };
        validate_limits(&opts)?;
        let compilation_cache = match opts.compilation_cache.as_deref() {
            Some("off") | Some("none") => CompilationCache::Off,
            Some(dir) => CompilationCache::Dir(absolute(Path::new(dir))),
            None => CompilationCache::Dir(CompilationCache::default_dir()),
        };
        Ok(RunConfig {
            gpu_share: gpu_share(opts.gpu_share.as_deref())?,
            xla_preset: opts.xla_preset,
            run_id: crate::paths::run_id(std::time::SystemTime::now()),
            argv: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            retry: RetryPolicy {
                retries: opts.retries,
                retry_on: retry_on(opts.retry_on.as_deref())?,
                base_delay: opts.retry_delay,
                ..RetryPolicy::default()
            },
            extra_env: extra_env(&opts.env)?,
            ray: ray_options(&opts)?,
            sandbox: opts.sandbox,
            memory_limit: opts.memory_limit,
            max_procs: opts.max_procs,
            pass_env: opts.env_pass,
            warm_start: opts.warm_start,
            reuse: opts.reuse,
            jax_trace: opts.jax_trace,
            selection: Selection::parse(&opts.filters, &opts.excludes)?,
            max_fail,
            dry_run: opts.dry_run,
            no_capture: opts.no_capture,
            overrides,
            settings: opts.settings,
            profile: opts.profile,
            gnn_layout: opts.gnn_layout.unwrap_or(tree.is_gnn),
            step12_dir: tree.step12_dir(),
            fallback_to_cpu: opts.fallback_to_cpu,
            max_log_bytes: opts.max_log_bytes,
            preflight: opts.preflight,
            output_dir,
            results_dir,
            created_dirs,
            device: opts.device,
            recursive: opts.recursive,
            jobs,
            timeout: opts.timeout,
            grace: opts.grace,
            python: opts.python.map(|p| absolute(&p)),
            compilation_cache,
        })
    }
}

/// Options as a test starts from: CPU, no cache, no sandbox, one retry.
#[cfg(test)]
pub(crate) fn test_options(dir: &Path) -> RunOptions {
    RunOptions {
        output_dir: dir.to_path_buf(),
        results_dir: None,
        device: Device::Cpu,
        recursive: true,
        jobs: None,
        timeout: Duration::from_secs(60),
        grace: Duration::from_secs(1),
        python: None,
        compilation_cache: Some("off".into()),
        retries: 1,
        retry_on: None,
        retry_delay: Duration::from_secs(1),
        fallback_to_cpu: true,
        max_log_bytes: None,
        preflight: false,
        sandbox: SandboxMode::Off,
        memory_limit: None,
        max_procs: None,
        env: vec![],
        env_pass: vec![],
        gnn_layout: None,
        warm_start: WarmStart::Off,
        reuse: Reuse::None,
        jax_trace: false,
        ray_address: None,
        ray_token: None,
        ray_max_return: 50 << 20,
        filters: vec![],
        excludes: vec![],
        max_fail: None,
        dry_run: false,
        no_capture: false,
        overrides: vec![],
        settings: Default::default(),
        profile: None,
        gpu_share: None,
        xla_preset: None,
    }
}

#[cfg(test)]
mod tests;
