//! Which scripts a run takes: `-k/--filter` and `--exclude` patterns, matched against a
//! script's id and its path relative to `--output-dir`.

use std::path::Path;

use crate::error::ConfigError;

/// One pattern: a glob when it holds `*`, `?` or `[`, a substring otherwise.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    glob: Option<glob::Pattern>,
}

impl Pattern {
    /// Parses `text`; `option` names the option in the error (`--filter`, a profile key).
    pub fn parse(text: &str, option: &'static str) -> Result<Pattern, ConfigError> {
        if text.is_empty() {
            return Err(ConfigError::Invalid {
                option,
                value: String::new(),
                reason: "an empty pattern matches everything; leave the option out instead".into(),
            });
        }
        let glob = if text.contains(['*', '?', '[']) {
            let parsed = glob::Pattern::new(text).map_err(|e| ConfigError::Invalid {
                option,
                value: text.to_string(),
                reason: format!("not a glob: {e} (quote the pattern so the shell leaves it)"),
            })?;
            Some(parsed)
        } else {
            None
        };
        Ok(Pattern {
            text: text.to_string(),
            glob,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern matches the script's id or its relative path. A glob must
    /// match the whole id or path (`*` crosses `/`, as in a shell's `**`); a substring
    /// may sit anywhere.
    pub fn matches(&self, id: &str, relative_path: &Path) -> bool {
        let path = relative_path.to_string_lossy();
        match &self.glob {
            Some(g) => g.matches(id) || g.matches(&path),
            None => id.contains(&self.text) || path.contains(&self.text),
        }
    }
}

/// `-k/--filter` and `--exclude` together: a script is selected when any filter
/// matches (or there is none) and no exclude does.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub filters: Vec<Pattern>,
    pub excludes: Vec<Pattern>,
}

impl Selection {
    /// Parses the options' patterns.
    pub fn parse(filters: &[String], excludes: &[String]) -> Result<Selection, ConfigError> {
        Ok(Selection {
            filters: filters
                .iter()
                .map(|f| Pattern::parse(f, "--filter"))
                .collect::<Result<_, _>>()?,
            excludes: excludes
                .iter()
                .map(|f| Pattern::parse(f, "--exclude"))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether no pattern was given: every script is selected.
    pub fn is_all(&self) -> bool {
        self.filters.is_empty() && self.excludes.is_empty()
    }

    /// Whether the script is selected.
    pub fn selects(&self, id: &str, relative_path: &Path) -> bool {
        (self.filters.is_empty() || self.filters.iter().any(|p| p.matches(id, relative_path)))
            && !self.excludes.iter().any(|p| p.matches(id, relative_path))
    }

    /// The patterns, for messages: `-k a -k b --exclude c`.
    pub fn describe(&self) -> String {
        let quoted = |flag: &str, p: &Pattern| format!("{flag} {:?}", p.as_str());
        self.filters
            .iter()
            .map(|p| quoted("-k", p))
            .chain(self.excludes.iter().map(|p| quoted("--exclude", p)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(f: &[&str], e: &[&str]) -> Selection {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Selection::parse(&s(f), &s(e)).unwrap()
    }

    #[test]
    fn substrings_match_anywhere_in_id_or_path() {
        let s = sel(&["pomdp"], &[]);
        assert!(s.selects("a.pomdp_solver", Path::new("a/jax/pomdp_solver.py")));
        assert!(s.selects("x", Path::new("models/pomdp/jax/x.py")));
        assert!(!s.selects("a.general", Path::new("a/jax/general.py")));
    }

    #[test]
    fn globs_match_whole_id_or_path() {
        let s = sel(&["*/jax/g*.py"], &[]);
        assert!(s.selects("a.general", Path::new("a/jax/general.py")));
        assert!(!s.selects("a.pomdp", Path::new("a/jax/pomdp.py")));
        // A glob is not a substring: `gen*` does not match `a.general`.
        let s = sel(&["gen*"], &[]);
        assert!(!s.selects("a.general", Path::new("a/jax/general.py")));
        assert!(s.selects("general", Path::new("jax/general.py")));
    }

    #[test]
    fn excludes_win_and_any_filter_selects() {
        let s = sel(&["a", "b"], &["slow"]);
        assert!(s.selects("a1", Path::new("a1.py")));
        assert!(s.selects("b1", Path::new("b1.py")));
        assert!(!s.selects("c1", Path::new("c1.py")));
        assert!(!s.selects("a_slow", Path::new("a_slow.py")));
        assert!(sel(&[], &["x"]).selects("a", Path::new("a.py")));
        assert!(sel(&[], &[]).is_all());
    }

    #[test]
    fn bad_patterns_say_which_option() {
        let err = Selection::parse(&["[".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--filter") && err.contains("glob"), "{err}");
        let err = Selection::parse(&[], &[String::new()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--exclude"), "{err}");
    }
}
