//! Walks of a folder a script wrote (its data folder, the compilation cache): every
//! entry below it, never through a symlink, never opening what is not a folder, and
//! stopping at a bound however many entries the script made. One pass ([`tidy`])
//! clears the privilege bits of what a script left and, in a data folder, removes
//! whatever is neither a regular file nor a folder, so that the next pipeline step's
//! `os.walk` and `open` can never block on it or follow it.
//!
//! Not `walkdir`, on purpose: walkdir opens each folder by its whole path, so a script
//! still running (or a grandchild it left) that swaps a folder for a symlink between
//! two reads sends the walk out of its folder. Here every folder is opened from the
//! walk's own top descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (see
//! `resolve.rs`), and the privilege bits are cleared and entries removed through
//! descriptors, never paths.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::dirs::read_entries;
use super::{open_beneath, Kind};

/// Entries [`tidy`] looks at, at most: far more than a script's data folder holds, few
/// enough that a folder of millions of empty files costs seconds.
pub const TIDY_LIMIT: usize = 200_000;

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

/// How a [`visit`] ended.
#[derive(Debug, Default)]
struct Visited {
    /// True when the walk stopped early (at its bound, or when told to).
    stopped: bool,
    /// Folders below `top` that could not be opened, relative to it: not walked.
    unopened: Vec<(PathBuf, std::io::Error)>,
}

/// Visits the entries below `top`, folders first seen first entered, at most `limit`:
/// `each(folder, relative path, folder fd, name, kind)`; false stops the walk. Folders
/// are reopened from `top` by their relative path, so no symlink is followed and few
/// descriptors are held.
fn visit(
    top: BorrowedFd<'_>,
    limit: usize,
    mut each: impl FnMut(&Path, BorrowedFd<'_>, &OsStr, Kind) -> bool,
) -> Visited {
    let mut pending = vec![PathBuf::new()];
    let mut seen = 0usize;
    let mut visited = Visited::default();
    while let Some(rel) = pending.pop() {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
        let fd = match open_beneath(top, &rel, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Gone meanwhile: nothing left below it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                visited.unopened.push((rel, e));
                continue;
            }
        };
        let mut stopped = false;
        let _ = read_entries(fd, limit.saturating_sub(seen), |at, name, kind| {
            seen += 1;
            if kind == Kind::Directory {
                pending.push(rel.join(&name));
            }
            stopped = !each(&rel, at, &name, kind) || seen >= limit;
            !stopped
        });
        if stopped {
            visited.stopped = true;
            return visited;
        }
    }
    visited
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
    )
    .stopped;
    out.sort();
    (out, cut)
}

/// A folder's files as a list for people and `--resume`: at most `limit` named, and
/// how many there are in all.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The first `limit` files, relative to the folder, sorted.
    pub files: Vec<String>,
    /// Every file counted, named or not.
    pub total: usize,
    /// The count stopped at [`COUNT_LIMIT`] entries: there are at least `total`.
    pub at_least: bool,
}

impl Listing {
    /// What `problems` says of a list cut at its limit, naming its full length; `None`
    /// when every file is named.
    pub fn cut(&self, what: &str) -> Option<String> {
        (self.total > self.files.len()).then(|| {
            format!(
                "{what}: the list names {} of {}{} files (it stops at {})",
                self.files.len(),
                if self.at_least { "at least " } else { "" },
                self.total,
                self.files.len()
            )
        })
    }
}

/// How many entries a count walks at the most (a script's million files are counted;
/// a hundred million are "at least").
pub const COUNT_LIMIT: usize = 2_000_000;

/// The files under `dir` (as [`list_files`]), relative to it, as text: at most `limit`
/// named, all counted. What a script left in its data folder.
pub fn relative_files(dir: &Path, limit: usize) -> Listing {
    let Ok(top) = open_top(dir) else {
        return Listing::default();
    };
    let mut named: Vec<PathBuf> = Vec::new();
    let mut total = 0usize;
    let visited = visit(top.as_fd(), COUNT_LIMIT, |rel, _, name, kind| {
        if name.as_encoded_bytes().starts_with(b".jax-runner-") || kind == Kind::Directory {
            return true;
        }
        total += 1;
        if named.len() < limit {
            named.push(rel.join(name));
        }
        true
    });
    named.sort();
    Listing {
        files: named
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect(),
        total,
        at_least: visited.stopped,
    }
}

/// What [`tidy`] keeps of what a script left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every entry; only the privilege bits are cleared: for the compilation cache,
    /// which is jax's own and read by jax alone.
    Everything,
    /// Regular files and folders: FIFOs, sockets, device nodes and symlinks (whatever
    /// they point to) are removed. For a data folder, which the next pipeline step
    /// walks and opens.
    FilesAndFolders,
}

impl Keep {
    /// True when an entry of `kind` goes.
    fn removes(self, kind: Kind) -> bool {
        self == Keep::FilesAndFolders && !matches!(kind, Kind::Regular | Kind::Directory)
    }
}

/// What one [`tidy`] pass did.
#[derive(Debug, Default)]
pub struct Tidied {
    /// What had its set-user-ID, set-group-ID or world-write bits cleared (full paths).
    pub cleared: Vec<PathBuf>,
    /// What was removed, relative to the folder, with what it was; sorted. An empty
    /// path is the folder's own name: something other than a folder stood there.
    pub removed: Vec<(PathBuf, Kind)>,
    /// Folders that could not be opened, relative to the folder: not looked into.
    pub unopened: Vec<(PathBuf, std::io::Error)>,
    /// True when the pass stopped at its bound: entries beyond it were not looked at.
    pub cut: bool,
    /// The first failure to clear or remove an entry; the pass went on past it.
    pub failed: Option<std::io::Error>,
}

/// One pass over `dir` and everything below it, at most [`TIDY_LIMIT`] entries, never
/// following a symlink and opening nothing for reading: clears set-user-ID,
/// set-group-ID and world-write (a later run, or another user, must not execute with
/// the script's identity), and with [`Keep::FilesAndFolders`] removes every entry that
/// is neither a regular file nor a folder (and `dir` itself, when something else
/// stands in its place). Made for what a script leaves behind in a folder that
/// outlives it: its data folder, the compilation cache. A `dir` that is missing is
/// nothing to tidy.
pub fn tidy(dir: &Path, keep: Keep) -> std::io::Result<Tidied> {
    tidy_within(dir, keep, TIDY_LIMIT)
}

/// [`tidy`], stopping after `limit` entries.
pub(super) fn tidy_within(dir: &Path, keep: Keep, limit: usize) -> std::io::Result<Tidied> {
    let mut t = Tidied::default();
    let top = match open_top(dir) {
        Ok(top) => top,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(t),
        Err(e) => {
            // A symlink or a FIFO where the folder should be (an unsandboxed script can
            // put one there): it goes too.
            if let Some(kind) = remove(CWD, dir.as_os_str(), keep)? {
                t.removed.push((PathBuf::new(), kind));
                return Ok(t);
            }
            return Err(e);
        }
    };
    if strip(top.as_fd(), OsStr::new("."))? {
        t.cleared.push(dir.to_path_buf());
    }
    let visited = visit(top.as_fd(), limit, |rel, at, name, kind| {
        let done = match keep.removes(kind) {
            true => remove(at, name, keep).map(|gone| {
                t.removed.extend(gone.map(|kind| (rel.join(name), kind)));
            }),
            // A symlink (kept) is never changed: its mode is no file's.
            false if kind == Kind::Symlink => Ok(()),
            false => strip(at, name).map(|changed| {
                if changed {
                    t.cleared.push(dir.join(rel).join(name));
                }
            }),
        };
        match done {
            Ok(()) => {}
            // Gone meanwhile: nothing left to clear or remove.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                t.failed.get_or_insert(e);
            }
        }
        true
    });
    t.cut = visited.stopped;
    t.unopened = visited.unopened;
    t.removed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(t)
}

/// Clears set-user-ID, set-group-ID and world-write on `dir` and everything below it
/// ([`tidy`] keeping everything) and returns what it changed; fails when nothing could
/// be changed and something failed.
pub fn clear_privilege_bits(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let t = tidy(dir, Keep::Everything)?;
    match t.failed {
        Some(e) if t.cleared.is_empty() => Err(e),
        _ => Ok(t.cleared),
    }
}

/// Removes `name` in `at` when `keep` says what it is now (looked up again, without
/// following it) must go; returns what it was. The entry is unlinked, never opened:
/// a FIFO or a device cannot block this, and a symlink goes without its target.
fn remove(at: BorrowedFd<'_>, name: &OsStr, keep: Keep) -> std::io::Result<Option<Kind>> {
    let st = match rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let kind = Kind::of_mode(st.st_mode);
    if !keep.removes(kind) {
        return Ok(None);
    }
    match rustix::fs::unlinkat(at, name, AtFlags::empty()) {
        Ok(()) => Ok(Some(kind)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
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
