//! The command line, and its translation into the library's validated options. clap
//! stops here: the core only ever sees `RunConfig`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use jax_runner::config::layers::Layers;
use jax_runner::config::values::{choice, number};
use jax_runner::error::ConfigError;

use jax_runner::config::DiscoverOptions;
use jax_runner::environment::Environment;
use jax_runner::model::Device;

pub const EXIT_CODES: &str = "\
Exit codes:
  0    every script succeeded
  1    at least one script failed, timed out or was skipped (--fail-fast,
       --max-fail), or is listed but missing or refused
  2    usage or environment error (bad option, missing or unreadable folder, no
       usable Python, results not writable or their file system full)
  3    no scripts found
  130  interrupted (Ctrl-C, SIGTERM or SIGHUP)";

/// The exit codes in one line, for `-h`; `--help` gives [`EXIT_CODES`].
pub const EXIT_CODES_SHORT: &str =
    "Exit codes: 0 ok, 1 a script failed, 2 usage or environment error, 3 no scripts, 130 interrupted";

/// Discover, run and report generated JAX/POMDP scripts (step 12 of a GNN-style pipeline).
#[derive(Debug, Parser)]
#[command(
    name = "jax-runner",
    version,
    after_help = EXIT_CODES_SHORT,
    after_long_help = EXIT_CODES,
    args_conflicts_with_subcommands = true,
    // `jax-runner COMMAND --help` does what `help COMMAND` would; without the extra
    // command `-h` keeps to 40 lines.
    disable_help_subcommand = true,
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
    #[command(flatten)]
    pub profile: ProfileArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Discover and run every script, then write the reports (the default).
    #[command(after_help = EXIT_CODES_SHORT, after_long_help = EXIT_CODES)]
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
    /// Print the last run's failures and summary again.
    #[command(visible_alias = "last", after_help = crate::show::EXIT_CODES)]
    Show(crate::show::ShowArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The device that must work for exit code 0 (auto: any).
    #[arg(long, value_enum, ignore_case = true, default_value = "auto")]
    pub device: Device,
    /// Python interpreter to inspect (else the one a run would use).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Print one JSON document instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// `--config` and `--profile`: where the run's options may also come from.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// A jax-runner.toml to read [default: ./jax-runner.toml when it exists; also
    /// JAX_RUNNER_CONFIG].
    #[arg(long, value_name = "FILE", global = true, hide_short_help = true)]
    pub config: Option<PathBuf>,
    /// The config file's [profile.NAME] to use (also JAX_RUNNER_PROFILE).
    ///
    /// It goes on top of [profile.default]. For a jax.profiler trace, see --jax-trace.
    #[arg(long, value_name = "NAME", global = true)]
    pub profile: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub discover: DiscoverOptions,
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
    /// Also install PACKAGE into the managed environment (pip's requirement syntax,
    /// e.g. matplotlib or 'pandas>=2'; repeatable).
    #[arg(long = "with", value_name = "PACKAGE")]
    pub with: Vec<String>,
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
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        default_value = "auto",
        global = true,
        hide_short_help = true
    )]
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
    pub fn color(self, env: &Environment) -> bool {
        use std::io::IsTerminal;
        match self.color {
            ColorArg::Always => true,
            ColorArg::Never => false,
            ColorArg::Auto => {
                env.non_empty("NO_COLOR").is_none() && std::io::stderr().is_terminal()
            }
        }
    }

    /// Fills what the command line left out from the lower layers.
    pub fn layer(&mut self, l: &mut Layers) -> Result<(), ConfigError> {
        l.value(&mut self.verbose, "verbose", number)?;
        l.value(&mut self.quiet, "quiet", number)?;
        l.value(&mut self.color, "color", choice)
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

/// `jax-runner [run]`'s options: the library's, parsed by clap as they are.
pub use jax_runner::config::RunOptions as RunArgs;

#[cfg(test)]
mod tests;
