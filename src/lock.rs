//! Advisory file locks (`flock`), released when the handle drops or the process dies.

use rustix::fs::{FlockOperation, Mode, OFlags};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct FileLock {
    file: File,
}

impl FileLock {
    /// Blocks until the lock is held.
    pub fn acquire(path: &Path) -> std::io::Result<FileLock> {
        Self::lock(path, FlockOperation::LockExclusive)
            .map(|f| f.expect("blocking lock returns a file"))
    }

    /// Returns `None` when another process holds the lock. For a results folder's
    /// lock: its folder is opened with no symlink followed anywhere on its path (see
    /// [`crate::confined::open_dir`]), so a link planted there is refused.
    pub fn try_acquire(path: &Path) -> std::io::Result<Option<FileLock>> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} names no file", path.display()),
            ));
        };
        let dir = crate::confined::open_dir(dir)?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(&dir, name, flags | OFlags::CLOEXEC, Mode::from(0o666))?;
        Self::lock_file(
            File::from(fd),
            path,
            FlockOperation::NonBlockingLockExclusive,
        )
    }

    /// Writes `text` as the lock file's whole content, through the held handle (the
    /// name could have been swapped meanwhile; the handle is the locked file).
    pub fn write_holder(&mut self, text: &str) -> std::io::Result<()> {
        use std::io::{Seek, Write};
        self.file.set_len(0)?;
        self.file.seek(std::io::SeekFrom::Start(0))?;
        self.file.write_all(text.as_bytes())
    }

    fn lock(path: &Path, op: FlockOperation) -> std::io::Result<Option<FileLock>> {
        // The lock file sits in a folder a script may have written: a link there is
        // not followed, and a FIFO is neither waited on (non-blocking open) nor used.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        Self::lock_file(file, path, op)
    }

    fn lock_file(file: File, path: &Path, op: FlockOperation) -> std::io::Result<Option<FileLock>> {
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        loop {
            let err = match rustix::fs::flock(&file, op) {
                Ok(()) => return Ok(Some(FileLock { file })),
                Err(e) => std::io::Error::from(e),
            };
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => return Ok(None),
                _ => return Err(err),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_until_release() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.lock");
        let first = FileLock::try_acquire(&path).unwrap();
        assert!(first.is_some());
        assert!(FileLock::try_acquire(&path).unwrap().is_none());
        drop(first);
        assert!(FileLock::try_acquire(&path).unwrap().is_some());
    }
}
