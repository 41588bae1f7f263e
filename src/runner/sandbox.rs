//! The bubblewrap sandbox: each script sees a read-only filesystem with only its data
//! folder, a private `/tmp` and the compilation cache writable, an empty `$HOME`, no
//! network, its own PID namespace, and dies with the runner.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use super::mounts::Mounts;
use super::mounts::{steps, MountStep};
use crate::error::SandboxError;

/// A working bubblewrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bwrap {
    pub path: PathBuf,
    pub version: String,
    /// bwrap can give the script a user namespace of its own here, so even a runner
    /// started as root hands it no capability of the host's.
    pub userns: bool,
    /// bwrap accepts `--cap-drop ALL` here (always as root).
    pub cap_drop: bool,
}

impl Bwrap {
    /// Why no script can start warm inside this bwrap's sandbox, if one cannot: the
    /// zygote holds its capabilities only in a user namespace of its own.
    pub fn no_warm_start(&self) -> Option<&'static str> {
        (!self.userns).then_some(
            "warm start inside the sandbox needs a user namespace, which bwrap cannot make here",
        )
    }
}

/// The command that installs bubblewrap, for error messages.
pub const INSTALL_HINT: &str =
    "apt-get install bubblewrap   (Debian/Ubuntu; dnf install bubblewrap on Fedora/RHEL)";

/// Finds `bwrap` on PATH and proves it can build the namespaces a run needs.
pub fn detect() -> Result<Bwrap, SandboxError> {
    let path = crate::paths::find_on_path("bwrap", std::env::var_os("PATH").as_deref())
        .ok_or(SandboxError::NotInstalled)?;
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
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
    // A user namespace where the kernel allows one. Without it, bwrap still drops
    // every capability as root; a setuid bwrap may refuse `--cap-drop` to a user, who
    // holds no capability to drop anyway. Root never runs without dropping them.
    // SAFETY: getuid cannot fail.
    let root = unsafe { libc::getuid() } == 0;
    let mut tries = vec![(true, true), (false, true)];
    if !root {
        tries.push((false, false));
    }
    let mut last = None;
    for (userns, cap_drop) in tries {
        let out = probe(userns, cap_drop)?;
        if out.status.success() {
            return Ok(Bwrap {
                path,
                version,
                userns,
                cap_drop,
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

/// A user namespace whose only user is not root: the runner's own uid, or `nobody`
/// (65534) when the runner is root.
fn identity() -> Vec<String> {
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let (uid, gid) = if uid == 0 { (65534, 65534) } else { (uid, gid) };
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

/// bwrap's arguments up to (and including) `--`; the program and its arguments follow.
pub fn args(m: &Mounts) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
    ]
    .map(OsString::from)
    .to_vec();
    // No capability survives into the script, whoever started the runner.
    if m.cap_drop {
        a.extend(["--cap-drop", "ALL"].map(OsString::from));
    }
    if m.userns {
        a.extend(identity().into_iter().map(OsString::from));
    }
    a.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
    a.extend(step_args(&steps(m)));
    a.extend(device_args(m.gpu));
    a.extend([OsString::from("--chdir"), m.cwd.clone().into(), "--".into()]);
    a
}

/// bwrap's arguments for the warm-start zygote inside the sandbox (up to `--`). The
/// zygote runs only the runner's own code: it keeps every capability, but only inside
/// a user namespace of its own, never the host's, so each forked child can build its
/// script's mounts and namespaces (from `base`'s view: the run's scripts, outputs and
/// interpreter visible) and then drop them all before the script's first line. The
/// host's `/proc` is bound, not a new one, because the kernel lets a child mount a
/// fresh `/proc` for its own PID namespace only where a complete one is visible.
pub fn zygote_args(base: &Mounts) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
    ]
    .map(OsString::from)
    .to_vec();
    a.extend(identity().into_iter().map(OsString::from));
    a.extend(["--cap-add", "ALL", "--ro-bind", "/", "/"].map(OsString::from));
    a.extend(["--dev", "/dev", "--bind", "/proc", "/proc"].map(OsString::from));
    a.extend(step_args(&steps(base)));
    a.extend(device_args(base.gpu));
    a.extend(["--chdir", "/", "--"].map(OsString::from));
    a
}

/// The steps as bwrap options.
fn step_args(steps: &[MountStep]) -> Vec<OsString> {
    let mut a = Vec::new();
    for step in steps {
        let (flag, path): (&str, &Path) = match step {
            MountStep::Tmpfs(p) => ("--tmpfs", p),
            MountStep::ReadOnly(p) => ("--ro-bind", p),
            MountStep::Writable(p) => ("--bind", p),
            MountStep::RemountReadOnly(p) => ("--remount-ro", p),
        };
        a.push(flag.into());
        a.push(path.into());
        if matches!(step, MountStep::ReadOnly(_) | MountStep::Writable(_)) {
            a.push(path.into());
        }
    }
    a
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
fn nvidia_devices() -> Vec<PathBuf> {
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

/// Interpreter folders that a hidden `$HOME` would otherwise hide (a venv in
/// `~/.cache`, a pyenv install), from the probe's view of the interpreter.
pub fn python_paths(python: &Path, prefix: &str, base_prefix: &str) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(prefix), PathBuf::from(base_prefix)];
    if let Ok(real) = python.canonicalize() {
        out.extend(real.parent().and_then(Path::parent).map(Path::to_path_buf));
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_start_drops_everything_and_ends_in_the_separator() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let a: Vec<String> = args(&Mounts {
            writable: vec![data.clone()],
            cwd: data.clone(),
            userns: true,
            cap_drop: true,
            ..Default::default()
        })
        .into_iter()
        .map(|s| s.into_string().unwrap())
        .collect();
        assert!(a
            .windows(3)
            .any(|w| w[0] == "--bind" && w[1] == w[2] && w[1] == data.to_str().unwrap()));
        for flag in [
            "--unshare-net",
            "--unshare-pid",
            "--die-with-parent",
            "--unshare-user",
        ] {
            assert!(a.iter().any(|s| s == flag), "{flag} in {a:?}");
        }
        assert!(a.windows(2).any(|w| w[0] == "--cap-drop" && w[1] == "ALL"));
        assert!(a.windows(2).any(|w| w[0] == "--proc" && w[1] == "/proc"));
        assert_eq!(a.last().unwrap(), "--");
    }

    #[test]
    fn the_zygote_keeps_capabilities_only_in_its_own_user_namespace() {
        let a: Vec<String> = zygote_args(&Mounts::default())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        let at = |flag: &str| a.iter().position(|s| s == flag);
        assert!(
            at("--unshare-user").is_some() && at("--cap-add").is_some(),
            "{a:?}"
        );
        assert!(
            at("--unshare-pid").is_none(),
            "scripts get their PID namespaces per fork"
        );
        assert!(a.windows(3).any(|w| w == ["--bind", "/proc", "/proc"]));
        assert_eq!(a.last().unwrap(), "--");
    }

    #[test]
    fn signal_exit_codes_are_decoded() {
        assert_eq!(decode_exit(Some(139), None), (None, Some(11)));
        assert_eq!(decode_exit(Some(1), None), (Some(1), None));
        assert_eq!(decode_exit(None, Some(9)), (None, Some(9)));
    }
}
