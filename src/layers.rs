//! The command line with the lower layers applied: clap parses it, then the library's
//! [`Layers`] fills each option it left out from a `JAX_RUNNER_*` variable of the
//! environment snapshot, else the selected profile of `jax-runner.toml`, keeping each
//! option's source. Only a run and `list` are layered.

use std::ffi::OsString;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};

use jax_runner::config::layers::{check_keys, choose_profile, unknown_variables, Layers};
use jax_runner::config::Layered;
use jax_runner::environment::Environment;
use jax_runner::error::ConfigError;

use crate::cli::{Cli, Command};

/// The command line with every layer applied.
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    /// What the layers found odd but not wrong: `JAX_RUNNER_*` variables that are no
    /// option.
    pub warnings: Vec<String>,
}

/// Why the layers could not be applied.
#[derive(Debug)]
pub enum LayerError {
    /// The command line itself is wrong: clap says so (and exits) as usual.
    Clap(clap::Error),
    /// A config file, profile or variable is wrong.
    Config(ConfigError),
}

impl From<ConfigError> for LayerError {
    fn from(e: ConfigError) -> Self {
        LayerError::Config(e)
    }
}

/// Parses `argv`, with `env` and the config file applied.
pub fn parse(argv: Vec<OsString>, env: &Arc<Environment>) -> Result<Parsed, LayerError> {
    let matches = Cli::command()
        .try_get_matches_from(argv)
        .map_err(LayerError::Clap)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(LayerError::Clap)?;
    let layered = match matches.subcommand() {
        None => &matches,
        Some(("run", m)) | Some(("list", m)) => m,
        Some(_) => {
            return Ok(Parsed {
                cli,
                warnings: Vec::new(),
            })
        }
    };
    let profile = choose_profile(
        cli.profile.config.as_deref(),
        cli.profile.profile.as_deref(),
        env,
    )?;
    let known = known_options();
    if let Some(p) = &profile {
        check_keys(p, &known)?;
    }
    let warnings = unknown_variables(env, &known);
    let mut layers = Layers::new(layered, env, profile.as_ref(), &known);
    cli.verbosity.layer(&mut layers)?;
    let run = match &mut cli.command {
        None => Some(&mut cli.run),
        Some(Command::Run(args)) => Some(args.as_mut()),
        Some(Command::List(args)) => {
            args.discover.layer(&mut layers)?;
            None
        }
        Some(Command::Show(args)) => {
            args.layer(&mut layers)?;
            None
        }
        Some(_) => None,
    };
    if let Some(run) = run {
        run.layer(&mut layers)?;
        let (settings, sources) = layers.finish();
        run.layered = Layered {
            settings,
            sources,
            profile: profile.as_ref().map(|p| p.name.clone()),
            overrides: profile.map(|p| p.overrides).unwrap_or_default(),
            environment: env.clone(),
        };
    }
    Ok(Parsed { cli, warnings })
}

/// Every long option of a run, the global ones included: what a profile key or a
/// `JAX_RUNNER_*` variable may name.
fn known_options() -> Vec<String> {
    let mut top = Cli::command();
    // Building propagates the global options (`--verbose`, `--color`) to `run`.
    top.build();
    let run = top
        .find_subcommand("run")
        .expect("jax-runner has a run command");
    run.get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}
