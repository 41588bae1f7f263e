//! Walks of a folder a script wrote (its data folder, the compilation cache): every
//! entry below it, never through a symlink, never opening what is not a folder, and
//! stopping at a bound however many entries the script made.
//!
//! Not `walkdir`, on purpose: walkdir opens each folder by its whole path, so a script
//! still running (or a grandchild it left) that swaps a folder for a symlink between
//! two reads sends the walk out of its folder. Here every folder is opened from the
//! walk's own top descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (see
//! `resolve.rs`), and the privilege bits are cleared through descriptors, never paths.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

use super::dirs::read_entries;
use super::{open_beneath, Kind};

/// Entries [`clear_privilege_bits`] looks at, at most: far more than a script's data
/// folder holds, few enough that a folder of millions of empty files costs seconds.
const CLEAR_LIMIT: usize = 200_000;

/// Mode bits a file or folder a script left must not keep: set-user-ID and
/// set-group-ID (a later run, or another user, would execute with the script's
/// identity), and writable by anyone.
const UNSAFE_BITS: u32 = 0o4000 | 0o2000 | 0o002;

/// Opens the folder `dir` itself, refusing a symlink there: a data folder a script
/// swapped for a link to `/` lists nothing, rather than the whole machine.
fn open_top(dir: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    Ok(rustix::fs::openat(
        CWD,
        dir,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Visits the entries below `top`, folders first seen first entered, at most `limit`:
/// `each(folder, relative path, folder fd, name, kind)`; false stops the walk. Returns
/// true when the walk stopped early. Folders are reopened from `top` by their
/// relative path, so no symlink is followed and few descriptors are held.
fn visit(
    top: BorrowedFd<'_>,
    limit: usize,
    mut each: impl FnMut(&Path, BorrowedFd<'_>, &OsStr, Kind) -> bool,
) -> bool {
    let mut pending = vec![PathBuf::new()];
    let mut seen = 0usize;
    let mut stopped = false;
    while let Some(rel) = pending.pop() {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
        let Ok(fd) = open_beneath(top, &rel, flags, Mode::empty()) else {
            continue;
        };
        let _ = read_entries(fd, limit.saturating_sub(seen), |at, name, kind| {
            seen += 1;
            if kind == Kind::Directory {
                pending.push(rel.join(&name));
            }
            stopped = !each(&rel, at, &name, kind) || seen >= limit;
            !stopped
        });
        if stopped {
            return true;
        }
    }
    false
}

/// Files under `dir` (recursively, symlinks not followed, listed as files), at most
/// `limit`, sorted; the runner's own hidden files (`.jax-runner-*`) are left out. The
/// flag says the listing stopped at the limit. A `dir` that is a symlink lists nothing.
pub fn list_files(dir: &Path, limit: usize) -> (Vec<PathBuf>, bool) {
    let Ok(top) = open_top(dir) else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    // Folders count towards the bound too: a script's million empty folders must not
    // keep the runner walking.
    let cut = visit(
        top.as_fd(),
        limit.saturating_mul(4),
        |rel, _, name, kind| {
            if name.as_encoded_bytes().starts_with(b".jax-runner-") || kind == Kind::Directory {
                return true;
            }
            out.push(dir.join(rel).join(name));
            out.len() < limit
        },
    );
    out.sort();
    (out, cut)
}

/// [`list_files`] of `dir`, relative to it, as text: what a script left in its data
/// folder.
pub fn relative_files(dir: &Path, limit: usize) -> Vec<String> {
    let (files, _) = list_files(dir, limit);
    files
        .iter()
        .filter_map(|f| f.strip_prefix(dir).ok())
        .map(|f| f.to_string_lossy().into_owned())
        .collect()
}

/// Clears set-user-ID, set-group-ID and world-write on `dir` and everything below it
/// (symlinks are never followed, nothing is opened for reading) and returns what it
/// changed. Made for what a script leaves behind in a folder that outlives it: its
/// data folder, the compilation cache. Stops after [`CLEAR_LIMIT`] entries.
pub fn clear_privilege_bits(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let top = open_top(dir)?;
    let mut changed = Vec::new();
    if strip(top.as_fd(), OsStr::new("."))? {
        changed.push(dir.to_path_buf());
    }
    let mut failed = None;
    visit(top.as_fd(), CLEAR_LIMIT, |rel, at, name, kind| {
        if kind == Kind::Symlink {
            return true;
        }
        match strip(at, name) {
            Ok(true) => changed.push(dir.join(rel).join(name)),
            Ok(false) => {}
            // Gone meanwhile: nothing left to clear.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failed = Some(e),
        }
        true
    });
    match failed {
        Some(e) if changed.is_empty() => Err(e),
        _ => Ok(changed),
    }
}

/// Clears [`UNSAFE_BITS`] on `name` in `at`; true when there were any. The entry is
/// opened as a path only (`O_PATH | O_NOFOLLOW`: no FIFO or device is opened, a symlink
/// is seen as itself) and changed through `/proc/self/fd`, so the mode lands on the
/// very inode that was checked, even if the name was swapped meanwhile.
fn strip(at: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<bool> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(at, name, flags, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    let kind = Kind::of_mode(st.st_mode);
    if st.st_mode & UNSAFE_BITS == 0 || kind == Kind::Symlink {
        return Ok(false);
    }
    let mode = Mode::from_raw_mode(st.st_mode & 0o7777 & !UNSAFE_BITS);
    let by_proc = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    match rustix::fs::chmod(by_proc.as_str(), mode) {
        Ok(()) => Ok(true),
        // No /proc: a regular file or folder can be opened, checked to be the same
        // inode, and changed by descriptor.
        Err(Errno::NOENT) if matches!(kind, Kind::Regular | Kind::Directory) => {
            let reopen = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
            let file = rustix::fs::openat(at, name, reopen | OFlags::CLOEXEC, Mode::empty())?;
            let again = rustix::fs::fstat(&file)?;
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
                return Ok(false);
            }
            rustix::fs::fchmod(&file, mode)?;
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}
