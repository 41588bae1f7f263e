//! The runner's one door to paths a script could have touched (its telemetry, its data
//! folder, its logs, the results folder): nothing here follows a symlink below the
//! folder it starts from, blocks on what it opens (a FIFO, a device), or reads past a
//! stated limit. A script decides what it leaves behind, never how long the runner
//! waits for it or how much memory the runner spends on it; and in its data folder
//! only regular files and folders stay for the next step to read (see [`tidy`]).
//!
//! Paths are resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the
//! kernel has it (5.6 and later) and one component at a time with `O_NOFOLLOW`
//! elsewhere. The folder a read starts from is trusted as named: the runner chose it.
//! What the runner writes (files, folders, moves, removals) it reaches with no symlink
//! followed anywhere on the path, the folder it starts from included ([`make_dir`],
//! [`open_dir`]): the results folders' paths are canonical, so a link on them was
//! planted after the configuration checked them, and is refused.

mod dirs;
mod json;
mod resolve;
mod walk;

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;

#[cfg(test)]
use resolve::FORCE_COMPONENTS;
use resolve::{explain, open_beneath, parts};
#[cfg(test)]
use walk::tidy_within;

pub use dirs::{
    list_dir, make_dir, make_dirs, open_dir, remove_file, remove_tree, rename, Made, Planted,
};
pub use json::{check_json_in, read_json_in};
pub use walk::{
    clear_privilege_bits, list_files, relative_files, tidy, Keep, Listing, Tidied, COUNT_LIMIT,
    TIDY_LIMIT,
};

/// What a path turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    fn of(t: FileType) -> Kind {
        match t {
            FileType::RegularFile => Kind::Regular,
            FileType::Directory => Kind::Directory,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Unknown => Kind::Unknown,
        }
    }

    fn of_mode(mode: u32) -> Kind {
        Kind::of(FileType::from_raw_mode(mode))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Regular => "regular file",
            Kind::Directory => "directory",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDevice => "character device",
            Kind::BlockDevice => "block device",
            Kind::Unknown => "unknown file type",
        })
    }
}

/// A size for people: `512 bytes`, `16 MiB`, `1.5 GiB`.
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 || value.fract() == 0.0 {
            write!(f, "{value:.0} {}", UNITS[unit])
        } else {
            write!(f, "{value:.1} {}", UNITS[unit])
        }
    }
}

/// Why the runner did not read or make what a script left behind.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A FIFO, a device, a socket, a folder or a symlink where a file should be: never
    /// opened for reading, so it can neither block the runner nor feed it forever.
    #[error("not a regular file ({0})")]
    NotRegular(Kind),
    /// A file larger than the caller's limit (by its size, or by what reading found).
    #[error("larger than the {} the runner reads ({})", Bytes(*limit), Bytes(*size))]
    TooLarge { size: u64, limit: u64 },
    /// JSON whose values would cost more memory than the caller's budget.
    #[error("holds more values than the runner parses within {}", Bytes(*budget))]
    TooManyValues { budget: u64 },
    /// A symlink in a folder position: symlinks there are never followed.
    #[error("{} is a symlink, which the runner does not follow", .0.display())]
    Symlink(PathBuf),
    /// Something other than a folder where one is needed.
    #[error("{} is not a folder ({kind})", path.display())]
    NotAFolder { path: PathBuf, kind: Kind },
    /// A path that names its way out of the folder it must stay in (`..`, `/…`).
    #[error("{} leads out of {}", path.display(), root.display())]
    Outside { path: PathBuf, root: PathBuf },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Refused {
    /// True when there was nothing there at all: usually no problem, just absent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl From<Refused> for std::io::Error {
    fn from(refused: Refused) -> std::io::Error {
        match refused {
            Refused::Io(e) => e,
            other => std::io::Error::other(other),
        }
    }
}

/// A regular file, open for reading; its size as `fstat` gave it at opening.
#[derive(Debug)]
pub struct Regular {
    file: File,
    size: u64,
}

impl Regular {
    fn new(fd: OwnedFd) -> Result<Regular, Refused> {
        let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
        match Kind::of_mode(st.st_mode) {
            Kind::Regular => Ok(Regular {
                size: u64::try_from(st.st_size).unwrap_or(0),
                file: File::from(fd),
            }),
            other => Err(Refused::NotRegular(other)),
        }
    }

    /// Its size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The whole file, refused when it is (or grows) larger than `limit` bytes: the
    /// size is checked before reading, and the read stops one byte past the limit.
    pub fn read_to_end(mut self, limit: u64) -> Result<Vec<u8>, Refused> {
        if self.size > limit {
            return Err(Refused::TooLarge {
                size: self.size,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(self.size as usize);
        (&mut self.file).take(limit + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(Refused::TooLarge {
                size: self.size.max(bytes.len() as u64),
                limit,
            });
        }
        Ok(bytes)
    }

    /// At most the last `bytes` bytes.
    pub fn tail(mut self, bytes: u64) -> std::io::Result<Vec<u8>> {
        self.file
            .seek(SeekFrom::Start(self.size.saturating_sub(bytes)))?;
        let mut out = Vec::new();
        self.file.take(bytes).read_to_end(&mut out)?;
        Ok(out)
    }

    /// Streams at most `max` bytes into `out`; returns how many went.
    pub fn copy_to(mut self, out: &mut dyn Write, max: u64) -> std::io::Result<u64> {
        std::io::copy(&mut (&mut self.file).take(max), out)
    }
}

impl Read for Regular {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf)
    }
}

/// Flags of every read-only open: a FIFO or a device opens without waiting for a
/// writer or taking a controlling terminal, and is refused by `fstat` right after.
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Opens the regular file `rel` below the folder `root`, following no symlink on the
/// way or at the end.
pub fn open_file(root: &Path, rel: &Path) -> Result<Regular, Refused> {
    let dir = open_root(root)?;
    let fd = open_beneath(dir.as_fd(), rel, READ_FLAGS, Mode::empty())
        .map_err(|e| explain(dir.as_fd(), root, rel, e))?;
    Regular::new(fd)
}

/// [`open_file`] of the file `path` in its own folder: the folder is trusted, the
/// file itself is not (a symlink there is refused, not followed).
pub fn open_in(path: &Path) -> Result<Regular, Refused> {
    let (dir, name) = split(path)?;
    open_file(dir, Path::new(name))
}

/// Reads the regular file `rel` below `root`, at most `limit` bytes.
pub fn read_file(root: &Path, rel: &Path, limit: u64) -> Result<Vec<u8>, Refused> {
    open_file(root, rel)?.read_to_end(limit)
}

/// [`read_file`] of `path` in its own folder (see [`open_in`]).
pub fn read_in(path: &Path, limit: u64) -> Result<Vec<u8>, Refused> {
    open_in(path)?.read_to_end(limit)
}

/// Opens `path` for reading, following symlinks, but only when it is a regular file
/// and without blocking on anything else: for paths confined already, such as the
/// scripts discovery found inside the tree.
pub fn open_followed(path: &Path) -> Result<Regular, Refused> {
    let fd =
        rustix::fs::openat(CWD, path, READ_FLAGS, Mode::empty()).map_err(std::io::Error::from)?;
    Regular::new(fd)
}

/// Checks, without opening it for reading, that `rel` below `root` is a regular file
/// of at most `limit` bytes; returns its size.
pub fn probe(root: &Path, rel: &Path, limit: u64) -> Result<u64, Refused> {
    let dir = open_root(root)?;
    let fd = open_beneath(dir.as_fd(), rel, OFlags::PATH, Mode::empty())
        .map_err(|e| explain(dir.as_fd(), root, rel, e))?;
    let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    match Kind::of_mode(st.st_mode) {
        Kind::Regular => {
            let size = u64::try_from(st.st_size).unwrap_or(0);
            match size > limit {
                true => Err(Refused::TooLarge { size, limit }),
                false => Ok(size),
            }
        }
        other => Err(Refused::NotRegular(other)),
    }
}

/// Creates `path` anew for writing in its folder. Whatever was at that name goes
/// first, unfollowed: a planted symlink, FIFO or hard link can neither redirect the
/// write, block it, nor truncate another file. The folder is opened with no symlink
/// followed anywhere on its path ([`open_dir`]): the files made here are the run's
/// own, in its results folders, whose paths the configuration made canonical.
pub fn create_file(path: &Path) -> std::io::Result<File> {
    let (dir, name) = split(path)?;
    let dir = open_dir(dir)?;
    match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
    let fd = rustix::fs::openat(&dir, name, flags | OFlags::CLOEXEC, Mode::from(0o666))?;
    Ok(File::from(fd))
}

/// A path's folder and final name.
fn split(path: &Path) -> Result<(&Path, &OsStr), Refused> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            name,
        )),
        _ => Err(Refused::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        ))),
    }
}

/// The trusted folder a resolution starts from, as named (symlinks followed).
fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(CWD, root, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests;
