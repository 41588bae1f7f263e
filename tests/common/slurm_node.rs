//! The test cluster's node as a test wants it (`slurm.rs`): its configuration, and
//! what its daemons' own mount namespace holds (a user it knows, a folder it cannot
//! see).

use std::fs;
use std::path::Path;

use super::slurm::NODE;

/// How the test cluster's node differs from a plain one. The daemons (and so every
/// job) run in a mount namespace of their own.
#[derive(Debug, Default, Clone, Copy)]
pub struct Node<'a> {
    /// An empty tmpfs there: a node that does not share that folder.
    pub hidden: Option<&'a Path>,
    /// A user (uid, gid) its `/etc/passwd` and `/etc/group` name, as a cluster's
    /// nodes know its users.
    pub user: Option<(u32, u32)>,
    /// One `gpu` GRES on the node whose device is `/dev/null` (Slurm wants a device
    /// file): a GPU job is scheduled there, and jax finds no GPU.
    pub fake_gpu: bool,
}

impl Node<'_> {
    /// The shell script each daemon execs through, in a mount namespace of its own:
    /// the node's `/etc/passwd` and `/etc/group` (copies in `dir`), its hidden folder.
    pub fn setup(&self, dir: &Path) -> String {
        let mut setup = String::from("set -e\n");
        if let Some((uid, gid)) = self.user {
            for (file, line) in [
                (
                    "passwd",
                    format!("jrtest:x:{uid}:{gid}::/nonexistent:/bin/sh\n"),
                ),
                ("group", format!("jrtest:x:{gid}:\n")),
            ] {
                let copy = dir.join(file);
                let known = fs::read_to_string(format!("/etc/{file}")).unwrap_or_default();
                fs::write(&copy, known + &line).unwrap();
                setup += &format!("mount --bind '{}' /etc/{file}\n", copy.display());
            }
        }
        if let Some(dir) = self.hidden {
            setup += &format!("mount -t tmpfs tmpfs '{}'\n", dir.display());
        }
        setup += "exec \"$@\"\n";
        setup
    }
}

/// The cluster's slurm.conf (tests/common/slurm.conf filled in), every path in `dir`.
pub fn slurm_conf(dir: &Path, fake_gpu: bool) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.trim().split(' ').next());
    let kib: u64 = kib.and_then(|k| k.parse().ok()).unwrap_or(2 << 20);
    include_str!("slurm.conf")
        .replace("@DIR@", &dir.display().to_string())
        .replace("@NODE@", NODE)
        .replace("@CPUS@", &cpus.to_string())
        // Below what slurmd finds, or it drains the node for "Low RealMemory".
        .replace("@MEMORY@", &(kib / 1024 * 9 / 10).to_string())
        .replace("@GRES@", if fake_gpu { "Gres=gpu:1" } else { "" })
        .replace("@GRESTYPES@", if fake_gpu { "GresTypes=gpu" } else { "" })
}
