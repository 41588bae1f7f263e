//! The bubblewrap sandbox: each script sees a read-only filesystem with only its data
//! folder, a private `/tmp` and the compilation cache writable, an empty `$HOME`, no
//! network, its own PID namespace, and dies with the runner.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// What one sandboxed attempt may see.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    /// `$HOME`, hidden behind an empty tmpfs (as `/tmp` is behind a private one).
    pub home: Option<PathBuf>,
    /// Readable again inside a hidden `$HOME` or `/tmp` (interpreter, script folder,
    /// shim).
    pub readable: Vec<PathBuf>,
    /// Writable (data folder, compilation cache).
    pub writable: Vec<PathBuf>,
    /// The script's folder, the working directory.
    pub cwd: PathBuf,
    /// Pass the NVIDIA device nodes.
    pub gpu: bool,
    /// Give the script a user namespace of its own (see [`Bwrap::userns`]).
    pub userns: bool,
    /// Drop every capability (see [`Bwrap::cap_drop`]).
    pub cap_drop: bool,
    /// The runner's own outputs (results folder, GNN's step-12 folder): hidden behind an
    /// empty tmpfs, so no script reads another's results, logs or data; the script's
    /// own data folder is bound back (it is among `writable`).
    pub outputs: Vec<PathBuf>,
}

/// bwrap's arguments up to (and including) `--`; the program and its arguments follow.
pub fn args(m: &Mounts) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&[
        "--die-with-parent".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-net".as_ref(),
    ]);
    push(&["--unshare-ipc".as_ref(), "--unshare-uts".as_ref()]);
    // No capability survives into the script, whoever started the runner.
    if m.cap_drop {
        push(&["--cap-drop".as_ref(), "ALL".as_ref()]);
    }
    if m.userns {
        for arg in identity() {
            push(&[arg.as_ref()]);
        }
    }
    push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
    push(&[
        "--dev".as_ref(),
        "/dev".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
    ]);
    // Order matters: later mounts land on top of earlier ones, so the private /tmp and
    // the empty home come first, and what must stay visible inside them (a script
    // folder under /tmp, a venv under ~/.cache) is bound back afterwards.
    let mut hidden: Vec<&Path> = vec![Path::new("/tmp")];
    hidden.extend(
        m.home
            .as_deref()
            .filter(|h| *h != Path::new("/") && *h != Path::new("/tmp")),
    );
    let outputs: Vec<&Path> = m
        .outputs
        .iter()
        .map(PathBuf::as_path)
        .filter(|o| *o != Path::new("/") && o.exists())
        .collect();
    hidden.extend(outputs.iter().copied());
    for h in &hidden {
        push(&["--tmpfs".as_ref(), h.as_os_str()]);
    }
    for p in m
        .readable
        .iter()
        .filter(|p| hidden.iter().any(|h| p.starts_with(h)) && p.exists())
    {
        push(&["--ro-bind".as_ref(), p.as_os_str(), p.as_os_str()]);
    }
    for p in m.writable.iter().filter(|p| p.exists()) {
        push(&["--bind".as_ref(), p.as_os_str(), p.as_os_str()]);
    }
    // The outputs' tmpfs stays empty and read-only (its binds stay as they are): a
    // write there would only vanish with the sandbox, so it is refused instead.
    for o in &outputs {
        push(&["--remount-ro".as_ref(), o.as_os_str()]);
    }
    if m.gpu {
        for dev in nvidia_devices() {
            push(&["--dev-bind-try".as_ref(), dev.as_os_str(), dev.as_os_str()]);
        }
    }
    push(&["--chdir".as_ref(), m.cwd.as_os_str(), "--".as_ref()]);
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
    fn home_is_hidden_then_the_needed_folders_come_back() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let venv = home.join(".cache/venv");
        let data = tmp.path().join("data");
        for d in [&venv, &data] {
            std::fs::create_dir_all(d).unwrap();
        }
        let a: Vec<String> = args(&Mounts {
            home: Some(home.clone()),
            readable: vec![venv.clone(), PathBuf::from("/usr")],
            writable: vec![data.clone()],
            cwd: data.clone(),
            gpu: false,
            userns: true,
            cap_drop: true,
            outputs: vec![],
        })
        .into_iter()
        .map(|s| s.into_string().unwrap())
        .collect();
        let pos = |x: &str| a.iter().position(|s| s == x).unwrap();
        assert!(pos(home.to_str().unwrap()) < pos(venv.to_str().unwrap()));
        assert!(a
            .windows(2)
            .any(|w| w[0] == "--bind" && w[1] == data.to_str().unwrap()));
        assert!(
            !a.iter().any(|s| s == "/usr"),
            "outside home nothing needs binding back"
        );
        assert!(
            a.contains(&"--unshare-net".to_string())
                && a.contains(&"--die-with-parent".to_string())
        );
        assert!(a.windows(2).any(|w| w[0] == "--cap-drop" && w[1] == "ALL"));
        assert!(a.contains(&"--unshare-user".to_string()));
        assert_eq!(a.last().unwrap(), "--");
    }

    #[test]
    fn the_runs_outputs_are_hidden_but_the_scripts_own_data_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let results = tmp.path().join("results");
        let own = results.join("data/me");
        std::fs::create_dir_all(&own).unwrap();
        let a: Vec<String> = args(&Mounts {
            writable: vec![own.clone()],
            cwd: tmp.path().to_path_buf(),
            outputs: vec![results.clone(), PathBuf::from("/")],
            ..Default::default()
        })
        .into_iter()
        .map(|s| s.into_string().unwrap())
        .collect();
        let at = |flag: &str, path: &Path| {
            a.windows(2)
                .position(|w| w[0] == flag && w[1] == path.to_str().unwrap())
                .unwrap_or_else(|| panic!("no {flag} {}: {a:?}", path.display()))
        };
        let hidden = at("--tmpfs", &results);
        let bound = at("--bind", &own);
        let read_only = at("--remount-ro", &results);
        assert!(hidden < bound && bound < read_only, "{a:?}");
        assert!(
            !a.windows(2).any(|w| w[0] == "--tmpfs" && w[1] == "/"),
            "never hide /"
        );
    }

    #[test]
    fn signal_exit_codes_are_decoded() {
        assert_eq!(decode_exit(Some(139), None), (None, Some(11)));
        assert_eq!(decode_exit(Some(1), None), (Some(1), None));
        assert_eq!(decode_exit(None, Some(9)), (None, Some(9)));
    }
}
