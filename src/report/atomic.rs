//! Atomic file writes: a temporary file in the same folder, flushed, then renamed over
//! the target, so a reader sees the old file or the new one, never half of one. The
//! folder is reached with no symlink followed anywhere on its path (see
//! [`crate::confined::make_dir`]); a path the user named (an export) is made canonical
//! by its caller first.

use std::io::Write;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

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
    let name = path.file_name().ok_or_else(|| {
        fail(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "names no file",
        ))
    })?;
    // The folder is made and held with no symlink followed anywhere on its path: the
    // results folders are canonical, so a link there was planted during the run, and
    // the temporary file and the rename both go through this handle, not the path.
    let dir = crate::confined::make_dir(dir).map_err(|refused| fail(refused.into()))?;
    // Hidden and unique per process and call, so concurrent writers never share one.
    let tmp = format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        unique()
    );
    let result = (|| -> std::io::Result<()> {
        // A new file, never one already there: a link or FIFO planted at the
        // temporary's name can neither redirect the write nor block it.
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(&dir, &tmp, flags | OFlags::CLOEXEC, Mode::from(0o666))?;
        let mut f = std::io::BufWriter::new(std::fs::File::from(fd));
        fill(&mut f)?;
        let f = f.into_inner().map_err(|e| e.into_error())?;
        if sync {
            f.sync_all()?;
        }
        // Within the same held folder: the rename replaces the name, never follows it.
        Ok(rustix::fs::renameat(&dir, &tmp, &dir, name)?)
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
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
    fn a_link_planted_on_the_folder_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("report.html"), "theirs").unwrap();
        let dir = tmp.path().canonicalize().unwrap().join("results");
        std::os::unix::fs::symlink(outside.path(), &dir).unwrap();
        let err = write_atomic(&dir.join("report.html"), b"ours").unwrap_err();
        assert!(
            crate::error::chain(&err)
                .join(": ")
                .contains("is a symlink"),
            "{err}"
        );
        let names: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        let kept = std::fs::read_to_string(outside.path().join("report.html")).unwrap();
        assert_eq!(kept, "theirs");
    }

    #[test]
    fn failure_names_the_path() {
        let err = write_atomic(Path::new("/proc/no/such/place.json"), b"{}").unwrap_err();
        assert!(err.to_string().contains("/proc/no/such/place.json"));
    }
}
