//! Folders below a trusted root, made, listed and moved into without following a
//! symlink that someone planted where a folder should be.

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::{open_beneath, open_root, parts, split, Kind, Refused};

/// What [`make_dirs`] does with a symlink where a folder should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planted {
    /// Fails with [`Refused::Symlink`]: for folders whose content matters as found.
    Refuse,
    /// Removes the link (never what it points to) and makes a real folder in its
    /// place: for folders the runner owns, such as a script's data folder or `logs/`.
    Replace,
}

/// A folder [`make_dirs`] made or found.
#[derive(Debug)]
pub struct Made {
    /// The folder.
    pub path: PathBuf,
    /// Symlinks that stood where a folder of the path should be, removed
    /// ([`Planted::Replace`]).
    pub replaced: Vec<PathBuf>,
}

/// Makes `rel` and its missing parents below `root`, one folder at a time and never
/// through a symlink (see [`Planted`]). `root` is made when it is missing, and opened,
/// with no symlink followed anywhere on its path ([`make_dir`]): the roots are the
/// run's results folders, which the configuration made canonical.
pub fn make_dirs(root: &Path, rel: &Path, planted: Planted) -> Result<Made, Refused> {
    make_dirs_fd(root, rel, planted).map(|(made, _)| made)
}

/// [`make_dirs`], with the innermost folder held open (`O_PATH`): what is done in it
/// through this handle cannot be sent elsewhere by a link planted later.
fn make_dirs_fd(root: &Path, rel: &Path, planted: Planted) -> Result<(Made, OwnedFd), Refused> {
    let mut held = make_dir(root)?;
    let mut made = Made {
        path: root.to_path_buf(),
        replaced: Vec::new(),
    };
    for name in parts(rel)? {
        made.path.push(name);
        held = enter(held.as_fd(), name, planted, &mut made)?;
    }
    Ok((made, held))
}

/// Where an unlinked resolution of `path` starts: `/` for an absolute path, the
/// current folder for a relative one; and the names after it.
fn start_of(path: &Path) -> (&Path, &Path) {
    match path.strip_prefix("/") {
        Ok(rel) => (Path::new("/"), rel),
        Err(_) => (Path::new("."), path),
    }
}

/// Opens (`O_PATH`) the folder `path`, making it and its missing parents, with no
/// symlink followed anywhere: each folder is made, then opened with `O_NOFOLLOW`, so a
/// link at any name of the path is refused ([`Refused::Symlink`]), never followed.
///
/// For the run's results folders, whose paths the configuration made canonical (no
/// link in them when the run started): a link there now is one planted since.
pub fn make_dir(path: &Path) -> Result<OwnedFd, Refused> {
    let (start, rel) = start_of(path);
    let mut held = open_root(start)?;
    // Nearly always the folder is there already: one resolution of the whole path,
    // refusing a link at any name as the walk below does, instead of an open and a
    // close a name (a dozen system calls for each of a script's folders). Anything
    // else (a name missing, a link, a race) takes the walk, which makes and explains.
    let whole = OFlags::PATH | OFlags::DIRECTORY;
    if let Ok(fd) = open_beneath(held.as_fd(), rel, whole, Mode::empty()) {
        return Ok(fd);
    }
    let mut made = Made {
        path: match start == Path::new("/") {
            true => start.to_path_buf(),
            false => PathBuf::new(),
        },
        replaced: Vec::new(),
    };
    for name in parts(rel)? {
        made.path.push(name);
        held = enter(held.as_fd(), name, Planted::Refuse, &mut made)?;
    }
    Ok(held)
}

/// Opens (`O_PATH`) the folder `path`, which must exist, with no symlink followed
/// anywhere on its way (see [`make_dir`]).
pub fn open_dir(path: &Path) -> Result<OwnedFd, Refused> {
    let (start, rel) = start_of(path);
    let start_fd = open_root(start)?;
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    open_beneath(start_fd.as_fd(), rel, flags, Mode::empty()).map_err(|e| {
        // A link at the end gives ENOTDIR (`O_PATH | O_NOFOLLOW` opens the link
        // itself), one on the way ELOOP: either way, name the first link.
        match first_link(path) {
            Some(link) => Refused::Symlink(link),
            None => super::explain(start_fd.as_fd(), start, rel, e),
        }
    })
}

/// The first name of `path` that is a symlink, if any.
fn first_link(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
        .map(Path::to_path_buf)
}

/// Removes the folder `path` and everything in it, through handles: no link on its
/// path or inside it is followed, so a link planted meanwhile cannot turn the removal
/// on another folder.
pub fn remove_tree(path: &Path) -> Result<(), Refused> {
    let (dir, name) = split(path)?;
    let parent = open_dir(dir)?;
    remove_at(parent.as_fd(), name, 0)
}

/// The most entries of one folder [`remove_tree`] removes; a folder with more is left.
const REMOVE_LIMIT: usize = 1_000_000;

/// Removes the file (or link, never what it points to) `path`, its folder reached as
/// [`open_dir`] reaches it.
pub fn remove_file(path: &Path) -> Result<(), Refused> {
    let (dir, name) = split(path)?;
    let parent = open_dir(dir)?;
    rustix::fs::unlinkat(&parent, name, AtFlags::empty()).map_err(|e| Refused::Io(e.into()))
}

fn remove_at(at: BorrowedFd<'_>, name: &std::ffi::OsStr, depth: usize) -> Result<(), Refused> {
    // Deeper than any results folder: what keeps nesting is left, not recursed into.
    if depth > 64 {
        return Err(Refused::Io(Errno::LOOP.into()));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(at, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        // Not a folder (a link among them): removed as a name, never followed.
        Err(Errno::NOTDIR | Errno::LOOP) => {
            return rustix::fs::unlinkat(at, name, AtFlags::empty())
                .map_err(|e| Refused::Io(e.into()))
        }
        Err(e) => return Err(Refused::Io(e.into())),
    };
    let held = rustix::io::dup(&fd).map_err(|e| Refused::Io(e.into()))?;
    let mut names = Vec::new();
    read_entries(fd, REMOVE_LIMIT, |_, name, kind| {
        names.push((name, kind));
        true
    })?;
    for (child, kind) in names {
        match kind {
            Kind::Directory => remove_at(held.as_fd(), &child, depth + 1)?,
            _ => rustix::fs::unlinkat(&held, &child, AtFlags::empty())
                .map_err(|e| Refused::Io(e.into()))?,
        }
    }
    rustix::fs::unlinkat(at, name, AtFlags::REMOVEDIR).map_err(|e| Refused::Io(e.into()))
}

/// Opens the folder `name` in `at`, making it when it is missing.
fn enter(
    at: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    planted: Planted,
    made: &mut Made,
) -> Result<OwnedFd, Refused> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Each turn changes something (made it, removed a link); a few turns are enough
    // unless someone keeps changing the folder meanwhile.
    for _ in 0..4 {
        match rustix::fs::openat(at, name, flags, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => match rustix::fs::mkdirat(at, name, Mode::from(0o777)) {
                Ok(()) | Err(Errno::EXIST) => continue,
                Err(e) => return Err(Refused::Io(e.into())),
            },
            Err(Errno::NOTDIR | Errno::LOOP) => {
                let st = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(std::io::Error::from)?;
                match (Kind::of_mode(st.st_mode), planted) {
                    (Kind::Directory, _) => continue,
                    (Kind::Symlink, Planted::Replace) => {
                        match rustix::fs::unlinkat(at, name, AtFlags::empty()) {
                            Ok(()) | Err(Errno::NOENT) => {}
                            Err(e) => return Err(Refused::Io(e.into())),
                        }
                        made.replaced.push(made.path.clone());
                    }
                    (Kind::Symlink, Planted::Refuse) => {
                        return Err(Refused::Symlink(made.path.clone()))
                    }
                    (kind, _) => {
                        return Err(Refused::NotAFolder {
                            path: made.path.clone(),
                            kind,
                        })
                    }
                }
            }
            Err(e) => return Err(Refused::Io(e.into())),
        }
    }
    Err(Refused::Io(std::io::Error::other(format!(
        "{} kept changing while it was made",
        made.path.display()
    ))))
}

/// The names in the folder `rel` below `root` (no symlink followed on the way or at
/// the end), sorted, at most `limit`; with each, its kind as the folder read gives it.
pub fn list_dir(root: &Path, rel: &Path, limit: usize) -> Result<Vec<(OsString, Kind)>, Refused> {
    let root_fd = open_root(root)?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
    let fd = open_beneath(root_fd.as_fd(), rel, flags, Mode::empty())
        .map_err(|e| super::explain(root_fd.as_fd(), root, rel, e))?;
    let mut out = Vec::new();
    read_entries(fd, limit, |_, name, kind| {
        out.push((name, kind));
        true
    })?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Calls `each` with the folder and every entry of the folder `fd` (not `.` and `..`)
/// until it says stop or `limit` entries went by. Kinds the folder read does not give
/// are looked up without following links.
pub(super) fn read_entries(
    fd: OwnedFd,
    limit: usize,
    mut each: impl FnMut(BorrowedFd<'_>, OsString, Kind) -> bool,
) -> std::io::Result<()> {
    let mut dir = rustix::fs::Dir::new(fd)?;
    let mut seen = 0;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if seen >= limit {
            break;
        }
        seen += 1;
        let name = std::ffi::OsStr::from_bytes(name).to_os_string();
        let at = dir.fd()?;
        let mut kind = Kind::of(entry.file_type());
        if kind == Kind::Unknown {
            kind = rustix::fs::statat(at, &name, AtFlags::SYMLINK_NOFOLLOW)
                .map_or(Kind::Unknown, |st| Kind::of_mode(st.st_mode));
        }
        if !each(at, name, kind) {
            break;
        }
    }
    Ok(())
}

/// Moves `from` (below `from_root`) to `to` (below `to_root`), making `to`'s missing
/// parents; no symlink is followed on either side (a planted one on `to`'s side is
/// replaced, see [`Planted::Replace`]). `EXDEV` comes back as it is, for the caller
/// to copy instead.
pub fn rename(from_root: &Path, from: &Path, to_root: &Path, to: &Path) -> Result<(), Refused> {
    let (from_dir, from_name) = split(from)?;
    let (to_dir, to_name) = split(to)?;
    let from_root_fd = open_dir(from_root)?;
    let folder = OFlags::PATH | OFlags::DIRECTORY;
    let source = open_beneath(from_root_fd.as_fd(), from_dir, folder, Mode::empty())
        .map_err(|e| super::explain(from_root_fd.as_fd(), from_root, from_dir, e))?;
    let (_, target) = make_dirs_fd(to_root, to_dir, Planted::Replace)?;
    rustix::fs::renameat(&source, from_name, &target, to_name).map_err(|e| Refused::Io(e.into()))
}
