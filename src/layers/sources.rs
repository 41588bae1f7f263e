//! The lower layers as command-line arguments: which options the environment and the
//! profile set, as what arguments, and where each option's value came from.

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};

use jax_runner::config::profile::{Entry, Profile, Value};
use jax_runner::error::ConfigError;
use jax_runner::model::Setting;

use super::{Contribution, NOT_LAYERED};

/// Which layer gives an option its value.
enum Layer<'a> {
    CommandLine,
    /// A variable clap reads itself (`RAY_ADDRESS`).
    ClapEnv(String),
    Env(String, String),
    Profile(&'a Entry, bool),
    Default,
}

/// The arguments the environment and the profile add, and every option's source.
pub(super) fn contributions(
    target: &Command,
    matches: &ArgMatches,
    profile: Option<&Profile>,
) -> Result<(Vec<Contribution>, BTreeMap<String, Setting>), ConfigError> {
    let mut out = Vec::new();
    let mut settings = BTreeMap::new();
    let mut upper_given: Vec<String> = Vec::new();
    let mut from_profile: Vec<Contribution> = Vec::new();
    for arg in target.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_LAYERED.contains(&long) {
            continue;
        }
        let layer = layer_of(target, arg, long, matches, profile);
        let source = match &layer {
            Layer::CommandLine => "command line".to_string(),
            Layer::ClapEnv(name) | Layer::Env(name, _) => format!("environment ({name})"),
            Layer::Profile(e, _) => e.origin.to_string(),
            Layer::Default => "default".to_string(),
        };
        settings.insert(
            long.to_string(),
            Setting {
                value: String::new(),
                source,
            },
        );
        match layer {
            Layer::CommandLine | Layer::ClapEnv(_) => upper_given.push(arg.get_id().to_string()),
            Layer::Env(name, value) => {
                upper_given.push(arg.get_id().to_string());
                out.push(Contribution {
                    long: long.to_string(),
                    args: env_args(target, arg, long, &name, &value)?,
                    source: name,
                    at: None,
                });
            }
            Layer::Profile(e, inverted) => from_profile.push(Contribution {
                long: long.to_string(),
                args: profile_args(target, arg, long, e, inverted)?,
                source: e.origin.to_string(),
                at: Some((e.origin.file.clone(), e.origin.line)),
            }),
            Layer::Default => {}
        }
    }
    // A profile value yields to a higher layer's option it conflicts with
    // (`max-fail = 3` in the profile, `--fail-fast` on the command line).
    for c in from_profile {
        let arg = target
            .get_arguments()
            .find(|a| a.get_long() == Some(c.long.as_str()))
            .expect("contributions name arguments of the command");
        let beaten = target
            .get_arg_conflicts_with(arg)
            .iter()
            .any(|other| upper_given.iter().any(|g| g == other.get_id().as_str()));
        match beaten {
            true => {
                if let Some(s) = settings.get_mut(&c.long) {
                    s.source = "default (a higher layer set a conflicting option)".into();
                }
            }
            false => out.push(c),
        }
    }
    Ok((out, settings))
}

fn layer_of<'a>(
    target: &Command,
    arg: &Arg,
    long: &str,
    matches: &ArgMatches,
    profile: Option<&'a Profile>,
) -> Layer<'a> {
    match matches.value_source(arg.get_id().as_str()) {
        Some(ValueSource::CommandLine) => return Layer::CommandLine,
        Some(ValueSource::EnvVariable) => {
            let name = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            return Layer::ClapEnv(name.unwrap_or_default());
        }
        _ => {}
    }
    // The interpreter resolver reads JAX_RUNNER_PYTHON itself, below --python and
    // above VIRTUAL_ENV, and says so in `interpreter_source`.
    if long == "python" && std::env::var_os("JAX_RUNNER_PYTHON").is_some() {
        return Layer::ClapEnv("JAX_RUNNER_PYTHON".into());
    }
    // `--no-NAME` without a `--NAME` may also be written `NAME = false`.
    let positive = long
        .strip_prefix("no-")
        .filter(|p| !target.get_arguments().any(|a| a.get_long() == Some(*p)));
    let names = std::iter::once((long, false)).chain(positive.map(|p| (p, true)));
    for (name, inverted) in names.clone() {
        let var = env_name(name);
        if let Some(value) = std::env::var_os(&var) {
            let value = value.to_string_lossy().into_owned();
            let value = match inverted {
                false => value,
                true => match boolish(&value) {
                    Some(b) => (!b).to_string(),
                    None => value,
                },
            };
            return Layer::Env(var, value);
        }
    }
    let entries = profile.map(|p| p.entries.as_slice()).unwrap_or_default();
    for (name, inverted) in names {
        if let Some(e) = entries.iter().find(|e| e.key == name) {
            return Layer::Profile(e, inverted);
        }
    }
    Layer::Default
}

/// `JAX_RUNNER_MEMORY_LIMIT` for `memory-limit`.
pub(super) fn env_name(long: &str) -> String {
    format!("JAX_RUNNER_{}", long.to_ascii_uppercase().replace('-', "_"))
}

fn boolish(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// A variable's value as arguments: flags take a boolean; repeatable options a
/// comma-separated list.
fn env_args(
    target: &Command,
    arg: &Arg,
    long: &str,
    name: &str,
    value: &str,
) -> Result<Vec<OsString>, ConfigError> {
    if !arg.get_action().takes_values() {
        let on = boolish(value).ok_or_else(|| ConfigError::Variable {
            name: name.to_string(),
            value: value.to_string(),
            reason: "takes true or false (1/0, yes/no, on/off)".into(),
        })?;
        return Ok(flag(target, long, on));
    }
    let values: Vec<&str> = match arg.get_action() {
        clap::ArgAction::Append => value.split(',').filter(|v| !v.is_empty()).collect(),
        _ => vec![value],
    };
    Ok(values
        .into_iter()
        .map(|v| format!("--{long}={v}").into())
        .collect())
}

/// A profile value as arguments.
fn profile_args(
    target: &Command,
    arg: &Arg,
    long: &str,
    e: &Entry,
    inverted: bool,
) -> Result<Vec<OsString>, ConfigError> {
    let bad = |reason: &str| super::key_error(e, reason);
    if !arg.get_action().takes_values() {
        let on = match &e.value {
            Value::Bool(b) => *b,
            Value::Text(t) => boolish(t).ok_or_else(|| bad("takes true or false"))?,
            _ => return Err(bad("takes true or false")),
        };
        return Ok(flag(target, long, on != inverted));
    }
    let repeatable = matches!(arg.get_action(), clap::ArgAction::Append);
    let values: Vec<String> = match &e.value {
        Value::Text(t) => vec![t.clone()],
        Value::Bool(b) => vec![b.to_string()],
        Value::List(l) if repeatable => l.clone(),
        Value::Map(m) if repeatable => m.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        _ => return Err(bad("takes a single value here, not a list or table")),
    };
    Ok(values
        .into_iter()
        .map(|v| format!("--{long}={v}").into())
        .collect())
}

/// `--NAME`, or for off `--no-NAME` where there is one (else nothing: off is the
/// default of a flag).
fn flag(target: &Command, long: &str, on: bool) -> Vec<OsString> {
    let negative = format!("no-{long}");
    match on {
        true => vec![format!("--{long}").into()],
        false
            if target
                .get_arguments()
                .any(|a| a.get_long() == Some(negative.as_str())) =>
        {
            vec![format!("--{negative}").into()]
        }
        false => Vec::new(),
    }
}

/// Checks one layer's arguments on their own, so a bad value is blamed on its file
/// and line, or its variable, rather than on the command line.
pub(super) fn check_alone(sub: Option<&str>, c: &Contribution) -> Result<(), ConfigError> {
    let mut argv: Vec<OsString> = vec!["jax-runner".into()];
    argv.extend(sub.map(OsString::from));
    argv.extend(c.args.iter().cloned());
    let Err(e) = <crate::cli::Cli as clap::CommandFactory>::command().try_get_matches_from(argv)
    else {
        return Ok(());
    };
    let text = e.to_string();
    let reason = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_string();
    Err(match &c.at {
        Some((path, line)) => ConfigError::ConfigKey {
            path: path.clone(),
            line: *line,
            key: c.long.clone(),
            reason,
        },
        None => ConfigError::Variable {
            value: std::env::var_os(&c.source)
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default(),
            name: c.source.clone(),
            reason,
        },
    })
}

/// An option's effective value after all layers, as it would be typed (`30m`, `true`;
/// repeated values joined by a space). Secrets are not recorded.
pub(super) fn effective(target: &Command, matches: &ArgMatches, long: &str) -> String {
    if long.contains("token") {
        return "(hidden)".into();
    }
    let Some(arg) = target.get_arguments().find(|a| a.get_long() == Some(long)) else {
        return String::new();
    };
    match matches.get_raw(arg.get_id().as_str()) {
        Some(values) => values
            .map(|v| v.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}
