//! Where a run's options come from, in order of precedence: the command line, a
//! `JAX_RUNNER_<OPTION>` variable, the selected profile of `jax-runner.toml`, then the
//! built-in default.
//!
//! clap parses the command line into [`super::RunOptions`]; [`Layers`] then fills each
//! option the command line left out from the environment snapshot, else the profile,
//! parsing the text with the same parser clap uses for that option's type, and keeps
//! each option's value and source for the results. A bad value is blamed on its
//! variable, or on its file and line, never on the command line.

use std::collections::BTreeMap;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::profile::{Entry, Origin, Profile, Value};
use super::values::boolish;
use crate::environment::Environment;
use crate::error::ConfigError;
use crate::model::Setting;

mod checks;
mod fields;

pub use checks::{check_keys, choose_profile, suggest, unknown_variables, NOT_LAYERED};

/// Where one option's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    CommandLine,
    /// A variable of the parent environment, and its text.
    Variable {
        name: String,
        value: String,
    },
    /// A profile of `jax-runner.toml`.
    Profile(Origin),
    Default,
    /// The default, because a profile's value gave way to a conflicting option a
    /// higher layer set (`fail-fast = true` in the profile, `--max-fail 3` given).
    Yielded,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::CommandLine => f.write_str("command line"),
            Source::Variable { name, .. } => write!(f, "environment ({name})"),
            Source::Profile(origin) => origin.fmt(f),
            Source::Default => f.write_str("default"),
            Source::Yielded => f.write_str("default (a higher layer set a conflicting option)"),
        }
    }
}

impl Source {
    /// The error for a value this source gave that `option` cannot take; `None` for
    /// the command line and defaults, whose errors already name the option.
    pub fn blame(&self, option: &str, value: &str, reason: &str) -> Option<ConfigError> {
        match self {
            Source::Variable { name, value: text } => Some(ConfigError::Variable {
                name: name.clone(),
                value: text.clone(),
                reason: format!("{reason} (for {option})"),
            }),
            Source::Profile(origin) => Some(ConfigError::ConfigKey {
                path: origin.file.clone(),
                line: origin.line,
                key: option.trim_start_matches("--").to_string(),
                reason: format!("has the invalid value {value:?}: {reason}"),
            }),
            _ => None,
        }
    }

    /// The command line or a variable: a layer above the profile.
    fn is_upper(&self) -> bool {
        matches!(self, Source::CommandLine | Source::Variable { .. })
    }
}

/// `JAX_RUNNER_MEMORY_LIMIT` for `memory-limit`.
pub fn env_name(long: &str) -> String {
    format!("JAX_RUNNER_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// Variables read for an option before its `JAX_RUNNER_` one, as tools around Ray set
/// them.
const OTHER_NAMES: [(&str, &str); 1] = [("ray-address", "RAY_ADDRESS")];

/// A value of a lower layer, as text.
enum Found<'p> {
    /// A variable's name and value, and whether it names the option's positive form
    /// (`JAX_RUNNER_PREFLIGHT` for `no-preflight`).
    Variable(String, String, bool),
    /// A profile entry, and whether it is the positive form (`preflight = false`).
    Entry(&'p Entry, bool),
}

/// Fills options from the layers below the command line, recording each one's source.
pub struct Layers<'a> {
    matches: &'a ArgMatches,
    env: &'a Environment,
    profile: Option<&'a Profile>,
    /// Every option's long name: a `no-NAME` may be written `NAME = false` only when
    /// `NAME` is not an option itself.
    known: &'a [String],
    settings: BTreeMap<String, Setting>,
    sources: BTreeMap<String, Source>,
}

impl<'a> Layers<'a> {
    pub fn new(
        matches: &'a ArgMatches,
        env: &'a Environment,
        profile: Option<&'a Profile>,
        known: &'a [String],
    ) -> Layers<'a> {
        Layers {
            matches,
            env,
            profile,
            known,
            settings: BTreeMap::new(),
            sources: BTreeMap::new(),
        }
    }

    /// A single-valued option: the command line's, else a variable's, else the
    /// profile's, else clap's default, which the slot holds already.
    pub fn value<T>(
        &mut self,
        slot: &mut T,
        long: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<(), ConfigError> {
        if self.given(long) {
            return self.done(long, Source::CommandLine, self.raw(long));
        }
        match self.lower(long) {
            Some(Found::Variable(name, text, _)) => {
                *slot = parse(&text).map_err(|r| variable_error(&name, &text, &r))?;
                self.done(
                    long,
                    Source::Variable {
                        name,
                        value: text.clone(),
                    },
                    text,
                )
            }
            Some(Found::Entry(e, _)) => {
                let text = match &e.value {
                    Value::Text(t) => t.clone(),
                    Value::Bool(b) => b.to_string(),
                    _ => {
                        return Err(entry_error(
                            e,
                            "takes a single value here, not a list or table",
                        ))
                    }
                };
                *slot = parse(&text).map_err(|r| entry_value_error(e, &text, &r))?;
                self.done(long, Source::Profile(e.origin.clone()), text)
            }
            None => self.done(long, Source::Default, self.raw(long)),
        }
    }

    /// A flag: a variable takes true or false (1/0, yes/no, on/off), a profile a
    /// boolean; `NAME = false` sets `--no-NAME`.
    pub fn flag(&mut self, slot: &mut bool, long: &str) -> Result<(), ConfigError> {
        if self.given(long) {
            return self.done(long, Source::CommandLine, "true".into());
        }
        let (on, source) = match self.lower(long) {
            Some(Found::Variable(name, text, positive)) => {
                let on = boolish(&text).ok_or_else(|| {
                    variable_error(&name, &text, "takes true or false (1/0, yes/no, on/off)")
                })?;
                (on != positive, Source::Variable { name, value: text })
            }
            Some(Found::Entry(e, positive)) => {
                let on = match &e.value {
                    Value::Bool(b) => Some(*b),
                    Value::Text(t) => boolish(t),
                    _ => None,
                };
                let on = on.ok_or_else(|| entry_error(e, "takes true or false"))?;
                (on != positive, Source::Profile(e.origin.clone()))
            }
            None => return self.done(long, Source::Default, self.raw(long)),
        };
        *slot = on;
        self.done(long, source, on.to_string())
    }

    /// A repeatable option: a variable takes a comma-separated list, a profile a
    /// string, an array or (for `KEY=VALUE` options) an inline table.
    pub fn list(&mut self, slot: &mut Vec<String>, long: &str) -> Result<(), ConfigError> {
        if self.given(long) {
            return self.done(long, Source::CommandLine, self.raw(long));
        }
        let (values, source) = match self.lower(long) {
            Some(Found::Variable(name, text, _)) => {
                let values = text.split(',').filter(|v| !v.is_empty()).map(String::from);
                (values.collect(), Source::Variable { name, value: text })
            }
            Some(Found::Entry(e, _)) => {
                let values = match &e.value {
                    Value::Text(t) => vec![t.clone()],
                    Value::Bool(b) => vec![b.to_string()],
                    Value::List(l) => l.clone(),
                    Value::Map(m) => m.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                };
                (values, Source::Profile(e.origin.clone()))
            }
            None => return self.done(long, Source::Default, self.raw(long)),
        };
        let shown = values.join(" ");
        *slot = values;
        self.done(long, source, shown)
    }

    /// An option a later step reads from its variable itself (`JAX_RUNNER_PYTHON`,
    /// below `--python`, which the interpreter's choice reports as such): when the
    /// command line left it out and the variable is set, only its source is recorded.
    pub fn read_later(&mut self, long: &str, name: &str) -> bool {
        match (self.given(long), self.env.var(name)) {
            (false, Some(value)) => {
                let source = Source::Variable {
                    name: name.into(),
                    value: value.clone(),
                };
                self.record(long, source, value);
                true
            }
            _ => false,
        }
    }

    /// Two options that cannot be used together, each with whether it is set: a
    /// profile's gives way to a higher layer's (its name is returned, and it is
    /// recorded at its default); between equal layers it is an error.
    pub fn settle(
        &mut self,
        (a, a_set): (&'static str, bool),
        (b, b_set): (&'static str, bool),
    ) -> Result<Option<&'static str>, ConfigError> {
        if !(a_set && b_set) {
            return Ok(None);
        }
        let (sa, sb) = (self.source(a), self.source(b));
        let yielding = match (sa.is_upper(), sb.is_upper()) {
            (true, false) => b,
            (false, true) => a,
            _ => {
                let reason = format!("cannot be used with {a} ({sa})");
                return Err(sb.blame(b, "", &reason).unwrap_or(ConfigError::Invalid {
                    option: b,
                    value: String::new(),
                    reason,
                }));
            }
        };
        let default = self.raw(yielding);
        self.record(yielding, Source::Yielded, default);
        Ok(Some(yielding))
    }

    /// Records the option's value as `(hidden)`: a secret is never written.
    pub fn hide(&mut self, long: &str) {
        self.show(long, "(hidden)".into());
    }

    /// Records the option's value as `shown` (its canonical name, whatever text gave it).
    pub fn show(&mut self, long: &str, shown: String) {
        if let Some(s) = self.settings.get_mut(long) {
            s.value = shown;
        }
    }

    /// Every option's value and source.
    pub fn finish(self) -> (BTreeMap<String, Setting>, BTreeMap<String, Source>) {
        (self.settings, self.sources)
    }

    fn source(&self, long: &str) -> Source {
        self.sources.get(long).cloned().unwrap_or(Source::Default)
    }

    /// Records the option's value and source: the last step of filling one.
    fn done(&mut self, long: &str, source: Source, value: String) -> Result<(), ConfigError> {
        self.record(long, source, value);
        Ok(())
    }

    fn record(&mut self, long: &str, source: Source, value: String) {
        let setting = Setting {
            value,
            source: source.to_string(),
        };
        self.settings.insert(long.to_string(), setting);
        self.sources.insert(long.to_string(), source);
    }

    /// Whether the command line set the option (clap's id is the long name with `_`).
    fn given(&self, long: &str) -> bool {
        let id = long.replace('-', "_");
        self.matches.value_source(&id) == Some(ValueSource::CommandLine)
    }

    /// The option's text as clap holds it: given, or its default (repeated values
    /// joined by a space).
    fn raw(&self, long: &str) -> String {
        match self.matches.try_get_raw(&long.replace('-', "_")) {
            Ok(Some(values)) => values
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        }
    }

    /// The option's variable, else its profile entry; for `no-NAME` whose `NAME` is no
    /// option, `JAX_RUNNER_NAME` and `NAME = ...` too.
    fn lower(&self, long: &str) -> Option<Found<'a>> {
        let positive = long
            .strip_prefix("no-")
            .filter(|p| !self.known.iter().any(|k| k == p));
        let names = std::iter::once((long, false)).chain(positive.map(|p| (p, true)));
        let others = OTHER_NAMES.iter().filter(|(l, _)| *l == long);
        let variables = others
            .map(|(_, name)| (name.to_string(), false))
            .chain(names.clone().map(|(n, p)| (env_name(n), p)));
        for (name, positive) in variables {
            if let Some(value) = self.env.var(&name) {
                return Some(Found::Variable(name, value, positive));
            }
        }
        let entries = self
            .profile
            .map(|p| p.entries.as_slice())
            .unwrap_or_default();
        names
            .filter_map(|(n, p)| entries.iter().find(|e| e.key == n).map(|e| (e, p)))
            .map(|(e, p)| Found::Entry(e, p))
            .next()
    }
}

fn variable_error(name: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Variable {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn entry_error(e: &Entry, reason: &str) -> ConfigError {
    ConfigError::ConfigKey {
        path: e.origin.file.clone(),
        line: e.origin.line,
        key: e.key.clone(),
        reason: reason.to_string(),
    }
}

fn entry_value_error(e: &Entry, value: &str, reason: &str) -> ConfigError {
    entry_error(e, &format!("has the invalid value {value:?}: {reason}"))
}

#[cfg(test)]
mod tests;
