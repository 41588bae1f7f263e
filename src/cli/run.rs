//! `jax-runner [run]`'s options, and their translation into the library's
//! [`RunOptions`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use jax_runner::config::values::{parse_duration, parse_size};
use jax_runner::config::{RunOptions, WarmStart};
use jax_runner::model::{Reuse, SandboxMode};

use super::{
    BackendArg, DeviceArg, DiscoverArgs, FallbackArg, LayoutArg, ProgressArg, SandboxArg, WarmArg,
    XlaPresetArg,
};

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub discover: DiscoverArgs,
    /// Device to run on.
    ///
    /// auto takes the GPU when the pre-flight ran jax on it.
    #[arg(help_heading = "Device", long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// Scripts run at once [default: one per core, or per GPU].
    ///
    /// The default is the CPU cores for CPU runs, one per GPU for GPU runs.
    #[arg(help_heading = "Execution", long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// Time limit of one script, e.g. 90s, 5m, 1h.
    #[arg(help_heading = "Execution", long, value_name = "DURATION", default_value = "30m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping a script.
    #[arg(hide_short_help = true, help_heading = "Execution", long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub grace: Duration,
    /// Python interpreter to use (else JAX_RUNNER_PYTHON, VIRTUAL_ENV, python3, managed env).
    #[arg(
        hide_short_help = true,
        help_heading = "Execution",
        long,
        value_name = "PATH"
    )]
    pub python: Option<PathBuf>,
    /// Persistent XLA compilation cache folder, or `off` [default: in the user cache].
    #[arg(
        hide_short_help = true,
        help_heading = "Execution",
        long,
        value_name = "DIR|off"
    )]
    pub compilation_cache: Option<String>,
    /// Retries after a failed attempt, for the classes in --retry-on.
    #[arg(
        hide_short_help = true,
        help_heading = "Failures",
        long,
        value_name = "N",
        default_value_t = 1
    )]
    pub retries: u32,
    /// Failure classes to retry, comma-separated [default: killed_by_signal]. Classes:
    /// script_error, timed_out, out_of_memory, gpu_environment, broken_install,
    /// killed_by_signal.
    #[arg(
        hide_short_help = true,
        help_heading = "Failures",
        long,
        value_name = "CLASSES",
        value_delimiter = ','
    )]
    pub retry_on: Option<Vec<String>>,
    /// Delay before the first retry; doubles each retry, with jitter.
    #[arg(hide_short_help = true, help_heading = "Failures", long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_delay: Duration,
    /// Where a GPU script goes when the GPU environment fails: cpu, or none to fail.
    #[arg(
        hide_short_help = true,
        help_heading = "Failures",
        long,
        value_enum,
        value_name = "cpu|none",
        default_value = "cpu"
    )]
    pub fallback: FallbackArg,
    /// Cap on each log file (e.g. 50M, 1G), keeping its head and its end [default: no cap].
    #[arg(hide_short_help = true, help_heading = "Reports", long, value_name = "SIZE", value_parser = parse_size)]
    pub max_log_size: Option<u64>,
    /// How scripts are sandboxed: auto (every layer this machine has), bwrap (insist on
    /// bubblewrap), landlock (the built-in layer alone), on (auto, failing when there is
    /// none), off.
    #[arg(
        hide_short_help = true,
        help_heading = "Sandbox and limits",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub sandbox: SandboxArg,
    /// Kill a script whose process tree's resident memory passes SIZE (e.g. 4G).
    #[arg(hide_short_help = true, help_heading = "Sandbox and limits", long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// At most N processes per script (a fork bomb stays contained).
    #[arg(
        hide_short_help = true,
        help_heading = "Sandbox and limits",
        long,
        value_name = "N"
    )]
    pub max_procs: Option<u32>,
    /// Set KEY=VALUE in every script's environment (repeatable).
    #[arg(
        hide_short_help = true,
        help_heading = "Sandbox and limits",
        long = "env",
        value_name = "KEY=VALUE"
    )]
    pub env: Vec<String>,
    /// Pass the parent's variable NAME into sandboxed scripts too (repeatable).
    #[arg(
        hide_short_help = true,
        help_heading = "Sandbox and limits",
        long = "env-pass",
        value_name = "NAME"
    )]
    pub env_pass: Vec<String>,
    /// Fork scripts from a Python that has jax imported already (skips ~0.7 s of start
    /// per script), inside the sandbox too. auto: wherever it can be done; on: also
    /// warn when the sandbox rules it out.
    #[arg(
        hide_short_help = true,
        help_heading = "Speed",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub warm_start: WarmArg,
    /// Where scripts run: here, or as jobs on a Ray cluster (--ray-address).
    #[arg(
        hide_short_help = true,
        long,
        value_enum,
        default_value = "local",
        help_heading = "Backend"
    )]
    pub backend: BackendArg,
    /// The Ray cluster's dashboard address, e.g. http://head-node:8265.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "URL",
        env = "RAY_ADDRESS",
        help_heading = "Backend"
    )]
    pub ray_address: Option<String>,
    /// Bearer token for Ray clusters with token authentication.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "TOKEN",
        env = "JAX_RUNNER_RAY_TOKEN",
        hide_env_values = true,
        help_heading = "Backend"
    )]
    pub ray_token: Option<String>,
    /// The largest data folder a Ray job sends back (compressed, through its log);
    /// a larger one stays on the cluster and the result says where.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        default_value = "50M",
        value_parser = parse_size,
        help_heading = "Backend"
    )]
    pub ray_max_return: u64,
    /// Skip scripts whose previous success still matches.
    ///
    /// A success in this results folder matches when its source, interpreter, jax, device
    /// and jax environment are the same.
    #[arg(help_heading = "Speed", long, conflicts_with = "rerun_failed")]
    pub resume: bool,
    /// Run only the scripts that did not succeed last time.
    #[arg(help_heading = "Speed", long)]
    pub rerun_failed: bool,
    /// Record a jax.profiler trace of each script in its data folder (Perfetto,
    /// TensorBoard).
    #[arg(hide_short_help = true, help_heading = "Speed", long)]
    pub jax_trace: bool,
    /// Results layout: auto adds GNN's step-12 layout (12_execute_output/) when the
    /// tree holds 11_render_output; gnn always adds it; plain never does.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub layout: LayoutArg,
    /// Write the event stream as NDJSON to FILE, or to standard output with `-`.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_name = "FILE|-"
    )]
    pub events: Option<PathBuf>,
    /// Live progress bars: auto shows them when stderr is a terminal.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub progress: ProgressArg,
    /// Skip the environment pre-flight (the doctor checks a run does once); GPU
    /// problems then show up script by script and fall back there.
    #[arg(hide_short_help = true, help_heading = "Device", long)]
    pub no_preflight: bool,
    /// Start no script after the first failure (running ones finish); the rest are
    /// reported as skipped. The same as --max-fail 1.
    #[arg(
        hide_short_help = true,
        help_heading = "Failures",
        long,
        conflicts_with = "max_fail"
    )]
    pub fail_fast: bool,
    /// Start no script after N failures; the rest are reported as skipped.
    #[arg(
        hide_short_help = true,
        help_heading = "Failures",
        long,
        value_name = "N"
    )]
    pub max_fail: Option<usize>,
    /// Print the plan and exit: nothing is written and no script starts.
    ///
    /// The plan gives the order, device, sandbox, start, timeout and what --resume keeps.
    #[arg(help_heading = "Execution", long)]
    pub dry_run: bool,
    /// Also show each script's output on the terminal as it comes, prefixed with its
    /// id (the logs still get every line).
    #[arg(hide_short_help = true, help_heading = "Reports", long)]
    pub no_capture: bool,
    /// Scripts per GPU (each gets its part of the GPU's memory), or auto: from free
    /// GPU memory and each script's GPU peak in the previous runs [default: 1].
    #[arg(
        hide_short_help = true,
        help_heading = "Device",
        long,
        value_name = "N|auto"
    )]
    pub gpu_share: Option<String>,
    /// XLA settings for GPU attempts, merged into your XLA_FLAGS: perf (Triton GEMMs,
    /// latency-hiding scheduler, PGLE) or deterministic (deterministic GPU ops).
    #[arg(
        hide_short_help = true,
        help_heading = "Device",
        long,
        value_enum,
        value_name = "perf|deterministic"
    )]
    pub xla_preset: Option<XlaPresetArg>,
}

impl RunArgs {
    pub fn options(&self) -> RunOptions {
        RunOptions {
            output_dir: self.discover.output_dir.clone(),
            results_dir: self.discover.results_dir.clone(),
            device: self.device.into(),
            recursive: self.discover.recursive(),
            jobs: self.jobs,
            timeout: self.timeout,
            grace: self.grace,
            python: self.python.clone(),
            compilation_cache: self.compilation_cache.clone(),
            retries: self.retries,
            retry_on: self.retry_on.clone(),
            retry_delay: self.retry_delay,
            fallback_to_cpu: matches!(self.fallback, FallbackArg::Cpu),
            max_log_bytes: self.max_log_size,
            preflight: !self.no_preflight,
            sandbox: match self.sandbox {
                SandboxArg::Auto => SandboxMode::Auto,
                SandboxArg::On => SandboxMode::On,
                SandboxArg::Bwrap => SandboxMode::Bwrap,
                SandboxArg::Landlock => SandboxMode::Landlock,
                SandboxArg::Off => SandboxMode::Off,
            },
            memory_limit: self.memory_limit,
            max_procs: self.max_procs,
            env: self.env.clone(),
            env_pass: self.env_pass.clone(),
            reuse: if self.resume {
                Reuse::Resume
            } else if self.rerun_failed {
                Reuse::RerunFailed
            } else {
                Reuse::None
            },
            jax_trace: self.jax_trace,
            filters: self.discover.filter.clone(),
            excludes: self.discover.exclude.clone(),
            max_fail: if self.fail_fast {
                Some(1)
            } else {
                self.max_fail
            },
            dry_run: self.dry_run,
            no_capture: self.no_capture,
            // Filled in by `layers` from the config file.
            overrides: Vec::new(),
            settings: Default::default(),
            profile: None,
            // Only --backend ray uses the address (RAY_ADDRESS may be set for other tools).
            ray_address: (self.backend == BackendArg::Ray)
                .then(|| self.ray_address.clone().unwrap_or_default()),
            ray_token: self.ray_token.clone(),
            ray_max_return: self.ray_max_return,
            gpu_share: self.gpu_share.clone(),
            xla_preset: self.xla_preset.map(|p| match p {
                XlaPresetArg::Perf => jax_runner::model::XlaPreset::Perf,
                XlaPresetArg::Deterministic => jax_runner::model::XlaPreset::Deterministic,
            }),
            warm_start: match self.warm_start {
                WarmArg::Auto => WarmStart::Auto,
                WarmArg::On => WarmStart::On,
                WarmArg::Off => WarmStart::Off,
            },
            gnn_layout: match self.layout {
                LayoutArg::Auto => None,
                LayoutArg::Gnn => Some(true),
                LayoutArg::Plain => Some(false),
            },
        }
    }
}
