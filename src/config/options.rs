//! A run's options, as clap parses them from the command line and [`super::layers`]
//! fills them from `JAX_RUNNER_*` variables and the profile: one struct of the final
//! types, validated once into [`super::RunConfig`]. The value enums here and in
//! [`crate::model`] are clap's own (`ValueEnum`), so every source parses a value with
//! the same parser.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

pub use super::choices::{Backend, FailFast, Fallback, Layout, Progress};

use super::layers::Source;
use super::values::{parse_duration, parse_size};
use super::WarmStart;
use crate::environment::Environment;
use crate::model::{Device, SandboxMode, Setting, XlaPreset};

/// `jax-runner [run]`'s options, before validation.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    #[command(flatten)]
    pub discover: DiscoverOptions,
    /// Device to run on.
    ///
    /// auto takes the GPU when the pre-flight ran jax on it.
    #[arg(
        help_heading = "Device",
        long,
        value_enum,
        ignore_case = true,
        default_value = "auto"
    )]
    pub device: Device,
    /// Scripts run at once [default: one per core, or per GPU].
    ///
    /// The default is the CPU cores for CPU runs, one per GPU for GPU runs. A CPU run
    /// with the default opens a spare slot per four cores once its scripts prove very
    /// short (a median of 25 ms or less).
    #[arg(help_heading = "Execution", long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// Time limit of one script, e.g. 90s, 5m, 1h.
    ///
    /// A bare number is seconds: 90 is 90s.
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
        ignore_case = true,
        value_name = "cpu|none",
        default_value = "cpu"
    )]
    pub fallback: Fallback,
    /// Cap on each log file (e.g. 50M, 1G), keeping its head and its end [default: no cap].
    #[arg(hide_short_help = true, help_heading = "Reports", long, value_name = "SIZE", value_parser = parse_size)]
    pub max_log_size: Option<u64>,
    /// Earlier runs whose replaced records history/ keeps, newest first.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_name = "N",
        default_value = "10"
    )]
    pub history_runs: usize,
    /// Room history/ may take for earlier runs (e.g. 100M, 1G): the oldest go first.
    #[arg(hide_short_help = true, help_heading = "Reports", long, value_name = "SIZE", default_value = "100M", value_parser = parse_size)]
    pub history_size: u64,
    /// How scripts are sandboxed: auto (every layer this machine has), bwrap (insist on
    /// bubblewrap), landlock (the built-in layer alone), on (auto, failing when there is
    /// none), off.
    #[arg(
        hide_short_help = true,
        help_heading = "Sandbox and limits",
        long,
        value_enum,
        ignore_case = true,
        default_value = "auto"
    )]
    pub sandbox: SandboxMode,
    /// Kill a script whose process tree's resident memory passes SIZE (e.g. 4G).
    #[arg(hide_short_help = true, help_heading = "Sandbox and limits", long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// At most N processes and threads per script [default: 64 a core, at least 4096].
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
        ignore_case = true,
        default_value = "auto"
    )]
    pub warm_start: WarmStart,
    /// Where scripts run, and the cluster's options.
    #[command(flatten)]
    pub cluster: super::cluster::ClusterOptions,
    /// Skip scripts whose previous success still matches.
    ///
    /// A success in this results folder matches when its source, interpreter, jax, device
    /// and jax environment are the same.
    #[arg(help_heading = "Speed", long, conflicts_with = "rerun_failed")]
    pub resume: bool,
    /// Run only the scripts that did not succeed last time.
    #[arg(
        help_heading = "Speed",
        long,
        visible_alias = "lf",
        alias = "last-failed"
    )]
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
        ignore_case = true,
        default_value = "auto"
    )]
    pub layout: Layout,
    /// Write the event stream as NDJSON to FILE, or to standard output with `-`.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_name = "FILE|-"
    )]
    pub events: Option<PathBuf>,
    /// `--export-json`, `--export-markdown`, `--export-junit`, `--export-csv`.
    #[command(flatten)]
    pub exports: super::exports::ExportOptions,
    /// Live progress bars: auto shows them when stderr is a terminal.
    #[arg(
        hide_short_help = true,
        help_heading = "Reports",
        long,
        value_enum,
        ignore_case = true,
        default_value = "auto"
    )]
    pub progress: Progress,
    /// Report a script as SLOW when it runs past this, and again at each multiple.
    #[arg(hide_short_help = true, help_heading = "Reports", long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub slow_timeout: Duration,
    /// Skip the environment pre-flight (the doctor checks a run does once); GPU
    /// problems then show up script by script and fall back there.
    #[arg(hide_short_help = true, help_heading = "Device", long)]
    pub no_preflight: bool,
    /// No new script after a failure (=now: stop running ones too).
    ///
    /// WHEN is off (the default), wait (the bare switch) or now. The same as
    /// --max-fail 1; the rest are not started. `-x` (wait) lets running scripts
    /// finish; `=now` stops them as Ctrl-C does (they end interrupted, logs kept).
    #[arg(
        help_heading = "Execution",
        long,
        short = 'x',
        value_enum,
        ignore_case = true,
        value_name = "WHEN",
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "wait",
        conflicts_with = "max_fail",
        hide_default_value = true,
        hide_possible_values = true
    )]
    pub fail_fast: FailFast,
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
    /// Also show each script's output live, prefixed with its id.
    ///
    /// The logs still get every line.
    #[arg(help_heading = "Output", long)]
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
        ignore_case = true,
        value_name = "perf|deterministic"
    )]
    pub xla_preset: Option<XlaPreset>,
    /// Where each value came from, the profile's overrides and the parent's
    /// environment: filled by [`super::layers`], never by clap.
    #[arg(skip)]
    pub layered: Layered,
}

/// What the layers add to the options: set together with them, in one step.
#[derive(Debug, Clone, Default)]
pub struct Layered {
    /// Each option's effective value and source, by long name (see [`Setting`]).
    pub settings: std::collections::BTreeMap<String, Setting>,
    /// Each option's source, for blaming a bad value on its variable or line.
    pub sources: std::collections::BTreeMap<String, Source>,
    /// The profile in use, when a config file was read.
    pub profile: Option<String>,
    /// The profile's `[[overrides]]` tables, as read.
    pub overrides: Vec<super::profile::OverrideEntry>,
    /// The parent's environment, read once by `main`.
    pub environment: std::sync::Arc<Environment>,
}

impl RunOptions {
    /// The options of `jax-runner run ARGS` as clap alone makes them (tests, and the
    /// defaults): no layer applied.
    pub fn from_args<'s>(args: impl IntoIterator<Item = &'s str>) -> Result<Self, clap::Error> {
        use clap::FromArgMatches;
        let cmd = <RunOptions as Args>::augment_args(clap::Command::new("run"));
        let argv = std::iter::once("run").chain(args);
        RunOptions::from_arg_matches(&cmd.try_get_matches_from(argv)?)
    }
}

/// Where to look for scripts, and which to take: shared by a run and `list`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Discovery")]
pub struct DiscoverOptions {
    /// The pipeline output folder to search.
    #[arg(long, value_name = "DIR", default_value = "output")]
    pub output_dir: PathBuf,
    /// Search sub-folders (the default).
    #[arg(long, overrides_with = "no_recursive", hide_short_help = true)]
    pub recursive: bool,
    /// Only look at files directly inside --output-dir.
    #[arg(long, overrides_with = "recursive", hide_short_help = true)]
    pub no_recursive: bool,
    /// Where results go [default: DIR/execution_results/jax]; never searched.
    #[arg(long, value_name = "DIR", hide_short_help = true)]
    pub results_dir: Option<PathBuf>,
    /// Take only scripts whose id or path matches PATTERN (repeatable).
    ///
    /// PATTERN is pytest's -k language: words joined by and, or, not and parentheses
    /// ('pomdp and not large'). A word is a glob when it has *, ? or [, else a
    /// substring; case is ignored; the path is relative to --output-dir, and a script
    /// runs when any -k matches.
    #[arg(long = "filter", short = 'k', value_name = "PATTERN")]
    pub filter: Vec<String>,
    /// Take only these scripts (paths or globs inside --output-dir).
    ///
    /// Each is a -k on a script's whole path; a folder takes the scripts under it.
    #[arg(value_name = "SCRIPT", hide_short_help = true)]
    pub scripts: Vec<String>,
    /// Leave out scripts matching PATTERN, as for --filter (repeatable).
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
}

impl DiscoverOptions {
    pub fn recursive(&self) -> bool {
        !self.no_recursive
    }
}
