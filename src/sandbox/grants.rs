//! What a sandboxed script may read of the host, as one list. The view (bwrap, the
//! runner's own namespaces, the warm zygote's children) shows exactly these and hides
//! everything else behind empty folders; Landlock grants reads beneath exactly these
//! and nothing else. Both read this module, so the two layers cannot drift apart.
//!
//! A script reads: the host's programs and libraries ([`SYSTEM`]), the kernel's own
//! views ([`KERNEL`]), the few files of `/etc` that the C library, Python and jax
//! read ([`ETC`]), a handful of harmless devices ([`DEVICES`]); and, per attempt,
//! its interpreter's installation, its own folder, the telemetry shim, its data
//! folder, scratch and compilation cache (the caller adds those). No user's file, no
//! `/opt`, `/srv`, `/home`, `/var`, `/run`, no other tree, no `.env` beside the tree.

use std::path::{Path, PathBuf};

/// Folders read whole: the host's programs and shared libraries, wherever the
/// distribution keeps them (Nix and Guix keep theirs in a store).
pub const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/nix/store",
    "/gnu/store",
];

/// The kernel's views: processes and their own files (a fresh `/proc` under a view),
/// the machine's CPUs and cgroup limits that XLA sizes its thread pools by (`/sys`),
/// and `/dev` (a fresh one under bwrap; [`DEVICES`] is all Landlock opens there).
pub const KERNEL: &[&str] = &["/proc", "/sys", "/dev"];

/// The entries of `/etc` a script reads, each for a named reader: the dynamic linker
/// (`ld.so.*`), time zones (`localtime`, `timezone`), the C library's user, group
/// and host look-ups (`passwd`, `group`, `nsswitch.conf`, `host.conf`, `hosts`,
/// `gai.conf`; password hashes live in `shadow`, which is not here), `platform` and
/// `distro` (`os-release`, `lsb-release`, `debian_version`), the commands Debian
/// names through `alternatives`, OpenSSL's configuration and certificates (`ssl`,
/// `pki`, `ca-certificates`, `crypto-policies`), fontconfig for matplotlib (`fonts`),
/// `mimetypes` (`mime.types`) and the C library's locale aliases (`locale.alias`).
pub const ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/gai.conf",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/crypto-policies",
    "/etc/fonts",
    "/etc/mime.types",
    "/etc/locale.alias",
];

/// Devices a script reads and writes: the sinks and sources of bytes every program
/// takes for granted. A GPU run adds the NVIDIA nodes.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What a GPU attempt also writes, in place (never making or removing a file): the
/// CUDA driver's `cuInit` names its threads through `/proc/<pid>/task/<tid>/comm`
/// and fails with `CUDA_ERROR_OPERATING_SYSTEM` (304) when it cannot, so jax loses
/// the GPU. Landlock binds a rule to a folder's inode and each thread's folder is
/// made after the rules, so the grant is on `/proc` itself. What else a write there
/// could reach stays closed by the other layers: the script's user owns none of the
/// host's processes (root's runner switches to a user of its own), a fresh `/proc`
/// keeps its knobs (`/proc/sys`, `sysrq-trigger`) read-only, and the files of another
/// process that matter (`mem`, `environ`) pass the ptrace check, which Landlock holds
/// to the script's own processes.
pub const GPU_WRITES_IN_PLACE: &[&str] = &["/proc"];

/// The host's top-level folders a view keeps as they are (read-only): the granted
/// folders that sit directly under `/`. Every other top-level folder is hidden
/// behind an empty one, and what is granted inside it (`/etc`'s files, a store, an
/// interpreter under `/opt` or `$HOME`) is bound back.
pub fn kept_at_top() -> impl Iterator<Item = &'static str> {
    SYSTEM
        .iter()
        .chain(KERNEL)
        .copied()
        .filter(|p| Path::new(p).parent() == Some(Path::new("/")))
}

/// Every path of the host a script reads, whatever else its attempt adds: the
/// system, the kernel's views and `/etc`'s granted entries (devices apart: they are
/// granted as devices).
pub fn host_reads() -> Vec<PathBuf> {
    SYSTEM
        .iter()
        .chain(KERNEL.iter().filter(|k| **k != "/dev"))
        .chain(ETC)
        .map(PathBuf::from)
        .collect()
}

/// The folders and files directly under `root` a view hides: every entry but the
/// kept ones and the scratch (`/tmp`, which gets a fresh tmpfs of its own). Links
/// are left alone: what they lead to is hidden or granted in its own right.
pub fn hidden_at_top(root: &Path, scratch: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let kept: Vec<&Path> = kept_at_top().map(Path::new).collect();
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    let Ok(entries) = std::fs::read_dir(root) else {
        return (dirs, files);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if kept.contains(&path.as_path()) || scratch.contains(&path) {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => dirs.push(path),
            Ok(t) if t.is_file() => files.push(path),
            _ => {}
        }
    }
    dirs.sort();
    files.sort();
    (dirs, files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_granted_top_level_folders_are_kept() {
        let kept: Vec<&str> = kept_at_top().collect();
        for k in ["/usr", "/bin", "/lib", "/proc", "/sys", "/dev"] {
            assert!(kept.contains(&k), "{k}");
        }
        for never in [
            "/etc", "/opt", "/home", "/root", "/var", "/run", "/srv", "/nix",
        ] {
            assert!(!kept.contains(&never), "{never} is kept whole");
        }
    }

    #[test]
    fn no_secret_of_etc_is_granted() {
        for secret in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh"] {
            assert!(!ETC.contains(&secret), "{secret}");
            assert!(!host_reads()
                .iter()
                .any(|p| Path::new(secret).starts_with(p)));
        }
    }

    #[test]
    fn everything_at_the_top_but_the_kept_and_the_scratch_is_hidden() {
        let tmp = tempfile::tempdir().unwrap();
        for d in ["usr", "opt", "srv", "tmp"] {
            std::fs::create_dir(tmp.path().join(d)).unwrap();
        }
        std::fs::write(tmp.path().join("swapfile"), "x").unwrap();
        std::os::unix::fs::symlink("usr", tmp.path().join("bin")).unwrap();
        // Not "/": nothing is kept by name, so only the scratch stays.
        let (dirs, files) = hidden_at_top(tmp.path(), &[tmp.path().join("tmp")]);
        let names = |v: &[PathBuf]| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&dirs), ["opt", "srv", "usr"]);
        assert_eq!(names(&files), ["swapfile"]);
        // At the real root, the system folders stay.
        let (dirs, _) = hidden_at_top(Path::new("/"), &["/tmp".into()]);
        assert!(!dirs.contains(&PathBuf::from("/usr")));
        assert!(!dirs.contains(&PathBuf::from("/tmp")));
        if Path::new("/etc").is_dir() {
            assert!(dirs.contains(&PathBuf::from("/etc")));
        }
    }
}
