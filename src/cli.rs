//! The command line, and its translation into the library's validated options. clap
//! stops here: the core only ever sees `RunConfig`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use jax_runner::config::{RunOptions, WarmStart};
use jax_runner::model::{Device, Reuse, SandboxMode};

pub const EXIT_CODES: &str = "\
Exit codes:
  0    every script succeeded
  1    at least one script failed, timed out, or is listed but missing or refused
  2    usage or environment error (bad option, missing or unreadable folder, no
       usable Python, results not writable or their file system full)
  3    no scripts found
  130  interrupted (Ctrl-C, SIGTERM or SIGHUP)";

/// Discover, run and report generated JAX/POMDP scripts (step 12 of a GNN-style pipeline).
#[derive(Debug, Parser)]
#[command(
    name = "jax-runner",
    version,
    after_help = EXIT_CODES,
    args_conflicts_with_subcommands = true,
    // The last of a repeated option wins, so wrappers can append overrides.
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Running is the default: `jax-runner --output-dir output` runs.
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub verbosity: Verbosity,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Discover and run every script, then write the reports (the default).
    #[command(after_help = EXIT_CODES)]
    Run(Box<RunArgs>),
    /// Discover scripts and list them without running anything.
    List(ListArgs),
    /// Create the managed Python environment and print which interpreter runs will use.
    Setup(SetupArgs),
    /// Print the JSON Schema of a document jax-runner writes.
    Schema {
        /// results, metrics, events, doctor, gnn_execution_summary or gnn_script_result.
        #[arg(value_parser = jax_runner::schema::NAMES)]
        name: String,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
    /// Render N POMDP scripts from templates/ (the benchmark workload).
    #[command(hide = true)]
    RenderWorkload {
        /// How many scripts.
        #[arg(long, default_value_t = 8)]
        count: usize,
        /// Where to write them.
        #[arg(long)]
        out: PathBuf,
        /// The templates folder.
        #[arg(long, default_value = "templates")]
        templates: PathBuf,
    },
    /// Say exactly why JAX will or will not use each device, and how to fix it.
    #[command(
        after_help = "Exit codes:\n  0  the requested device works\n  1  it does not\n  2  no Python interpreter to inspect"
    )]
    Doctor(DoctorArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The device that must work for exit code 0 (auto: any).
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// Python interpreter to inspect (else the one a run would use).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Print one JSON document instead of the report.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Local,
    Ray,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WarmArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    Auto,
    Gnn,
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FallbackArg {
    Cpu,
    None,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SandboxArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    Auto,
    Cpu,
    /// An NVIDIA or AMD GPU (`cuda` and `rocm` are accepted for it, as jax names them).
    #[value(alias = "cuda", alias = "rocm")]
    Gpu,
    Tpu,
}

impl From<DeviceArg> for Device {
    fn from(d: DeviceArg) -> Device {
        match d {
            DeviceArg::Auto => Device::Auto,
            DeviceArg::Cpu => Device::Cpu,
            DeviceArg::Gpu => Device::Gpu,
            DeviceArg::Tpu => Device::Tpu,
        }
    }
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Discovery")]
pub struct DiscoverArgs {
    /// The pipeline output folder to search.
    #[arg(long, value_name = "DIR", default_value = "output")]
    pub output_dir: PathBuf,
    /// Search sub-folders (the default).
    #[arg(long, overrides_with = "no_recursive")]
    pub recursive: bool,
    /// Only look at files directly inside --output-dir.
    #[arg(long, overrides_with = "recursive")]
    pub no_recursive: bool,
    /// Where results go [default: DIR/execution_results/jax]; never searched.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub discover: DiscoverArgs,
    /// Device to run on: auto takes the GPU when the pre-flight ran jax on it.
    #[arg(help_heading = "Device", long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// Scripts run at once [default: CPU cores for CPU runs, one per GPU for GPU runs].
    #[arg(help_heading = "Execution", long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// Time limit of one script, e.g. 90s, 5m, 1h.
    #[arg(help_heading = "Execution", long, value_name = "DURATION", default_value = "30m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping a script.
    #[arg(help_heading = "Execution", long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub grace: Duration,
    /// Python interpreter to use (else JAX_RUNNER_PYTHON, VIRTUAL_ENV, python3, managed env).
    #[arg(help_heading = "Execution", long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Persistent XLA compilation cache folder, or `off` [default: in the user cache].
    #[arg(help_heading = "Execution", long, value_name = "DIR|off")]
    pub compilation_cache: Option<String>,
    /// Retries after a failed attempt, for the classes in --retry-on.
    #[arg(help_heading = "Failures", long, value_name = "N", default_value_t = 1)]
    pub retries: u32,
    /// Failure classes to retry, comma-separated [default: killed_by_signal]. Classes:
    /// script_error, timed_out, out_of_memory, gpu_environment, broken_install,
    /// killed_by_signal.
    #[arg(
        help_heading = "Failures",
        long,
        value_name = "CLASSES",
        value_delimiter = ','
    )]
    pub retry_on: Option<Vec<String>>,
    /// Delay before the first retry; doubles each retry, with jitter.
    #[arg(help_heading = "Failures", long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_delay: Duration,
    /// Where a GPU script goes when the GPU environment fails: cpu, or none to fail.
    #[arg(
        help_heading = "Failures",
        long,
        value_enum,
        value_name = "cpu|none",
        default_value = "cpu"
    )]
    pub fallback: FallbackArg,
    /// Cap on each log file (e.g. 50M, 1G), keeping its head and its end [default: no cap].
    #[arg(help_heading = "Reports", long, value_name = "SIZE", value_parser = parse_size)]
    pub max_log_size: Option<u64>,
    /// Run each script in a bubblewrap sandbox: on, off, or auto (on when bwrap works).
    #[arg(
        help_heading = "Sandbox and limits",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub sandbox: SandboxArg,
    /// Kill a script whose process tree's resident memory passes SIZE (e.g. 4G).
    #[arg(help_heading = "Sandbox and limits", long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// At most N processes per script (a fork bomb stays contained).
    #[arg(help_heading = "Sandbox and limits", long, value_name = "N")]
    pub max_procs: Option<u32>,
    /// Set KEY=VALUE in every script's environment (repeatable).
    #[arg(
        help_heading = "Sandbox and limits",
        long = "env",
        value_name = "KEY=VALUE"
    )]
    pub env: Vec<String>,
    /// Pass the parent's variable NAME into sandboxed scripts too (repeatable).
    #[arg(
        help_heading = "Sandbox and limits",
        long = "env-pass",
        value_name = "NAME"
    )]
    pub env_pass: Vec<String>,
    /// Fork scripts from a Python that has jax imported already (skips ~0.7 s of start
    /// per script), inside the sandbox too. auto: wherever it can be done; on: also
    /// warn when the sandbox rules it out.
    #[arg(help_heading = "Speed", long, value_enum, default_value = "auto")]
    pub warm_start: WarmArg,
    /// Where scripts run: here, or as jobs on a Ray cluster (--ray-address).
    #[arg(long, value_enum, default_value = "local", help_heading = "Backend")]
    pub backend: BackendArg,
    /// The Ray cluster's dashboard address, e.g. http://head-node:8265.
    #[arg(
        long,
        value_name = "URL",
        env = "RAY_ADDRESS",
        help_heading = "Backend"
    )]
    pub ray_address: Option<String>,
    /// Bearer token for Ray clusters with token authentication.
    #[arg(
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
        long,
        value_name = "SIZE",
        default_value = "50M",
        value_parser = parse_size,
        help_heading = "Backend"
    )]
    pub ray_max_return: u64,
    /// Skip scripts whose previous success in this results folder still matches
    /// (same source, interpreter, jax, device and jax environment).
    #[arg(help_heading = "Speed", long, conflicts_with = "rerun_failed")]
    pub resume: bool,
    /// Run only the scripts that did not succeed last time.
    #[arg(help_heading = "Speed", long)]
    pub rerun_failed: bool,
    /// Record a jax.profiler trace of each script in its data folder (Perfetto,
    /// TensorBoard).
    #[arg(help_heading = "Speed", long)]
    pub profile: bool,
    /// Results layout: auto adds GNN's step-12 layout (12_execute_output/) when the
    /// tree holds 11_render_output; gnn always adds it; plain never does.
    #[arg(help_heading = "Reports", long, value_enum, default_value = "auto")]
    pub layout: LayoutArg,
    /// Write the event stream as NDJSON to FILE, or to standard output with `-`.
    #[arg(help_heading = "Reports", long, value_name = "FILE|-")]
    pub events: Option<PathBuf>,
    /// Live progress bars: auto shows them when stderr is a terminal.
    #[arg(help_heading = "Reports", long, value_enum, default_value = "auto")]
    pub progress: ProgressArg,
    /// Skip the environment pre-flight (the doctor checks a run does once); GPU
    /// problems then show up script by script and fall back there.
    #[arg(help_heading = "Device", long)]
    pub no_preflight: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub discover: DiscoverArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FlavorArg {
    /// CUDA wheels when NVML reports an NVIDIA driver, else CPU.
    Auto,
    Cpu,
    Cuda12,
}

#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// Which wheels the managed environment gets.
    #[arg(long, value_enum, default_value = "auto")]
    pub flavor: FlavorArg,
}

#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Output")]
pub struct Verbosity {
    /// More output (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less output (-q warnings only, -qq errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub quiet: u8,
    /// Colours on the terminal: auto (when stderr is a terminal and NO_COLOR is not
    /// set), always or never.
    #[arg(long, value_enum, default_value = "auto", global = true)]
    pub color: ColorArg,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorArg {
    Auto,
    Always,
    Never,
}

impl Verbosity {
    /// Whether the terminal gets colours: `--color`, then `NO_COLOR` (any non-empty
    /// value turns them off, as no-color.org asks), then whether stderr is a terminal.
    pub fn color(self) -> bool {
        use std::io::IsTerminal;
        match self.color {
            ColorArg::Always => true,
            ColorArg::Never => false,
            ColorArg::Auto => {
                let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
                !no_color && std::io::stderr().is_terminal()
            }
        }
    }

    pub fn level(self) -> tracing::Level {
        match (self.verbose, self.quiet) {
            (0, 0) => tracing::Level::INFO,
            (1, _) => tracing::Level::DEBUG,
            (v, _) if v > 1 => tracing::Level::TRACE,
            (_, 1) => tracing::Level::WARN,
            _ => tracing::Level::ERROR,
        }
    }
}

/// Sizes such as `512K`, `50M`, `1G` (binary units) or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((t, ""), |i| t.split_at(i));
    let mult: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("unknown unit in {s:?} (use K, M, G or T)")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 50M or 1G"))?;
    Ok((value * mult as f64) as u64)
}

/// A duration option's value. The options that take one accept values starting with
/// `-`, so `--timeout -5s` gets this message instead of clap's "unexpected argument".
fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err("must be positive: use a duration such as 90s, 5m or 1h".into());
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (use a duration such as 90s, 5m or 1h)"))
}

impl DiscoverArgs {
    pub fn recursive(&self) -> bool {
        !self.no_recursive
    }
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
            profile: self.profile,
            // Only --backend ray uses the address (RAY_ADDRESS may be set for other tools).
            ray_address: (self.backend == BackendArg::Ray)
                .then(|| self.ray_address.clone().unwrap_or_default()),
            ray_token: self.ray_token.clone(),
            ray_max_return: self.ray_max_return,
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

#[cfg(test)]
mod tests {
    use super::{parse_size, Cli};
    use clap::Parser;

    #[test]
    fn a_negative_duration_is_named_as_such() {
        for option in ["--timeout", "--grace", "--retry-delay"] {
            let err = Cli::try_parse_from(["jax-runner", option, "-5s"]).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{option}"
            );
            let text = err.to_string();
            assert!(
                text.contains("must be positive") && text.contains(option),
                "{text}"
            );
        }
        assert!(Cli::try_parse_from(["jax-runner", "--timeout", "5s"]).is_ok());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("50M"), Ok(50 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5Q").is_err());
    }
}
