//! Where jax-runner keeps state shared between runs: the user cache folder.

use std::path::{Path, PathBuf};

/// `JAX_RUNNER_CACHE_DIR`, else `$XDG_CACHE_HOME/jax-runner`, else `~/.cache/jax-runner`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JAX_RUNNER_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("jax-runner");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("jax-runner"),
        None => std::env::temp_dir().join("jax-runner-cache"),
    }
}

/// Timestamps in results: RFC 3339, UTC, milliseconds.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A run's unique id: its start in UTC to the millisecond and the runner's PID
/// (`20261122T183605.123Z-4242`), safe as a folder name and sorted by time.
pub fn run_id(started: std::time::SystemTime) -> String {
    let stamp: String = rfc3339(started)
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{stamp}-{}", std::process::id())
}

/// Local time as GNN's step 12 writes it (Python's `datetime.now().isoformat()`):
/// ISO 8601 without a zone, microseconds.
pub fn local_iso(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as libc::time_t;
    // SAFETY: a zeroed tm is a valid one, and localtime_r only fills the struct it is
    // given (chrono's local zone needs a feature that brings a zone database).
    let (tm, ok) = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let ok = !libc::localtime_r(&secs, &mut tm).is_null();
        (tm, ok)
    };
    if !ok {
        // No zone information: UTC is the honest fallback.
        let utc = humantime::format_rfc3339_micros(t).to_string();
        return utc.trim_end_matches('Z').to_string();
    }
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since.subsec_micros()
    )
}

/// The first executable `name` on a PATH-like list.
pub fn find_on_path(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Whether `path` is a file someone may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_iso_has_no_zone_and_microseconds() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let s = local_iso(t);
        assert_eq!(s.len(), "2023-11-14T22:13:20.123456".len(), "{s}");
        assert!(s.ends_with(".123456") && !s.ends_with('Z'), "{s}");
    }
}
