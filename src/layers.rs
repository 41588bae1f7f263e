//! Where a run's options come from, in order of precedence: the command line, a
//! `JAX_RUNNER_<OPTION>` variable, the selected profile of `jax-runner.toml`, then the
//! built-in default. The lower layers are turned into command-line arguments for the
//! options the command line left out, so clap validates every value the same way, and
//! each option's source is kept for the results.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, CommandFactory, FromArgMatches};

use jax_runner::config::profile::{self, ConfigFile, Entry, OverrideEntry, Profile};
use jax_runner::error::ConfigError;
use jax_runner::model::Setting;

use crate::cli::Cli;

/// Options that choose the layers themselves, or only print: never set by a layer.
const NOT_LAYERED: [&str; 4] = ["help", "version", "config", "profile"];

/// The command line with every layer applied.
#[derive(Debug)]
pub struct Layered {
    pub cli: Cli,
    /// Each option of the run's command: effective value and source, by long name.
    pub settings: BTreeMap<String, Setting>,
    /// The profile used, when a config file was read.
    pub profile: Option<String>,
    /// The profile's per-script overrides.
    pub overrides: Vec<OverrideEntry>,
}

/// Why the layers could not be applied.
#[derive(Debug)]
pub enum LayerError {
    /// The command line itself is wrong: clap says so (and exits) as usual.
    Clap(clap::Error),
    /// A config file, profile or variable is wrong.
    Config(ConfigError),
}

/// One layer's arguments for one option, and where they came from.
struct Contribution {
    long: String,
    args: Vec<OsString>,
    source: String,
    /// For errors: the file and line, when from a profile.
    at: Option<(PathBuf, usize)>,
}

/// Parses `argv` with the environment and the config file applied.
pub fn parse(argv: Vec<OsString>) -> Result<Layered, LayerError> {
    let first = Cli::command()
        .try_get_matches_from(&argv)
        .map_err(LayerError::Clap)?;
    let layered_command = match first.subcommand() {
        None => Some((None, &first)),
        Some(("run", m)) | Some(("list", m)) => Some((first.subcommand_name(), m)),
        Some(_) => None,
    };
    let Some((sub, matches)) = layered_command else {
        let cli = Cli::from_arg_matches(&first).map_err(LayerError::Clap)?;
        return Ok(Layered {
            cli,
            settings: BTreeMap::new(),
            profile: None,
            overrides: Vec::new(),
        });
    };
    let file = config_file(matches).map_err(LayerError::Config)?;
    let chosen = profile_name(matches, file.as_ref()).map_err(LayerError::Config)?;
    let profile = match (&file, &chosen) {
        (Some(f), name) => Some(f.profile(name.as_deref().unwrap_or(profile::DEFAULT_PROFILE)))
            .transpose()
            .map_err(LayerError::Config)?,
        (None, _) => None,
    };
    let target = command_for(sub);
    if let Some(p) = &profile {
        check_keys(p).map_err(LayerError::Config)?;
    }
    let (contributions, mut settings) =
        contributions(&target, matches, profile.as_ref()).map_err(LayerError::Config)?;
    for c in &contributions {
        check_alone(sub, c).map_err(LayerError::Config)?;
    }
    let mut full = argv;
    full.extend(contributions.into_iter().flat_map(|c| c.args));
    let last = Cli::command()
        .try_get_matches_from(&full)
        .map_err(LayerError::Clap)?;
    let last_sub = match sub {
        Some(name) => last.subcommand_matches(name).unwrap_or(&last),
        None => &last,
    };
    for (long, setting) in settings.iter_mut() {
        setting.value = effective(&target, last_sub, long);
    }
    let cli = Cli::from_arg_matches(&last).map_err(LayerError::Clap)?;
    Ok(Layered {
        cli,
        settings,
        profile: profile.as_ref().map(|p| p.name.clone()),
        overrides: profile.map(|p| p.overrides).unwrap_or_default(),
    })
}

/// `--config FILE`, else `JAX_RUNNER_CONFIG`, else `./jax-runner.toml` when present.
fn config_file(matches: &ArgMatches) -> Result<Option<ConfigFile>, ConfigError> {
    let named = matches
        .get_one::<PathBuf>("config")
        .cloned()
        .or_else(|| std::env::var_os("JAX_RUNNER_CONFIG").map(PathBuf::from));
    match named {
        Some(path) => ConfigFile::load(&path).map(Some),
        None => {
            let here = Path::new(profile::FILE_NAME);
            match here.is_file() {
                true => ConfigFile::load(here).map(Some),
                false => Ok(None),
            }
        }
    }
}

/// `--profile NAME`, else `JAX_RUNNER_PROFILE`; a name without a file is an error.
fn profile_name(
    matches: &ArgMatches,
    file: Option<&ConfigFile>,
) -> Result<Option<String>, ConfigError> {
    let name = matches.get_one::<String>("profile").cloned().or_else(|| {
        std::env::var("JAX_RUNNER_PROFILE")
            .ok()
            .filter(|v| !v.is_empty())
    });
    match (name, file) {
        (Some(name), None) if name != profile::DEFAULT_PROFILE => Err(ConfigError::Invalid {
            option: "--profile",
            value: name,
            reason: format!(
                "there is no {} here: write one, or name it with --config FILE",
                profile::FILE_NAME
            ),
        }),
        (name, _) => Ok(name),
    }
}

/// The command whose options are layered: the top level (a bare run), `run` or `list`.
fn command_for(sub: Option<&str>) -> clap::Command {
    let top = Cli::command();
    match sub.and_then(|name| top.find_subcommand(name).cloned()) {
        Some(cmd) => cmd,
        None => top,
    }
}

/// Every profile key must be an option of a run (`list` uses the ones it has), or
/// `NAME = false` for a `--no-NAME` option.
fn check_keys(p: &Profile) -> Result<(), ConfigError> {
    let run = command_for(Some("run"));
    let longs: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    for e in &p.entries {
        let known = longs
            .iter()
            .any(|l| *l == e.key || *l == format!("no-{}", e.key));
        if NOT_LAYERED.contains(&e.key.as_str()) || !known {
            let reason = match NOT_LAYERED.contains(&e.key.as_str()) {
                true => "cannot be set in a profile".to_string(),
                false => format!(
                    "is not an option of jax-runner; profiles take run options by their long name, e.g. timeout = \"10m\" (see {} --help)",
                    env!("CARGO_PKG_NAME")
                ),
            };
            return Err(key_error(e, &reason));
        }
    }
    for o in &p.overrides {
        jax_runner::config::Override::parse(o)?;
    }
    Ok(())
}

fn key_error(e: &Entry, reason: &str) -> ConfigError {
    ConfigError::ConfigKey {
        path: e.origin.file.clone(),
        line: e.origin.line,
        key: e.key.clone(),
        reason: reason.to_string(),
    }
}

mod sources;
use sources::{check_alone, contributions, effective};
