//! What a sandboxed script holds in its scratch (`/tmp`, `/dev/shm`, `$HOME`), so that
//! `--memory-limit` and the recorded peak count it beside the tree's resident memory.
//! A file in a tmpfs is memory no process maps: RSS alone would let a script park
//! gigabytes there under a limit of a few hundred megabytes.
//!
//! With a view of its own the scratch is a set of tmpfs mounts in the script's mount
//! namespace, read by `statfs` through `/proc/<pid>/root` of a process inside it (root
//! may; an ordinary user owns the sandbox's user namespace, which grants the same).
//! Without one it is the attempt's private folder on the host, whose files are walked,
//! with a bound and less often.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `statfs`'s magic number for a tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// The private folder is walked every this many samples (100 ms each).
const WALK_EVERY: u32 = 5;
/// Entries looked at in one walk of the private folder, so a script cannot make the
/// walk itself expensive.
const WALK_MAX: usize = 20_000;

/// Where an attempt's scratch is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Tmpfs mounts at these paths inside the script's view. Their pages are charged to
    /// the memory cgroup of whoever writes them.
    Mounts(Vec<PathBuf>),
    /// The attempt's private folder on the host (`TMPDIR`, `$HOME`), a sandbox without
    /// a view of its own. Written files are page cache a cgroup may write back and
    /// drop, so only the watchdog holds them to the limit.
    Folder(PathBuf),
}

impl Place {
    /// Whether what the scratch holds is charged to the attempt's memory cgroup, so
    /// the kernel already counts it against the limit.
    pub fn charged_to_cgroup(&self) -> bool {
        matches!(self, Place::Mounts(_))
    }
}

/// One sample of an attempt's memory: its tree's resident memory and its scratch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub rss: u64,
    pub scratch: u64,
}

impl Held {
    pub fn total(&self) -> u64 {
        self.rss.saturating_add(self.scratch)
    }
}

/// Measures an attempt's scratch, sample after sample.
#[derive(Debug)]
pub struct ScratchGauge {
    place: Place,
    samples: u32,
    last: u64,
    /// The runner's own mount namespace: a process there is not inside the sandbox.
    own_ns: Option<PathBuf>,
}

impl ScratchGauge {
    pub fn new(place: Place) -> ScratchGauge {
        ScratchGauge {
            place,
            samples: 0,
            last: 0,
            own_ns: std::fs::read_link("/proc/self/ns/mnt").ok(),
        }
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The bytes the scratch holds now; `tree` is the script's process tree, each
    /// process's folder in `/proc` given by `dir` (a live thread's, where the main
    /// thread alone has exited and the process's own reads as a zombie's). The private
    /// folder is walked on every [`WALK_EVERY`]th call, the last figure kept in
    /// between.
    pub fn measure(&mut self, tree: &[u32], dir: impl Fn(u32) -> String) -> u64 {
        self.samples += 1;
        match &self.place {
            Place::Mounts(paths) => {
                if let Some(used) = self.inside(tree, dir).map(|d| mounts_used(&d, paths)) {
                    self.last = used;
                }
            }
            Place::Folder(dir) => {
                if self.samples % WALK_EVERY == 1 {
                    self.last = folder_used(dir);
                }
            }
        }
        self.last
    }

    /// The `/proc` folder of a process of the tree inside the script's mount
    /// namespace (bwrap's outer process stays in the runner's: through it `/tmp` would
    /// be the host's).
    fn inside(&self, tree: &[u32], dir: impl Fn(u32) -> String) -> Option<String> {
        let own = self.own_ns.as_ref()?;
        tree.iter()
            .rev()
            .map(|pid| dir(*pid))
            .find(|d| std::fs::read_link(format!("{d}/ns/mnt")).is_ok_and(|ns| &ns != own))
    }
}

/// The bytes used in the tmpfs mounts at `paths`, seen from the root of the process
/// whose `/proc` folder is `dir`. A path that is not a tmpfs there counts nothing.
// `statfs`'s field types differ between architectures: the casts are no-ops only here.
#[allow(clippy::unnecessary_cast)]
fn mounts_used(dir: &str, paths: &[PathBuf]) -> u64 {
    let root = PathBuf::from(format!("{dir}/root"));
    paths
        .iter()
        .filter_map(|p| rustix::fs::statfs(root.join(p.strip_prefix("/").unwrap_or(p))).ok())
        .filter(|s| s.f_type as i64 == TMPFS_MAGIC)
        .map(|s| {
            let blocks = (s.f_blocks as u64).saturating_sub(s.f_bfree as u64);
            blocks.saturating_mul(s.f_bsize as u64)
        })
        .sum()
}

/// The bytes the files under `dir` take (allocated blocks, each file once however
/// many links it has), links never followed, at most [`WALK_MAX`] entries.
fn folder_used(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut todo = vec![dir.to_path_buf()];
    let mut entries = 0usize;
    while let Some(d) = todo.pop() {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            entries += 1;
            if entries > WALK_MAX {
                return total;
            }
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if meta.is_dir() {
                todo.push(e.path());
            }
            if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_folder_counts_its_files_once_each() {
        let tmp = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/target")).unwrap();
        let sub = tmp.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("f"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(sub.join("f"), tmp.path().join("g")).unwrap();
        std::os::unix::fs::symlink("/usr", tmp.path().join("l")).unwrap();
        let used = folder_used(tmp.path());
        assert!((1 << 20..2 << 20).contains(&used), "{used}");
        let mut g = ScratchGauge::new(Place::Folder(tmp.path().to_path_buf()));
        assert_eq!(g.measure(&[], |p| format!("/proc/{p}")), used);
        assert!(!g.place().charged_to_cgroup());
    }

    #[test]
    fn mounts_count_only_from_inside_another_mount_namespace() {
        // The runner itself is in its own namespace: nothing is read through it, so a
        // host `/tmp` never counts as the script's.
        let mut g = ScratchGauge::new(Place::Mounts(vec!["/tmp".into()]));
        assert_eq!(
            g.measure(&[std::process::id()], |p| format!("/proc/{p}")),
            0
        );
    }
}
