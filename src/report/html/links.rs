//! Relative links from `report.html` to a script's logs and data folder, so the
//! report keeps working when the whole output tree is copied or served elsewhere.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::report::record::ScriptRecord;

/// One link of a script's row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct Link {
    pub label: &'static str,
    pub href: String,
}

/// The links of one script: its stdout and stderr logs and its data folder, each
/// relative to the folder `report.html` is in.
pub(super) fn script_links(report_dir: &Path, r: &ScriptRecord) -> Vec<Link> {
    [
        ("stdout", &r.stdout_log),
        ("stderr", &r.stderr_log),
        ("data", &r.data_dir),
    ]
    .into_iter()
    .filter(|(_, p)| !p.is_empty())
    .map(|(label, p)| Link {
        label,
        href: href(&relative(report_dir, Path::new(p))),
    })
    .collect()
}

/// `target` as seen from `base`, both absolute: `logs/x.stdout.log`,
/// `../../12_execute_output/m/jax/simulation_data`.
pub(super) fn relative(base: &Path, target: &Path) -> PathBuf {
    let base: Vec<Component> = base.components().collect();
    let target: Vec<Component> = target.components().collect();
    let common = base.iter().zip(&target).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for c in &target[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// A relative path as an `href`: every byte outside the URL's unreserved set and
/// `/` is percent-encoded, so spaces, `#`, `?` and `%` in names keep their meaning.
pub(super) fn href(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_and_encoded() {
        let base = Path::new("/t/execution_results/jax");
        assert_eq!(
            relative(
                base,
                Path::new("/t/execution_results/jax/logs/a.stdout.log")
            ),
            PathBuf::from("logs/a.stdout.log")
        );
        assert_eq!(
            relative(base, Path::new("/t/12_execute_output/m x/jax")),
            PathBuf::from("../../12_execute_output/m x/jax")
        );
        assert_eq!(
            href(Path::new("../m x/#1?%.log")),
            "../m%20x/%231%3F%25.log"
        );
    }
}
