//! Who a sandboxed script is on the host: never root. A runner started as root takes
//! an unused uid for the run (and the gid of the same number), from the range systemd
//! keeps for dynamic users, and every sandboxed process drops to it before the
//! script's first line: no supplementary groups, no capability in any set,
//! `no_new_privs`. The kernel's checks of the uid (sysctls, root-only files, setuid
//! plants, signals to root's processes) then refuse what an empty capability set alone
//! did not. An ordinary user's runner runs its scripts as that user.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The sandbox user and the switch to it live with the code that applies the
/// confinement (`crates/confine`, `user.rs`).
pub use jax_runner_confine::user::{become_user, drop_capabilities, SandboxUser};

/// systemd's range for `DynamicUser=` (61184–65519): no distribution hands these out
/// to people or packages.
pub const FIRST_UID: u32 = 61184;
pub const LAST_UID: u32 = 65519;

/// The host identity of a run's sandboxed scripts.
#[derive(Debug)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// The runner is root and scripts switch to `uid`/`gid` (an ordinary user's runner
    /// runs them as itself).
    pub switched: bool,
    /// Held for the run, so a concurrent run never takes the same uid.
    _lock: Option<File>,
}

impl Identity {
    /// The runner's own identity: what an ordinary user's scripts run as.
    pub fn current() -> Identity {
        Identity {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            switched: false,
            _lock: None,
        }
    }

    /// The run's identity: the runner's own for an ordinary user; for root, a free uid
    /// of the dynamic range, chosen from a hash of the tree so that runs of the same
    /// tree take the same one (its compilation cache and data folders stay its own)
    /// and the next free one when that is taken.
    pub fn for_tree(tree: &Path) -> std::io::Result<Identity> {
        if !rustix::process::geteuid().is_root() {
            return Ok(Identity::current());
        }
        let in_use = uids_in_use();
        let taken = |uid: u32| in_use.contains(&uid) || known(uid);
        let (uid, lock) = pick_uid(hash_start(tree), &lock_dir()?, taken)?;
        Ok(Identity {
            uid,
            gid: uid,
            switched: true,
            _lock: Some(lock),
        })
    }

    /// The user scripts switch to, when the runner is root.
    pub fn switched_to(&self) -> Option<SandboxUser> {
        self.switched.then_some(SandboxUser {
            uid: self.uid,
            gid: self.gid,
        })
    }

    /// Where a script without a view of its own (nothing bridges a closed folder for
    /// it) cannot reach `path`: the first folder on the way, from `/`, that the
    /// switched-to user may not pass through, with its mode. `None` for a runner that
    /// does not switch, or where the way is open.
    pub fn closed_on_the_way(&self, path: &Path) -> Option<(PathBuf, u32)> {
        let user = self.switched_to()?;
        let mut way: Vec<&Path> = path.ancestors().skip(1).collect();
        way.reverse();
        way.into_iter().find_map(|dir| {
            let meta = std::fs::metadata(dir).ok()?;
            (!user.can_enter(&meta)).then(|| (dir.to_path_buf(), meta.mode() & 0o7777))
        })
    }

    /// Gives a folder the runner made for a script (its data folder, the compilation
    /// cache) to the sandbox user, without following a link planted in its place.
    pub fn own(&self, dir: &Path) -> std::io::Result<()> {
        if !self.switched {
            return Ok(());
        }
        use rustix::fs::{AtFlags, Gid, Uid, CWD};
        rustix::fs::chownat(
            CWD,
            dir,
            Some(Uid::from_raw(self.uid)),
            Some(Gid::from_raw(self.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
        Ok(())
    }
}

impl Identity {
    /// Gives a folder and everything in it to the sandbox user (the compilation cache
    /// of a tree, which an earlier run with another uid may have written), links
    /// included as links and never followed.
    pub fn own_all(&self, dir: &Path) -> std::io::Result<()> {
        if !self.switched {
            return Ok(());
        }
        for entry in walkdir::WalkDir::new(dir).follow_links(false) {
            let entry = entry.map_err(std::io::Error::other)?;
            let meta = entry.metadata().map_err(std::io::Error::other)?;
            if meta.uid() != self.uid || meta.gid() != self.gid {
                self.own(entry.path())?;
            }
        }
        Ok(())
    }
}

/// How many uids the dynamic range holds.
const SPAN: u32 = LAST_UID - FIRST_UID + 1;

/// Where in the range a tree's search starts: a hash of its path, so runs of the same
/// tree look at the same uids in the same order.
fn hash_start(tree: &Path) -> u32 {
    let digest = Sha256::digest(tree.as_os_str().as_encoded_bytes());
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]) % SPAN
}

/// The first uid from `start` on (wrapping round the range) that `taken` does not
/// name and whose lock in `locks` no one holds, with that lock now held.
fn pick_uid(start: u32, locks: &Path, taken: impl Fn(u32) -> bool) -> std::io::Result<(u32, File)> {
    for i in 0..SPAN {
        let uid = FIRST_UID + (start + i) % SPAN;
        if taken(uid) {
            continue;
        }
        if let Some(lock) = try_lock(&lock_path(locks, uid))? {
            return Ok((uid, lock));
        }
    }
    Err(std::io::Error::other(format!(
        "no free uid in {FIRST_UID}-{LAST_UID} for the sandbox"
    )))
}

fn lock_path(locks: &Path, uid: u32) -> PathBuf {
    locks.join(format!("uid-{uid}.lock"))
}

/// Whether the user and group databases name `uid` (as a user or a group).
fn known(uid: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    !matches!(User::from_uid(Uid::from_raw(uid)), Ok(None))
        || !matches!(Group::from_gid(Gid::from_raw(uid)), Ok(None))
}

/// Uids that own a running process (`/proc/PID` belongs to the process's uid).
fn uids_in_use() -> std::collections::HashSet<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.uid())
        .collect()
}

/// Root's folder of uid locks: `/run/jax-runner` (gone at reboot, as the uids' use is),
/// else the cache folder; made 0700 and refused when it is not root's own folder.
fn lock_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = match Path::new("/run").is_dir() {
        true => PathBuf::from("/run/jax-runner"),
        false => crate::paths::cache_dir().join("uid-locks"),
    };
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a folder only root can write",
            dir.display()
        )));
    }
    Ok(dir)
}

fn try_lock(path: &Path) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first folder the switched-to user cannot pass through is named with its
    /// mode; an open way, and a runner that does not switch, name none.
    #[test]
    fn the_first_closed_folder_on_the_way_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let (open, shut) = (tmp.path().join("open"), tmp.path().join("shut"));
        for (dir, mode) in [(&open, 0o755), (&shut, 0o700)] {
            std::fs::create_dir_all(dir.join("inner")).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let switched = Identity {
            uid: LAST_UID,
            gid: LAST_UID,
            switched: true,
            _lock: None,
        };
        let target = shut.join("inner").join("python");
        assert_eq!(switched.closed_on_the_way(&target), Some((shut, 0o700)));
        assert_eq!(
            switched.closed_on_the_way(&open.join("inner").join("x")),
            None
        );
        assert_eq!(Identity::current().closed_on_the_way(&target), None);
    }

    /// The uid at `start`, `n` places on, wrapping round the range.
    fn nth(start: u32, n: u32) -> u32 {
        FIRST_UID + (start + n) % SPAN
    }

    #[test]
    fn the_pick_is_the_hash_first_then_the_next_free_uid() {
        let locks = tempfile::tempdir().unwrap();
        let start = hash_start(Path::new("/some/tree"));
        assert_eq!(start, hash_start(Path::new("/some/tree")));
        let nobody = |_| false;
        let (a, lock_a) = pick_uid(start, locks.path(), nobody).unwrap();
        assert_eq!(a, nth(start, 0));
        // While the first run holds its uid, a second run of the same tree takes the next.
        let (b, lock_b) = pick_uid(start, locks.path(), nobody).unwrap();
        assert_eq!(b, nth(start, 1));
        drop((lock_a, lock_b));
        // Released, the same tree gets the same uid again.
        assert_eq!(pick_uid(start, locks.path(), nobody).unwrap().0, a);
        // A uid a process, a user or a group has is passed over.
        let taken = |uid| uid == nth(start, 0) || uid == nth(start, 1);
        assert_eq!(
            pick_uid(start, locks.path(), taken).unwrap().0,
            nth(start, 2)
        );
    }

    #[test]
    fn the_pick_wraps_round_the_range_and_fails_when_all_are_taken() {
        let locks = tempfile::tempdir().unwrap();
        let (uid, _lock) = pick_uid(SPAN - 1, locks.path(), |u| u == LAST_UID).unwrap();
        assert_eq!(uid, FIRST_UID);
        let err = pick_uid(0, locks.path(), |_| true).unwrap_err();
        assert!(err.to_string().contains("no free uid"), "{err}");
    }

    /// Whatever else runs on the machine: the pick depends on its inputs only. Twenty
    /// times over, with the hash's uid held by a "process" (the injected check) and the
    /// next one's lock held by another run, the same uid comes out.
    #[test]
    fn the_pick_is_the_same_whatever_else_holds_uids() {
        let locks = tempfile::tempdir().unwrap();
        let start = hash_start(Path::new("/a/tree/of/scripts"));
        let held = try_lock(&lock_path(locks.path(), nth(start, 1)))
            .unwrap()
            .unwrap();
        let process_has = |uid| uid == nth(start, 0);
        for _ in 0..20 {
            let (uid, lock) = pick_uid(start, locks.path(), process_has).unwrap();
            assert_eq!(uid, nth(start, 2));
            drop(lock);
        }
        drop(held);
    }

    /// The real wiring, with other runs holding uids or not: only what holds whatever
    /// else runs here.
    #[test]
    fn an_ordinary_user_keeps_itself_and_root_takes_a_free_dynamic_uid() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Identity::for_tree(tmp.path()).unwrap();
        if !a.switched {
            assert_eq!(a.uid, rustix::process::getuid().as_raw());
            return;
        }
        assert!((FIRST_UID..=LAST_UID).contains(&a.uid), "{a:?}");
        assert_eq!(a.gid, a.uid);
        assert!(!known(a.uid), "{a:?}");
        assert!(!uids_in_use().contains(&a.uid), "{a:?}");
        // Its lock is held: no other run can take it while this one lives.
        let path = lock_path(&lock_dir().unwrap(), a.uid);
        assert!(try_lock(&path).unwrap().is_none(), "{a:?}");
        let b = Identity::for_tree(tmp.path()).unwrap();
        assert_ne!(a.uid, b.uid);
    }
}
