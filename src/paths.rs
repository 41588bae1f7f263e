//! Where jax-runner keeps state shared between runs: the user cache folder.

use std::path::{Path, PathBuf};

/// What a warning about a cache folder that cannot be written says to do.
pub const CACHE_DIR_FIX: &str = "set JAX_RUNNER_CACHE_DIR to a folder you can write";

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

/// Writes `bytes` into `dir` once, as `{stem}-{hash}.{ext}` where the hash is of the
/// bytes (runs, and binaries of other versions, share the folder), and returns the
/// path: the confinement library. A file of that name with other
/// bytes (cut short by a crash) is replaced.
pub fn install_by_hash(
    dir: &Path,
    stem: &str,
    ext: &str,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    use sha2::{Digest, Sha256};
    std::fs::create_dir_all(dir)?;
    let hash: String = Sha256::digest(bytes)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(format!("{stem}-{hash}.{ext}"));
    if std::fs::read(&path).ok().as_deref() != Some(bytes) {
        write_atomically(&path, bytes)?;
    }
    Ok(path)
}

/// Writes `bytes` to a new temporary file beside `path` (created exclusively, so no
/// other writer or planted file is reused) and renames it into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tries = 0;
    let (tmp, mut file) = loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp);
        match opened {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            opened => break (tmp, opened?),
        }
    };
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
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
