//! Resolving a path below a folder without following any symlink: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or one component at a time with
//! `O_NOFOLLOW` on kernels before 5.6; and what a refusal means, in words.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{Kind, Refused};

/// The plain names `rel` is made of; a `..`, a root or a prefix would lead out.
pub(super) fn parts(rel: &Path) -> std::io::Result<Vec<&OsStr>> {
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
    pub(super) static FORCE_COMPONENTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn use_openat2() -> bool {
    #[cfg(test)]
    if FORCE_COMPONENTS.with(|f| f.get()) {
        return false;
    }
    !NO_OPENAT2.load(Ordering::Relaxed)
}

/// Opens `rel` below `root` with `flags`, following no symlink anywhere.
pub(super) fn open_beneath(
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
pub(super) fn explain(dir: BorrowedFd<'_>, root: &Path, rel: &Path, e: std::io::Error) -> Refused {
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
