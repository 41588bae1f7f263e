//! Per-script settings: `[[profile.NAME.overrides]]` tables that set `timeout`,
//! `retries`, `device`, `memory-limit` and `env` for the scripts their `filter`
//! matches. For each setting the first matching override that sets it wins (the named
//! profile's overrides before `default`'s), then the run's own value.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::profile::{OverrideEntry, Value};
use super::select::Pattern;
use super::values::{parse_device, parse_duration, parse_size};
use crate::error::ConfigError;
use crate::model::{Device, Platform, Setting};

/// What an override may set.
pub const KEYS: [&str; 5] = ["timeout", "retries", "device", "memory-limit", "env"];

/// One validated override.
#[derive(Debug, Clone)]
pub struct Override {
    pub filter: Pattern,
    pub timeout: Option<Duration>,
    pub retries: Option<u32>,
    pub device: Option<Device>,
    pub memory_limit: Option<u64>,
    pub env: Vec<(String, String)>,
    /// `override "*slow*" in profile ci (jax-runner.toml:14)`.
    pub source: String,
}

impl Override {
    /// Validates one table of the file.
    pub fn parse(entry: &OverrideEntry) -> Result<Override, ConfigError> {
        let mut o = Override {
            filter: Pattern::parse(&entry.filter, "filter")
                .map_err(|e| at(entry, "filter", e.to_string()))?,
            timeout: None,
            retries: None,
            device: None,
            memory_limit: None,
            env: Vec::new(),
            source: format!("override {:?} in {}", entry.filter, entry.origin),
        };
        for e in &entry.entries {
            let bad = |reason: String| ConfigError::ConfigKey {
                path: e.origin.file.clone(),
                line: e.origin.line,
                key: e.key.clone(),
                reason,
            };
            let text = match &e.value {
                Value::Text(t) => Some(t.as_str()),
                _ => None,
            };
            match (e.key.as_str(), text) {
                ("timeout", Some(t)) => o.timeout = Some(parse_duration(t).map_err(bad)?),
                ("retries", Some(t)) => {
                    o.retries = Some(
                        t.parse()
                            .map_err(|_| bad("takes a whole number, e.g. retries = 2".into()))?,
                    )
                }
                ("device", Some(t)) => o.device = Some(parse_device(t).map_err(bad)?),
                ("memory-limit", Some(t)) => o.memory_limit = Some(parse_size(t).map_err(bad)?),
                ("env", _) => o.env = env_pairs(&e.value).map_err(bad)?,
                (key, _) if KEYS.contains(&key) => {
                    return Err(bad("takes a single value, e.g. timeout = \"1h\"".into()))
                }
                _ => {
                    return Err(bad(format!(
                        "cannot be set per script; an override takes filter and {}",
                        KEYS.join(", ")
                    )))
                }
            }
        }
        if o.timeout.is_some_and(|t| t.is_zero()) {
            return Err(at(entry, "timeout", "must be longer than zero".into()));
        }
        Ok(o)
    }
}

fn at(entry: &OverrideEntry, key: &str, reason: String) -> ConfigError {
    ConfigError::ConfigKey {
        path: entry.origin.file.clone(),
        line: entry.origin.line,
        key: key.into(),
        reason,
    }
}

/// `env = { A = "1" }` or `env = ["A=1"]`.
fn env_pairs(value: &Value) -> Result<Vec<(String, String)>, String> {
    let pairs: Vec<(String, String)> = match value {
        Value::Map(m) => m.clone(),
        Value::List(l) => l
            .iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("takes a table, e.g. env = { SEED = \"1\" }".into()),
    };
    match pairs.iter().find(|(k, _)| !super::valid_env_name(k)) {
        Some((k, _)) => Err(format!(
            "{k:?} is not a variable name: letters, digits and _"
        )),
        None => Ok(pairs),
    }
}

/// What one script runs with, after the overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptSettings {
    pub timeout: Duration,
    pub retries: u32,
    pub device: Device,
    pub memory_limit: Option<u64>,
    /// The run's `--env` pairs, then the override's (which win on a clash).
    pub env: Vec<(String, String)>,
    /// Each setting an override changed, with its value and the override's place.
    pub overridden: BTreeMap<String, Setting>,
}

impl ScriptSettings {
    /// The run's retry policy with this script's number of retries.
    pub fn retry_policy(&self, run: &crate::retry::RetryPolicy) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy {
            retries: self.retries,
            ..run.clone()
        }
    }

    /// The platform the script starts on: the run's, unless an override names a
    /// device (`auto` there keeps the run's).
    pub fn platform(&self, run: Platform) -> Platform {
        if !self.overridden.contains_key("device") {
            return run;
        }
        match self.device {
            Device::Auto => run,
            Device::Cpu => Platform::Cpu,
            Device::Gpu => Platform::Gpu,
            Device::Tpu => Platform::Tpu,
        }
    }
}

/// The settings for one script: the run's values under the first matching overrides.
/// An option given on the command line or in a `JAX_RUNNER_*` variable outranks the
/// profile, its overrides included; `--env` pairs from there win over an override's.
pub fn settings_for(config: &super::RunConfig, id: &str, relative_path: &Path) -> ScriptSettings {
    let mut s = ScriptSettings {
        timeout: config.timeout,
        retries: config.retry.retries,
        device: config.device,
        memory_limit: config.memory_limit,
        env: config.extra_env.clone(),
        overridden: BTreeMap::new(),
    };
    let higher = |key: &str| {
        config.settings.get(key).is_some_and(|set| {
            set.source == "command line" || set.source.starts_with("environment")
        })
    };
    let mut taken: std::collections::BTreeSet<&str> =
        ["timeout", "retries", "device", "memory-limit"]
            .into_iter()
            .filter(|k| higher(k))
            .collect();
    let mut notes = Vec::new();
    for o in config
        .overrides
        .iter()
        .filter(|o| o.filter.matches(id, relative_path))
    {
        let mut first = |key: &'static str| taken.insert(key);
        if let Some(t) = o.timeout.filter(|_| first("timeout")) {
            s.timeout = t;
            notes.push(note(
                "timeout",
                humantime::format_duration(t).to_string(),
                o,
            ));
        }
        if let Some(r) = o.retries.filter(|_| first("retries")) {
            s.retries = r;
            notes.push(note("retries", r.to_string(), o));
        }
        if let Some(d) = o.device.filter(|_| first("device")) {
            s.device = d;
            notes.push(note("device", d.as_str().to_string(), o));
        }
        if let Some(m) = o.memory_limit.filter(|_| first("memory-limit")) {
            s.memory_limit = Some(m);
            notes.push(note("memory-limit", m.to_string(), o));
        }
        if !o.env.is_empty() && first("env") {
            let given: Vec<&String> = match higher("env") {
                true => config.extra_env.iter().map(|(k, _)| k).collect(),
                false => Vec::new(),
            };
            let mut shown = Vec::new();
            for (k, v) in o.env.iter().filter(|(k, _)| !given.contains(&k)) {
                s.env.retain(|(ek, _)| ek != k);
                s.env.push((k.clone(), v.clone()));
                shown.push(format!("{k}={v}"));
            }
            if !shown.is_empty() {
                notes.push(note("env", shown.join(" "), o));
            }
        }
    }
    s.overridden = notes.into_iter().collect();
    s
}

fn note(key: &str, value: String, o: &Override) -> (String, Setting) {
    (
        key.to_string(),
        Setting {
            value,
            source: o.source.clone(),
        },
    )
}

#[cfg(test)]
mod tests;
