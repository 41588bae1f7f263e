//! Atomic file writes: a temporary file in the same folder, flushed, then renamed over
//! the target, so a reader sees the old file or the new one, never half of one.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::ReportError;

/// Writes `bytes` to `path` atomically and durably (flushed to disk before the rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    write_atomic_with(path, bytes, true)
}

/// Writes `bytes` to `path` atomically; `sync` also makes it durable. The rename alone
/// already guarantees readers never see a torn file; the fsync (milliseconds on some
/// disks) is what survives a power cut, and is skipped for the per-script results,
/// which are many and small, while the run's metrics, written last, are synced.
pub fn write_atomic_with(path: &Path, bytes: &[u8], sync: bool) -> Result<(), ReportError> {
    write_atomic_stream(path, sync, |f| f.write_all(bytes))
}

/// Writes what `fill` writes to `path` atomically, for files too large to build in
/// memory first; `sync` as in [`write_atomic_with`].
pub fn write_atomic_stream(
    path: &Path,
    sync: bool,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), ReportError> {
    let fail = |source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // Hidden and unique per process and call, so concurrent writers never share one.
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), unique()));
    let result = (|| {
        // A new file, never one already there: a link or FIFO planted at the
        // temporary's name can neither redirect the write nor block it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        let mut f = std::io::BufWriter::new(file);
        fill(&mut f)?;
        let f = f.into_inner().map_err(|e| e.into_error())?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(fail)
}

/// Serializes `value` as pretty JSON with a final newline and writes it atomically
/// and durably.
pub fn write_json<T: serde::Serialize>(
    path: &Path,
    what: &'static str,
    value: &T,
) -> Result<(), ReportError> {
    write_json_with(path, what, value, true)
}

/// [`write_json`], with the fsync optional (see [`write_atomic_with`]).
pub fn write_json_with<T: serde::Serialize>(
    path: &Path,
    what: &'static str,
    value: &T,
    sync: bool,
) -> Result<(), ReportError> {
    write_atomic_with(path, &json_bytes(what, value)?, sync)
}

/// A JSON document's bytes as every JSON file of the results folder has them: pretty,
/// with a final newline.
pub fn json_bytes<T: serde::Serialize>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, ReportError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|source| ReportError::Serialize { what, source })?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporaries() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sub/x.json");
        write_json(&path, "test", &serde_json::json!({"a": 1})).unwrap();
        write_json(&path, "test", &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["a"], 2);
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.json")]);
    }

    #[test]
    fn failure_names_the_path() {
        let err = write_atomic(Path::new("/proc/no/such/place.json"), b"{}").unwrap_err();
        assert!(err.to_string().contains("/proc/no/such/place.json"));
    }
}
