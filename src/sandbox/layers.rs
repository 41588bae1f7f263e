//! How a run's scripts are sandboxed: the layers this machine has, as the mode asks.
//! bubblewrap where it works; for a root runner without it, the runner's own mount,
//! network, IPC and UTS namespaces; Landlock where the kernel has it; and always the
//! seccomp filter and `no_new_privs` (and, for a root runner, the sandbox uid).

use std::process::{Command, Stdio};

use super::bwrap::Bwrap;

/// The layers a run's scripts get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxing {
    /// bubblewrap's namespaces and mounts.
    pub bwrap: Option<Bwrap>,
    /// A root runner without bwrap: the runner gives each script mount, network, IPC and
    /// UTS namespaces of its own (it can where it holds `CAP_SYS_ADMIN`).
    pub namespaces: bool,
    /// Landlock, at this ABI: reads where a script needs them, writes to its own
    /// folders only, no TCP (ABI 4), signals and abstract sockets scoped (ABI 6).
    pub landlock: Option<u8>,
}

impl Sandboxing {
    /// Whether the script sees a view of its own made of mounts (bwrap's or the
    /// runner's namespaces): a private `/tmp` and `$HOME`, its own network namespace.
    pub fn has_view(&self) -> bool {
        self.bwrap.is_some() || self.namespaces
    }

    /// Whether anything holds a script's files to less than its user may touch:
    /// bwrap's view, the runner's namespaces, Landlock, or for a `root` runner the
    /// sandbox uid its scripts drop to. Without any, the seccomp filter alone stands,
    /// which `--sandbox on` refuses.
    pub fn holds_files(&self, root: bool) -> bool {
        self.has_view() || self.landlock.is_some() || root
    }

    /// The namespaces every script of the run gets, as the seccomp filter needs to
    /// know them: bwrap gives all; the runner's own give IPC and network (a cold
    /// start shares the host's PID namespace, so calls on a process stay on the
    /// caller, warm or cold); the built-in layer alone gives none.
    pub fn separation(&self) -> super::seccomp::Separation {
        use super::seccomp::Separation;
        match (&self.bwrap, self.namespaces) {
            (Some(_), _) => Separation::ALL,
            (None, true) => Separation {
                pid: false,
                ipc: true,
                net: true,
            },
            (None, false) => Separation::NONE,
        }
    }

    /// Why no script can start warm inside this sandbox, if one cannot: an ordinary
    /// user's zygote builds each script's namespaces with capabilities it holds only
    /// in a user namespace of its own, which a setuid bwrap cannot give.
    pub fn no_warm_start(&self) -> Option<&'static str> {
        match &self.bwrap {
            Some(b) if !b.userns && !b.privileged => Some(
                "warm start inside the sandbox needs a user namespace, which bwrap cannot make here",
            ),
            _ => None,
        }
    }

    /// `bwrap`, or `builtin` for the built-in layer alone, as results say it.
    pub fn kind(&self) -> &'static str {
        match self.bwrap {
            Some(_) => "bwrap",
            None => "builtin",
        }
    }

    /// What confines the scripts, as results list it (see [`layer_names`]).
    pub fn layers(&self, switched: bool, seccomp: bool) -> Vec<String> {
        layer_names(
            self.bwrap.is_some(),
            self.namespaces,
            self.landlock,
            switched,
            seccomp,
        )
    }

    /// What is missing here and what that leaves, said once before the run; `None`
    /// when every layer is there.
    pub fn missing(&self) -> Option<String> {
        let install = "install bubblewrap for them: apt-get install bubblewrap (Debian, \
                       Ubuntu) or dnf install bubblewrap (Fedora, RHEL)";
        match (&self.bwrap, self.landlock) {
            (Some(_), Some(_)) => None,
            (Some(_), None) => Some(
                "this kernel has no Landlock (Linux 5.13+ with landlock among its security \
                 modules): bwrap alone confines the scripts"
                    .into(),
            ),
            (None, Some(_)) if self.namespaces => None,
            (None, Some(abi)) => Some(format!(
                "scripts run in the built-in sandbox (Landlock ABI {abi}, seccomp) without \
                 PID or mount namespaces of their own{}; {install}",
                match abi < 6 {
                    true => ", and before Landlock ABI 6 they can signal each other",
                    false => "",
                },
            )),
            (None, None) => Some(format!(
                "this kernel has no Landlock and bwrap is not installed: scripts run under \
                 the seccomp filter{} only and can read and write what their user can; \
                 {install}",
                match self.namespaces {
                    true => ", in namespaces of their own as the sandbox user,",
                    false => "",
                },
            )),
        }
    }
}

/// The layers' names, as results and `doctor` list them: `bwrap`, or `namespaces` for
/// a root runner's own; `landlock-vN`; `uid` when scripts switch to the sandbox user;
/// `seccomp` when there is a filter for this machine.
pub fn layer_names(
    bwrap: bool,
    namespaces: bool,
    landlock: Option<u8>,
    switched: bool,
    seccomp: bool,
) -> Vec<String> {
    let mut l: Vec<String> = Vec::new();
    if bwrap {
        l.push("bwrap".into());
    } else if namespaces {
        l.push("namespaces".into());
    }
    if let Some(abi) = landlock {
        l.push(format!("landlock-v{abi}"));
    }
    if switched {
        l.push("uid".into());
    }
    if seccomp {
        l.push("seccomp".into());
    }
    l
}

/// Whether a root runner may give a script mount, network, IPC and UTS namespaces of
/// its own here (a container without `CAP_SYS_ADMIN` does not let it); never for an
/// ordinary user, who makes them only through bwrap's user namespace.
pub fn namespaces_here() -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    // SAFETY: one system call between fork and exec.
    let made = unsafe {
        try_in_child(|| {
            use rustix::thread::UnshareFlags as U;
            rustix::thread::unshare_unsafe(U::NEWNS | U::NEWNET | U::NEWIPC | U::NEWUTS)?;
            Ok(())
        })
    };
    made.is_ok()
}

/// Runs `pre` in a forked child that then exits at once (`/bin/sh -c 'exit 0'`): how
/// this machine is tried without changing the runner. The error is the one `pre` met.
///
/// # Safety
/// `pre` runs between fork and exec: async-signal-safe calls only, no allocation.
pub unsafe fn try_in_child(
    pre: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut probe = Command::new("/bin/sh");
    probe
        .args(["-c", "exit 0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the caller promises `pre` is safe between fork and exec.
    unsafe {
        probe.pre_exec(pre);
    }
    let status = probe.status()?;
    match status.success() {
        true => Ok(()),
        false => Err(std::io::Error::other("the probe failed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_name_what_is_there_and_missing_says_what_is_not() {
        let alone = Sandboxing {
            bwrap: None,
            namespaces: false,
            landlock: Some(7),
        };
        assert_eq!(alone.layers(false, true), ["landlock-v7", "seccomp"]);
        assert_eq!(alone.kind(), "builtin");
        assert!(alone.missing().unwrap().contains("bubblewrap"));
        let root = Sandboxing {
            namespaces: true,
            ..alone.clone()
        };
        assert_eq!(
            root.layers(true, true),
            ["namespaces", "landlock-v7", "uid", "seccomp"]
        );
        assert_eq!(root.missing(), None);
        let bare = Sandboxing {
            landlock: None,
            ..alone
        };
        assert!(bare.missing().unwrap().contains("no Landlock"));
        assert_eq!(bare.layers(false, true), ["seccomp"]);
    }

    /// `--sandbox on` refuses only the filter alone: any one of the other layers, or a
    /// root runner's uid switch, holds the files.
    #[test]
    fn the_filter_alone_is_the_only_sandbox_that_holds_no_files() {
        let bare = Sandboxing {
            bwrap: None,
            namespaces: false,
            landlock: None,
        };
        assert!(!bare.holds_files(false));
        assert!(
            bare.holds_files(true),
            "a root runner's scripts drop to the sandbox uid"
        );
        let landlock = Sandboxing {
            landlock: Some(1),
            ..bare.clone()
        };
        assert!(landlock.holds_files(false));
        let namespaces = Sandboxing {
            namespaces: true,
            ..bare.clone()
        };
        assert!(namespaces.holds_files(false));
        let bwrap = Sandboxing {
            bwrap: Some(crate::sandbox::bwrap::Bwrap {
                path: "/usr/bin/bwrap".into(),
                version: "0.8.0".into(),
                userns: true,
                cap_drop: false,
                privileged: false,
                disable_userns: true,
                tmpfs_size: true,
            }),
            ..bare
        };
        assert!(bwrap.holds_files(false));
    }
}
