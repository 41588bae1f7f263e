//! `jax-runner.toml`: named profiles of run options, in the shape nextest users know.
//!
//! ```toml
//! [profile.default]
//! timeout = "10m"
//! jobs = 2
//!
//! [profile.ci]
//! retries = 2
//! [[profile.ci.overrides]]
//! filter = "*slow*"
//! timeout = "1h"
//! ```
//!
//! This module reads the file and keeps where every value came from (file and line);
//! which keys are options is the command line's business (the binary checks them),
//! and what an override may set is [`super::overrides`]'.

use std::path::{Path, PathBuf};

use toml_edit::{ImDocument, Item, TableLike};

use crate::error::ConfigError;

/// The file's name in the current folder.
pub const FILE_NAME: &str = "jax-runner.toml";
/// The profile that always applies, under any other.
pub const DEFAULT_PROFILE: &str = "default";

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    pub profile: String,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "profile {} ({}:{})",
            self.profile,
            self.file.display(),
            self.line
        )
    }
}

/// A value as a profile writes it, reduced to what options take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    /// Strings, and numbers in their written form.
    Text(String),
    /// An array of strings or numbers (repeatable options).
    List(Vec<String>),
    /// An inline table of strings (`env = { SEED = "1" }`).
    Map(Vec<(String, String)>),
}

/// `key = value` in a profile.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub value: Value,
    pub origin: Origin,
}

/// One `[[profile.NAME.overrides]]` table: `filter` and the settings it sets.
#[derive(Debug, Clone)]
pub struct OverrideEntry {
    pub filter: String,
    pub entries: Vec<Entry>,
    pub origin: Origin,
}

/// The options a profile selects: `default`'s, with the named profile's on top.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    pub name: String,
    pub entries: Vec<Entry>,
    /// The named profile's overrides first, then `default`'s: the first match wins.
    pub overrides: Vec<OverrideEntry>,
}

/// A parsed `jax-runner.toml`.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    doc: ImDocument<String>,
}

impl ConfigFile {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        let doc = ImDocument::parse(text).map_err(|e| ConfigError::ConfigSyntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let file = ConfigFile {
            path: path.to_path_buf(),
            doc,
        };
        for (key, _) in file.doc.as_table().iter() {
            if key != "profile" {
                return Err(file.key_error(
                    file.doc.as_table(),
                    key,
                    "",
                    "the file holds only [profile.NAME] tables",
                ));
            }
        }
        Ok(file)
    }

    /// The profiles the file defines, in file order.
    pub fn profiles(&self) -> Vec<String> {
        self.profile_tables()
            .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
            .unwrap_or_default()
    }

    /// `name` on top of `default`. `default` may be absent; another name must exist.
    pub fn profile(&self, name: &str) -> Result<Profile, ConfigError> {
        let known = self.profiles();
        if name != DEFAULT_PROFILE && !known.iter().any(|k| k == name) {
            return Err(ConfigError::UnknownProfile {
                name: name.to_string(),
                path: self.path.clone(),
                known: known.join(", "),
            });
        }
        let mut out = Profile {
            name: name.to_string(),
            ..Profile::default()
        };
        let mut layers = vec![DEFAULT_PROFILE];
        if name != DEFAULT_PROFILE {
            layers.push(name);
        }
        for layer in layers {
            let Some(table) = self.table(layer)? else {
                continue;
            };
            let mut overrides = Vec::new();
            for (key, item) in table.iter() {
                if key == "overrides" {
                    overrides = self.overrides(layer, item)?;
                    continue;
                }
                let entry = self.entry(table, layer, key, item)?;
                out.entries.retain(|e| e.key != entry.key);
                out.entries.push(entry);
            }
            // A named profile's overrides come before default's.
            overrides.append(&mut out.overrides);
            out.overrides = overrides;
        }
        Ok(out)
    }

    fn profile_tables(&self) -> Option<&dyn TableLike> {
        self.doc.as_table().get("profile")?.as_table_like()
    }

    /// `[profile.NAME]`, when the file has it.
    fn table(&self, name: &str) -> Result<Option<&dyn TableLike>, ConfigError> {
        let Some(profiles) = self.profile_tables() else {
            return match self.doc.as_table().get("profile") {
                Some(_) => Err(self.key_error(
                    self.doc.as_table(),
                    "profile",
                    "",
                    "must be a table of profiles: [profile.NAME]",
                )),
                None => Ok(None),
            };
        };
        match profiles.get(name) {
            None => Ok(None),
            Some(item) => item.as_table_like().map(Some).ok_or_else(|| {
                self.key_error(profiles, name, "", "must be a table: [profile.NAME]")
            }),
        }
    }

    fn entry(
        &self,
        table: &dyn TableLike,
        profile: &str,
        key: &str,
        item: &Item,
    ) -> Result<Entry, ConfigError> {
        let value = item.as_value().and_then(value_of).ok_or_else(|| {
            self.key_error(
                table,
                key,
                profile,
                "takes a string, number, boolean, array of strings, or inline table of strings",
            )
        })?;
        Ok(Entry {
            key: key.to_string(),
            value,
            origin: self.origin(table, key, profile),
        })
    }

    fn overrides(&self, profile: &str, item: &Item) -> Result<Vec<OverrideEntry>, ConfigError> {
        let Some(tables) = item.as_array_of_tables() else {
            let parent = self.table(profile)?.expect("the caller found it");
            return Err(self.key_error(
                parent,
                "overrides",
                profile,
                "must be written [[profile.NAME.overrides]]",
            ));
        };
        let mut out = Vec::new();
        for table in tables.iter() {
            let mut filter = None;
            let mut entries = Vec::new();
            for (key, item) in table.iter() {
                let entry = self.entry(table, profile, key, item)?;
                match (key, &entry.value) {
                    ("filter", Value::Text(f)) => filter = Some(f.clone()),
                    ("filter", _) => {
                        return Err(self.key_error(
                            table,
                            key,
                            profile,
                            "must be a pattern string, e.g. filter = \"*slow*\"",
                        ))
                    }
                    _ => entries.push(entry),
                }
            }
            let origin = Origin {
                file: self.path.clone(),
                line: table.span().map_or(0, |s| self.line_of(s.start)),
                profile: profile.to_string(),
            };
            let filter = filter.ok_or_else(|| ConfigError::ConfigKey {
                path: self.path.clone(),
                line: origin.line,
                key: "overrides".into(),
                reason: "every [[profile.NAME.overrides]] needs filter = \"PATTERN\"".into(),
            })?;
            out.push(OverrideEntry {
                filter,
                entries,
                origin,
            });
        }
        Ok(out)
    }

    fn origin(&self, table: &dyn TableLike, key: &str, profile: &str) -> Origin {
        let line = table
            .get_key_value(key)
            .and_then(|(k, _)| k.span())
            .map_or(0, |s| self.line_of(s.start));
        Origin {
            file: self.path.clone(),
            line,
            profile: profile.to_string(),
        }
    }

    /// An error about `key`, naming the file and the line.
    pub fn key_error(
        &self,
        table: &dyn TableLike,
        key: &str,
        profile: &str,
        reason: &str,
    ) -> ConfigError {
        ConfigError::ConfigKey {
            path: self.path.clone(),
            line: self.origin(table, key, profile).line,
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    fn line_of(&self, offset: usize) -> usize {
        let text = self.doc.raw();
        text[..offset.min(text.len())].matches('\n').count() + 1
    }
}

/// A TOML value as an option value, when it is one.
fn value_of(v: &toml_edit::Value) -> Option<Value> {
    use toml_edit::Value as V;
    let scalar = |v: &V| match v {
        V::String(s) => Some(s.value().clone()),
        V::Integer(i) => Some(i.value().to_string()),
        V::Float(f) => Some(f.value().to_string()),
        _ => None,
    };
    match v {
        V::Boolean(b) => Some(Value::Bool(*b.value())),
        V::Array(a) => a
            .iter()
            .map(scalar)
            .collect::<Option<Vec<_>>>()
            .map(Value::List),
        V::InlineTable(t) => t
            .iter()
            .map(|(k, v)| scalar(v).map(|v| (k.to_string(), v)))
            .collect::<Option<Vec<_>>>()
            .map(Value::Map),
        other => scalar(other).map(Value::Text),
    }
}

#[cfg(test)]
mod tests;
