//! Which scripts a run takes: `-k/--filter` and `--exclude` expressions (pytest's
//! `-k` language) and the scripts named on the command line, matched against a
//! script's id and its path relative to `--output-dir`.

use std::path::{Component, Path, PathBuf};

use super::DiscoverOptions;
use crate::error::ConfigError;

mod expr;

/// One pattern: a `-k`/`--exclude` expression (pytest's language, `expr.rs`), or a
/// script named on the command line (its whole path under `--output-dir`).
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Expr(expr::Expr),
    /// A script's path, as a glob on the relative path or the id (case as written).
    Path(glob::Pattern),
}

impl Pattern {
    /// Parses `text`; `option` names the option in the error (`--filter`, a profile key).
    pub fn parse(text: &str, option: &'static str) -> Result<Pattern, ConfigError> {
        if text.trim().is_empty() {
            return Err(ConfigError::Invalid {
                option,
                value: text.to_string(),
                reason: "an empty pattern matches everything; leave the option out instead".into(),
            });
        }
        let expr = expr::parse(text).map_err(|reason| ConfigError::Invalid {
            option,
            value: text.to_string(),
            reason,
        })?;
        Ok(Pattern {
            text: text.to_string(),
            matcher: Matcher::Expr(expr),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern matches the script's id or its relative path. A glob word
    /// must match the whole id or path (`*` crosses `/`, as in a shell's `**`); a
    /// substring may sit anywhere; case is ignored. A script's own path matches whole.
    pub fn matches(&self, id: &str, relative_path: &Path) -> bool {
        match &self.matcher {
            Matcher::Expr(e) => e.matches(id, relative_path),
            Matcher::Path(g) => g.matches(id) || g.matches(&relative_path.to_string_lossy()),
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

    /// The selection of a run or `list`: `-k`, `--exclude`, and the trailing script
    /// paths (each a `-k` on its whole path under `output_dir`, which is canonical).
    pub fn of(discover: &DiscoverOptions, output_dir: &Path) -> Result<Selection, ConfigError> {
        let mut selection = Selection::parse(&discover.filter, &discover.exclude)?;
        for given in &discover.scripts {
            selection.filters.push(script_pattern(given, output_dir)?);
        }
        Ok(selection)
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

/// A script path or glob given on the command line (relative to the current folder,
/// or absolute) as a pattern on the whole path relative to `output_dir`; a folder
/// takes every script under it.
fn script_pattern(given: &str, output_dir: &Path) -> Result<Pattern, ConfigError> {
    // As given first (relative to the current folder); a relative path that leads
    // outside the tree is then tried under it, as the reports print scripts.
    match script_pattern_at(given, output_dir) {
        Err(e) if Path::new(given).is_relative() => {
            let under = output_dir.join(given);
            script_pattern_at(&under.to_string_lossy(), output_dir).map_err(|_| e)
        }
        found => found,
    }
}

fn script_pattern_at(given: &str, output_dir: &Path) -> Result<Pattern, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        option: "SCRIPT",
        value: given.to_string(),
        reason,
    };
    let path = Path::new(given);
    // The part before the first component with a glob character is a real path.
    let parts: Vec<Component> = path.components().collect();
    let literal = parts
        .iter()
        .position(|c| c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
        .unwrap_or(parts.len());
    let prefix: PathBuf = parts[..literal].iter().collect();
    let rest: PathBuf = parts[literal..].iter().collect();
    let prefix = super::absolute(if prefix.as_os_str().is_empty() {
        Path::new(".")
    } else {
        &prefix
    });
    let prefix = prefix.canonicalize().unwrap_or_else(|_| lexical(&prefix));
    let Ok(relative) = prefix.strip_prefix(output_dir) else {
        return Err(invalid(format!(
            "it is outside --output-dir {}: name a script under it, or pass --output-dir \
             with the folder that holds it",
            output_dir.display()
        )));
    };
    let mut text = glob::Pattern::escape(&relative.to_string_lossy());
    if !rest.as_os_str().is_empty() {
        text = join(&text, &rest.to_string_lossy());
    } else if prefix.is_dir() {
        text = join(&text, "*");
    }
    let glob = glob::Pattern::new(&text)
        .map_err(|e| invalid(format!("not a glob: {e} (quote it so the shell leaves it)")))?;
    let shown = Path::new(&relative).join(&rest);
    Ok(Pattern {
        text: shown.to_string_lossy().into_owned(),
        matcher: Matcher::Path(glob),
    })
}

/// `a/b` joined to `c` as a pattern (no separator after an empty `a/b`).
fn join(base: &str, tail: &str) -> String {
    match base {
        "" => tail.to_string(),
        _ => format!("{base}/{tail}"),
    }
}

/// `path` with `.` and `..` worked out without the file system (it may not exist).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
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

    fn options(dir: &Path, scripts: &[&str]) -> DiscoverOptions {
        let mut args = vec!["--output-dir".to_string(), dir.display().to_string()];
        args.extend(scripts.iter().map(|s| s.to_string()));
        let o = crate::config::RunOptions::from_args(args.iter().map(String::as_str)).unwrap();
        o.discover
    }

    #[test]
    fn script_paths_select_their_whole_path_under_the_output_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("m/jax")).unwrap();
        std::fs::write(root.join("m/jax/a.py"), "").unwrap();
        let abs = root.join("m/jax/a.py").display().to_string();
        let s = Selection::of(&options(&root, &[&abs]), &root).unwrap();
        assert!(s.selects("m.a", Path::new("m/jax/a.py")));
        // A whole path, not a substring.
        assert!(!s.selects("x.m.a", Path::new("x/m/jax/a.py")));
        let folder = root.join("m").display().to_string();
        let s = Selection::of(&options(&root, &[&folder]), &root).unwrap();
        assert!(s.selects("m.a", Path::new("m/jax/a.py")));
        assert!(!s.selects("n.a", Path::new("n/jax/a.py")));
        let glob = format!("{}/m/*/a*.py", root.display());
        let s = Selection::of(&options(&root, &[&glob]), &root).unwrap();
        assert!(s.selects("m.a", Path::new("m/jax/a.py")));
        assert!(!s.selects("m.b", Path::new("m/jax/b.py")));
        let err = Selection::of(&options(&root, &["/elsewhere/a.py"]), &root)
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside --output-dir"), "{err}");
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
