//! The runner's one door to paths a script could have touched (its telemetry, its data
//! folder, its logs, the results folder): nothing here follows a symlink below the
//! folder it starts from, blocks on what it opens (a FIFO, a device), or reads past a
//! stated limit. A script decides what it leaves behind, never how long the runner
//! waits for it or how much memory the runner spends on it.
//!
//! Paths are resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the
//! kernel has it (5.6 and later) and one component at a time with `O_NOFOLLOW`
//! elsewhere. The folder a call starts from is trusted as named: the runner chose it.

mod dirs;
mod walk;

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

pub use dirs::{list_dir, make_dirs, rename, Made, Planted};
pub use walk::{clear_privilege_bits, list_files, relative_files};

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

/// Creates `path` anew for writing in its (trusted) folder. Whatever was at that name
/// goes first, unfollowed: a planted symlink, FIFO or hard link can neither redirect
/// the write, block it, nor truncate another file.
pub fn create_file(path: &Path) -> std::io::Result<File> {
    let (dir, name) = split(path).map_err(|e| match e {
        Refused::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    })?;
    let dir = open_root(dir)?;
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

/// The plain names `rel` is made of; a `..`, a root or a prefix would lead out.
fn parts(rel: &Path) -> std::io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(std::io::Error::from_raw_os_error(libc::EXDEV)),
        })
        .collect()
}

/// Set once `openat2` answered `ENOSYS` (a kernel before 5.6): from then on every
/// path is resolved one component at a time.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
thread_local! {
    /// Tests run the fallback on a kernel that has `openat2`.
    static FORCE_COMPONENTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn use_openat2() -> bool {
    #[cfg(test)]
    if FORCE_COMPONENTS.with(|f| f.get()) {
        return false;
    }
    !NO_OPENAT2.load(Ordering::Relaxed)
}

/// Opens `rel` below `root` with `flags`, following no symlink anywhere.
fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> std::io::Result<OwnedFd> {
    let names = parts(rel)?;
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if use_openat2() {
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let path: PathBuf = names.iter().collect();
        let path = if names.is_empty() {
            Path::new(".")
        } else {
            &path
        };
        // EAGAIN: a rename somewhere raced the lookup; the kernel asks to try again.
        for _ in 0..16 {
            match rustix::fs::openat2(root, path, flags, mode, how) {
                Err(Errno::AGAIN) => continue,
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                other => return Ok(other?),
            }
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            return Err(Errno::AGAIN.into());
        }
    }
    open_by_components(root, &names, flags, mode)
}

/// The same as `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, one folder at
/// a time with `O_NOFOLLOW`: a symlink anywhere gives `ELOOP`, as there.
fn open_by_components(
    root: BorrowedFd<'_>,
    names: &[&OsStr],
    flags: OFlags,
    mode: Mode,
) -> std::io::Result<OwnedFd> {
    let Some((last, folders)) = names.split_last() else {
        return Ok(rustix::fs::openat(root, ".", flags, mode)?);
    };
    let mut held: Option<OwnedFd> = None;
    for name in folders {
        let at = held.as_ref().map_or(root, |f| f.as_fd());
        let folder = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(at, *name, folder, Mode::empty()) {
            Ok(fd) => held = Some(fd),
            // `O_PATH | O_NOFOLLOW` opens a symlink itself, which `O_DIRECTORY` refuses.
            Err(Errno::NOTDIR) if is_symlink(at, name) => return Err(Errno::LOOP.into()),
            Err(e) => return Err(e.into()),
        }
    }
    let at = held.as_ref().map_or(root, |f| f.as_fd());
    Ok(rustix::fs::openat(at, *last, flags, mode)?)
}

fn is_symlink(at: BorrowedFd<'_>, name: &OsStr) -> bool {
    rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| Kind::of_mode(st.st_mode) == Kind::Symlink)
}

/// What a failed resolution of `rel` below `root` means: a symlink at the end is a
/// file of the wrong kind, one on the way a refused folder, `EXDEV` a way out.
fn explain(dir: BorrowedFd<'_>, root: &Path, rel: &Path, e: std::io::Error) -> Refused {
    match e.raw_os_error() {
        Some(libc::ELOOP) => {
            let names = parts(rel).unwrap_or_default();
            let mut prefix = PathBuf::new();
            for (i, name) in names.iter().enumerate() {
                prefix.push(name);
                if rustix::fs::statat(dir, &prefix, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| Kind::of_mode(st.st_mode) == Kind::Symlink)
                {
                    return match i + 1 == names.len() {
                        true => Refused::NotRegular(Kind::Symlink),
                        false => Refused::Symlink(root.join(&prefix)),
                    };
                }
            }
            Refused::Io(e)
        }
        // A socket (or a device with no driver) cannot be opened at all: say what it is.
        Some(libc::ENXIO) => open_beneath(dir, rel, OFlags::PATH, Mode::empty())
            .and_then(|fd| Ok(rustix::fs::fstat(fd)?))
            .map_or(Refused::Io(e), |st| {
                Refused::NotRegular(Kind::of_mode(st.st_mode))
            }),
        Some(libc::EXDEV) => Refused::Outside {
            path: rel.to_path_buf(),
            root: root.to_path_buf(),
        },
        _ => Refused::Io(e),
    }
}

#[cfg(test)]
mod tests;
