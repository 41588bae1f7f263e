//! The runner's parent environment, read once.
//!
//! `main` takes a snapshot before anything else looks at the environment; the options
//! (`JAX_RUNNER_*`, `RAY_ADDRESS`), the interpreter's choice (`JAX_RUNNER_PYTHON`,
//! `VIRTUAL_ENV`, `PATH`), the GPUs (`CUDA_VISIBLE_DEVICES`, the NVML switches) and
//! every script's environment are decided from it, so a decision never depends on when
//! it was made, and a test can hand any environment to any decision.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// The variables of the runner's parent, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<OsString, OsString>,
}

impl Environment {
    /// The process's environment now. The one read of it: everything else asks the
    /// snapshot.
    pub fn capture() -> Environment {
        Environment {
            vars: std::env::vars_os().collect(),
        }
    }

    /// An environment of exactly these variables (tests, and what a script is given).
    pub fn from_pairs<K: Into<OsString>, V: Into<OsString>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Environment {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// `name`'s value, when set (possibly empty).
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// `name`'s value as text (lossy), when set (possibly empty).
    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    /// `name`'s value, when set and not empty: an empty variable counts as unset for
    /// paths and switches.
    pub fn non_empty(&self, name: &str) -> Option<&OsStr> {
        self.var_os(name).filter(|v| !v.is_empty())
    }

    /// Every variable, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// The variables whose names and values are text, sorted by name.
    pub fn text_vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter()
            .filter_map(|(k, v)| Some((k.to_str()?, v.to_str()?)))
    }

    /// Sets or replaces one variable (tests).
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) {
        self.vars.insert(name.into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_answers_by_name_and_empty_is_not_set_for_paths() {
        let env = Environment::from_pairs([("A", "1"), ("EMPTY", "")]);
        assert_eq!(env.var("A").as_deref(), Some("1"));
        assert_eq!(env.var("EMPTY").as_deref(), Some(""));
        assert!(env.non_empty("EMPTY").is_none());
        assert!(env.var_os("B").is_none());
        assert_eq!(env.text_vars().count(), 2);
    }
}
