//! Where jax-runner keeps state shared between runs: the user cache folder.

use std::path::PathBuf;

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
