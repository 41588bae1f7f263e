//! Which file and profile a run reads, and the names that are no option: a profile key
//! is an error, a `JAX_RUNNER_*` variable a warning, each with the nearest option named
//! when a letter or two is off.

use std::path::{Path, PathBuf};

use super::env_name;
use crate::config::profile::{self, ConfigFile, Profile};
use crate::environment::Environment;
use crate::error::ConfigError;

/// Options that choose the layers themselves, or only print: never set by a layer.
pub const NOT_LAYERED: [&str; 4] = ["help", "version", "config", "profile"];

/// `JAX_RUNNER_*` variables that are not options: the layers' own, switches of the
/// runner's helpers and tests, and what the runner gives a script.
const NOT_OPTIONS: [&str; 19] = [
    "CONFIG",
    // The Python package's: where its binary is, and its tests' interpreter.
    "BIN",
    "TEST_PYTHON",
    "PROFILE",
    "PYTHON",
    "CACHE_DIR",
    "GPU_COUNT",
    "NO_NVML",
    "FAKE_NVML",
    "TOKEN",
    "ATTEMPT",
    "TELEMETRY",
    "PROFILE_DIR",
    "ZYGOTE",
    "RAY_SCRIPT",
    "RAY_NONCE",
    "KEEP_SCREENSHOTS",
    "LOG",
    // The test suite's opt-out of a missing prerequisite (tests/common/prereq.rs).
    "TEST_SKIP",
];

/// `--config FILE`, else `JAX_RUNNER_CONFIG`, else `./jax-runner.toml` when present;
/// then `--profile NAME`, else `JAX_RUNNER_PROFILE`, else `default`. A name without a
/// file, or a name the file lacks, is an error. The profile is `None` without a file.
pub fn choose_profile(
    config: Option<&Path>,
    name: Option<&str>,
    env: &Environment,
) -> Result<Option<Profile>, ConfigError> {
    let named = config
        .map(Path::to_path_buf)
        .or_else(|| env.non_empty("JAX_RUNNER_CONFIG").map(PathBuf::from));
    let file = match named {
        Some(path) => Some(ConfigFile::load(&path)?),
        None => {
            let here = Path::new(profile::FILE_NAME);
            match here.is_file() {
                true => Some(ConfigFile::load(here)?),
                false => None,
            }
        }
    };
    let name = name
        .map(str::to_string)
        .or_else(|| env.var("JAX_RUNNER_PROFILE").filter(|v| !v.is_empty()));
    match (file, name) {
        (None, Some(name)) if name != profile::DEFAULT_PROFILE => Err(ConfigError::Invalid {
            option: "--profile",
            value: name,
            reason: format!(
                "there is no {} here: write one, or name it with --config FILE",
                profile::FILE_NAME
            ),
        }),
        (None, _) => Ok(None),
        (Some(file), name) => file
            .profile(name.as_deref().unwrap_or(profile::DEFAULT_PROFILE))
            .map(Some),
    }
}

/// Every profile key must be an option of a run (`list` uses the ones it has), or
/// `NAME = false` for a `--no-NAME` option; every override must be valid.
pub fn check_keys(p: &Profile, known: &[String]) -> Result<(), ConfigError> {
    let keys: Vec<String> = known
        .iter()
        .filter(|k| !NOT_LAYERED.contains(&k.as_str()))
        .flat_map(|k| {
            let positive = k
                .strip_prefix("no-")
                .filter(|p| !known.iter().any(|o| o == p));
            std::iter::once(k.clone()).chain(positive.map(str::to_string))
        })
        .collect();
    for e in &p.entries {
        if keys.contains(&e.key) {
            continue;
        }
        let reason = match NOT_LAYERED.contains(&e.key.as_str()) {
            true => "cannot be set in a profile".to_string(),
            false => match suggest(&e.key, keys.iter().map(String::as_str)) {
                Some(near) => format!("is not an option of jax-runner; did you mean \"{near}\"?"),
                None => format!(
                    "is not an option of jax-runner; profiles take run options by their long name, e.g. timeout = \"10m\" (see {} --help)",
                    env!("CARGO_PKG_NAME")
                ),
            },
        };
        return Err(ConfigError::ConfigKey {
            path: e.origin.file.clone(),
            line: e.origin.line,
            key: e.key.clone(),
            reason,
        });
    }
    for o in &p.overrides {
        crate::config::Override::parse(o)?;
    }
    Ok(())
}

/// Warnings for `JAX_RUNNER_*` variables that are neither an option nor one the runner
/// knows, naming the nearest option's variable when there is one.
pub fn unknown_variables(env: &Environment, known: &[String]) -> Vec<String> {
    let options: Vec<String> = known
        .iter()
        .filter(|k| !NOT_LAYERED.contains(&k.as_str()))
        .flat_map(|k| [env_name(k), env_name(k.trim_start_matches("no-"))])
        .collect();
    let internal = NOT_OPTIONS.map(|n| format!("JAX_RUNNER_{n}"));
    env.text_vars()
        .map(|(name, _)| name)
        .filter(|n| n.starts_with("JAX_RUNNER_"))
        .filter(|n| !n.starts_with("JAX_RUNNER_UPDATE_"))
        .filter(|n| !options.iter().chain(&internal).any(|o| o == n))
        .map(|n| match suggest(n, options.iter().map(String::as_str)) {
            Some(near) => format!("{n} is not a jax-runner variable; did you mean {near}?"),
            None => format!(
                "{n} is not a jax-runner variable: options are JAX_RUNNER_<OPTION>, e.g. JAX_RUNNER_TIMEOUT"
            ),
        })
        .collect()
}

/// The candidate nearest to `word` when it is close: at most two edits, and fewer
/// than a third of the word.
pub fn suggest<'c>(word: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (word.chars().count() / 3).clamp(1, 2);
    candidates
        .map(|c| (distance(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance: insertions, deletions and substitutions, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_suggested_and_far_ones_not() {
        let keys = ["timeout", "jobs", "retries", "memory-limit"];
        assert_eq!(suggest("timout", keys.into_iter()), Some("timeout"));
        assert_eq!(
            suggest("memory_limit", keys.into_iter()),
            Some("memory-limit")
        );
        assert_eq!(suggest("colour", keys.into_iter()), None);
        assert_eq!(suggest("job", keys.into_iter()), Some("jobs"));
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn unknown_variables_are_named_and_known_ones_left_alone() {
        let known: Vec<String> = ["timeout", "no-preflight", "config", "jobs"]
            .map(String::from)
            .to_vec();
        let env = Environment::from_pairs([
            ("JAX_RUNNER_TIMOUT", "5m"),
            ("JAX_RUNNER_TIMEOUT", "5m"),
            ("JAX_RUNNER_PREFLIGHT", "0"),
            ("JAX_RUNNER_TOKEN", "x"),
            ("JAX_RUNNER_UPDATE_GOLDEN", "1"),
            ("JAX_RUNNER_CONFIG", "f.toml"),
            ("JAX_RUNNER_WHATEVER", "1"),
            ("PATH", "/bin"),
        ]);
        let warnings = unknown_variables(&env, &known);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().any(|w| w
            == "JAX_RUNNER_TIMOUT is not a jax-runner variable; did you mean JAX_RUNNER_TIMEOUT?"));
        assert!(
            warnings[0].starts_with("JAX_RUNNER_TIMOUT")
                || warnings[1].starts_with("JAX_RUNNER_TIMOUT")
        );
        assert!(warnings
            .iter()
            .any(|w| w.starts_with("JAX_RUNNER_WHATEVER is not")));
    }
}
