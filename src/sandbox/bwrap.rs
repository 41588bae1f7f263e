//! The bubblewrap sandbox: each script sees a read-only filesystem with only its data
//! folder, a private `/tmp` and the compilation cache writable, an empty `$HOME`, no
//! network, its own PID namespace, and dies with the runner.
//!
//! An ordinary user's bwrap gives the script a user namespace of its own, mapped to
//! that user. A root runner's bwrap runs without one (a user namespace made by root
//! maps its users to the host's root) and hands the script to `jax-runner
//! __sandbox-exec`, which drops it to the run's unprivileged uid before the script
//! starts; either way that helper sets `no_new_privs`, installs the seccomp filter
//! and closes every descriptor above 2.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::view::{steps, MountStep, Mounts};
use crate::error::SandboxError;

/// A working bubblewrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bwrap {
    pub path: PathBuf,
    pub version: String,
    /// bwrap gives the script a user namespace of its own (an ordinary user's run).
    pub userns: bool,
    /// bwrap accepts `--cap-drop ALL` here (always as root).
    pub cap_drop: bool,
    /// The runner is root: bwrap runs without a user namespace and the script drops
    /// to the sandbox uid in `__sandbox-exec`.
    pub privileged: bool,
    /// This bwrap knows `--disable-userns` (0.8+).
    pub disable_userns: bool,
    /// This bwrap knows `--size` (bounds a `--tmpfs`, 0.8+); without it a scratch
    /// tmpfs is unbounded and the memory watchdog alone counts what it holds.
    pub tmpfs_size: bool,
}

/// The command that installs bubblewrap, for error messages.
pub const INSTALL_HINT: &str =
    "apt-get install bubblewrap   (Debian/Ubuntu; dnf install bubblewrap on Fedora/RHEL)";

/// The hidden first argument of `jax-runner` that makes it the sandbox's last step
/// before the script (see [`super::helper`]).
pub const EXEC_ARG: &str = "__sandbox-exec";

/// The confinement library's name (the start of its file's): the `jax-runner-confine`
/// crate's cdylib, which build.rs builds and the binary carries, and the warm zygote
/// loads, in every sandbox mode, for its keeper of frame-stack chunks (`arena.rs`)
/// and, sandboxed, to confine each script (`ffi.rs`).
pub const LIBRARY: &str = "libjax_runner_confine";

/// The library's bytes, as build.rs built them.
static LIBRARY_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libjax_runner_confine.so"));

/// The confinement library, written once into the user's cache folder (under a name
/// that holds a hash of its bytes, so binaries of other versions keep theirs), or why
/// it could not be.
pub fn library() -> Result<PathBuf, String> {
    let dir = crate::paths::cache_dir();
    install_library(&dir).map_err(|e| {
        format!(
            "failed to write the jax-runner confinement library `{LIBRARY}` into {}: {e} \
             ({})",
            dir.display(),
            crate::paths::CACHE_DIR_FIX
        )
    })
}

/// [`library`], written into `dir`.
pub fn install_library(dir: &Path) -> std::io::Result<PathBuf> {
    crate::paths::install_by_hash(dir, LIBRARY, "so", LIBRARY_BYTES)
}

/// `jax-runner` itself (its real path), which finishes each cold start inside bwrap
/// as `__sandbox-exec`.
pub fn helper() -> PathBuf {
    std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

/// Finds `bwrap` on PATH and proves it can build the namespaces a run needs.
pub fn detect() -> Result<Bwrap, SandboxError> {
    // The process's PATH: the runner itself starts bwrap, as this process.
    let path = crate::paths::find_on_path("bwrap", std::env::var_os("PATH").as_deref())
        .ok_or(SandboxError::NotInstalled)?;
    detect_at(path)
}

/// [`detect`] with the bwrap at `path`.
fn detect_at(path: PathBuf) -> Result<Bwrap, SandboxError> {
    // Its version, its options and its first namespace probe run side by side: one
    // after another they held every sandboxed run's start 6 to 7 ms before the zygote
    // could start (measured: the three spawns take 1 to 4 ms each).
    let text_of = |arg: &str| {
        Command::new(&path)
            .arg(arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
    };
    let version = text_of("--version");
    let help = text_of("--help");
    let root = rustix::process::geteuid().is_root();
    let probe = |userns: bool, cap_drop: bool| {
        let mut cmd = Command::new(&path);
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
            .args([
                "--unshare-net",
                "--unshare-pid",
                "--unshare-ipc",
                "--die-with-parent",
            ]);
        if cap_drop {
            cmd.args(["--cap-drop", "ALL"]);
        }
        if userns {
            cmd.args(identity());
        }
        cmd.args(["--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(SandboxError::Start)
    };
    // Root never takes a user namespace (it would map the script to the host's root):
    // its scripts drop to the sandbox uid instead. An ordinary user takes one where the
    // kernel allows; without it bwrap (setuid) still isolates, and a setuid bwrap may
    // refuse `--cap-drop` to a user, who holds no capability to drop anyway.
    let tries: &[(bool, bool)] = match root {
        true => &[(false, true)],
        false => &[(true, true), (false, true), (false, false)],
    };
    let mut first = Some(probe(tries[0].0, tries[0].1));
    let text = |child: std::io::Result<std::process::Child>| {
        child
            .and_then(|c| c.wait_with_output())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let version = text(version).trim().to_string();
    let help = text(help);
    let knows = |flag: &str| help.split_whitespace().any(|w| w == flag);
    if !knows("--perms") || !knows("--dir") {
        return Err(SandboxError::TooOld { version });
    }
    let mut last = None;
    for &(userns, cap_drop) in tries {
        // The first try's probe ran beside the version and the options.
        let out = match first.take() {
            Some(out) => out?,
            None => probe(userns, cap_drop)?,
        };
        if out.status.success() {
            return Ok(Bwrap {
                path,
                version,
                userns,
                cap_drop,
                privileged: root,
                disable_userns: knows("--disable-userns"),
                tmpfs_size: knows("--size"),
            });
        }
        last = Some(out);
    }
    Err(SandboxError::Namespaces {
        stderr: last
            .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
            .unwrap_or_default(),
    })
}

/// A user namespace whose only user is the runner's own (an ordinary user's run).
fn identity() -> Vec<String> {
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    [
        "--unshare-user",
        "--uid",
        &uid.to_string(),
        "--gid",
        &gid.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// bwrap's arguments up to (and including) `--`; the program and its arguments follow
/// (`__sandbox-exec`, then the interpreter). `steps` are `m`'s
/// (`view::steps_and_split`), made once per attempt by the caller, who also hands
/// them to a warm start.
pub fn args(b: &Bwrap, m: &Mounts, steps: &[MountStep]) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
    ]
    .map(OsString::from)
    .to_vec();
    // No capability survives into the script, whoever started the runner; as root the
    // helper keeps the four it needs to give the scratch folders to the sandbox user
    // and drop to it, and then has none.
    if b.cap_drop {
        a.extend(["--cap-drop", "ALL"].map(OsString::from));
    }
    if b.privileged {
        for cap in ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN"] {
            a.extend(["--cap-add", cap].map(OsString::from));
        }
    }
    if b.userns {
        a.extend(identity().into_iter().map(OsString::from));
        if b.disable_userns {
            a.push("--disable-userns".into());
        }
    }
    a.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
    a.extend(step_args(steps, b.tmpfs_size));
    a.extend(device_args(m.gpu));
    a.extend([OsString::from("--chdir"), m.cwd.clone().into(), "--".into()]);
    a
}

/// bwrap's arguments for the warm-start zygote inside the sandbox (up to `--`). The
/// zygote runs only the runner's own code. An ordinary user's keeps every capability,
/// but only inside a user namespace of its own; a root runner's is root in its own
/// mount, network, IPC and UTS namespaces (each script it forks drops to the sandbox
/// uid before its first line). Either way each forked child can build its script's
/// mounts and namespaces (from `base`'s view: the run's scripts, outputs and
/// interpreter visible). The host's `/proc` is bound, not a new one, because the
/// kernel lets a child mount a fresh `/proc` for its own PID namespace only where a
/// complete one is visible.
pub fn zygote_args(b: &Bwrap, base: &Mounts) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
    ]
    .map(OsString::from)
    .to_vec();
    if !b.privileged {
        a.extend(identity().into_iter().map(OsString::from));
        a.extend(["--cap-add", "ALL"].map(OsString::from));
        if b.disable_userns {
            a.push("--disable-userns".into());
        }
    }
    a.extend(["--ro-bind", "/", "/"].map(OsString::from));
    a.extend(["--dev", "/dev", "--bind", "/proc", "/proc"].map(OsString::from));
    a.extend(step_args(&steps(base), b.tmpfs_size));
    a.extend(device_args(base.gpu));
    a.extend(["--chdir", "/", "--"].map(OsString::from));
    a
}

/// The steps as bwrap options; a scratch step's size only where bwrap knows `--size`.
fn step_args(steps: &[MountStep], tmpfs_size: bool) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    for step in steps {
        let p: OsString = step.path().into();
        let args: Vec<OsString> = match step {
            // Scratch space the sandbox user may use, whoever owns the tmpfs.
            MountStep::Tmpfs(_) => vec!["--perms".into(), "0755".into(), "--tmpfs".into(), p],
            // A root runner's `__sandbox-exec` then gives it to the sandbox user.
            MountStep::Scratch { size, .. } => {
                let mut v: Vec<OsString> = vec!["--perms".into(), "1777".into()];
                match size {
                    Some(bytes) if tmpfs_size => {
                        v.extend(["--size".into(), bytes.to_string().into()])
                    }
                    Some(_) => unbounded_warning(),
                    None => {}
                }
                v.extend(["--tmpfs".into(), p]);
                v
            }
            MountStep::Dir(_) => vec!["--perms".into(), "0755".into(), "--dir".into(), p],
            MountStep::ReadOnly(_) => vec!["--ro-bind".into(), p.clone(), p],
            MountStep::Writable(_) => vec!["--bind".into(), p.clone(), p],
            MountStep::Mask(_) => vec!["--ro-bind".into(), "/dev/null".into(), p],
            MountStep::RemountReadOnly(_) => vec!["--remount-ro".into(), p],
        };
        a.extend(args);
    }
    a
}

/// Said once a run: this bwrap cannot bound a tmpfs, so only the watchdog counts the
/// scratch against `--memory-limit`.
fn unbounded_warning() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "this bwrap has no --size: the scratch tmpfs (/tmp, /dev/shm, $HOME) is not \
             bounded; what it holds still counts against --memory-limit"
        )
    });
}

/// The NVIDIA device nodes, passed through where they exist.
fn device_args(gpu: bool) -> Vec<OsString> {
    let mut a = Vec::new();
    if gpu {
        for dev in nvidia_devices() {
            a.extend([
                OsString::from("--dev-bind-try"),
                dev.clone().into(),
                dev.into(),
            ]);
        }
    }
    a
}

/// `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`, each `/dev/nvidiaN`,
/// and the MIG capability nodes.
pub fn nvidia_devices() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nvidia"))
        })
        .collect();
    out.sort();
    out
}

/// bwrap reports a child killed by signal N as exit code 128 + N.
pub fn decode_exit(code: Option<i32>, signal: Option<i32>) -> (Option<i32>, Option<i32>) {
    match (code, signal) {
        (Some(c), None) if (129..=128 + 64).contains(&c) => (None, Some(c - 128)),
        other => other,
    }
}

/// The interpreter's installation, which every script reads wherever it lies (a venv
/// in `~/.cache`, a pyenv install, conda under `/opt`): its prefixes, the folder of
/// its real executable, and each folder on its `sys.path` and its user site that
/// exists (site-packages kept apart from the prefix), from the probe's view.
pub fn python_paths(python: &Path, info: &crate::python::PythonInfo) -> Vec<PathBuf> {
    let mut out = vec![
        PathBuf::from(&info.prefix),
        PathBuf::from(&info.base_prefix),
    ];
    if let Ok(real) = python.canonicalize() {
        out.extend(real.parent().and_then(Path::parent).map(Path::to_path_buf));
    }
    out.extend(
        info.sys_path
            .iter()
            .chain(&info.user_site)
            .filter(|p| p.is_absolute() && p.is_dir())
            .cloned(),
    );
    out.retain(|p| !p.as_os_str().is_empty());
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests;
