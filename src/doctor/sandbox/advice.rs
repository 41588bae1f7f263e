//! From what the probes saw to a finding per layer: its state, in words, and the one
//! command or setting that would strengthen it; and the layers a run here would use.
//! Pure, so every case is tested without the machine that has it.

use crate::model::doctor::{
    BwrapProbe, CgroupProbe, LandlockProbe, LayerFinding, LayerState, SandboxLayer, SandboxReport,
    SandboxUserProbe, SeccompProbe, UsernsProbe,
};
use crate::sandbox::landlock;

/// The newest Landlock ABI whose restrictions `landlock::covers` lists, and the kernel
/// that brings it.
const NEWEST_LANDLOCK: (u8, &str) = (6, "6.12");

/// The layers a run here would use: the runner's own list of names (a root runner's
/// namespaces count only where it may make them, and only without bwrap).
pub fn expected_layers(
    bwrap_ok: bool,
    namespaces: bool,
    landlock_abi: Option<u8>,
    root: bool,
    seccomp: bool,
) -> Vec<String> {
    crate::sandbox::layers::layer_names(bwrap_ok, root && namespaces, landlock_abi, root, seccomp)
}

/// Fills `layers` and `findings` from the probes.
pub fn judge(r: &mut SandboxReport) {
    r.layers = expected_layers(
        r.bwrap.works,
        r.builtin_namespaces,
        r.landlock.abi,
        r.root,
        r.seccomp.filter,
    );
    r.findings = vec![
        bwrap(&r.bwrap, &r.user_namespaces, r.root, r.builtin_namespaces),
        user_namespaces(&r.user_namespaces, &r.bwrap, r.root),
        landlock_finding(&r.landlock),
        seccomp(&r.seccomp),
        sandbox_user(&r.sandbox_user),
        cgroups(&r.cgroups, r.root),
    ];
}

fn finding(
    layer: SandboxLayer,
    state: LayerState,
    message: String,
    fix: Option<String>,
) -> LayerFinding {
    LayerFinding {
        layer,
        state,
        message,
        fix,
    }
}

/// `sudo ` before a command an ordinary user must run as root.
fn sudo(root: bool) -> &'static str {
    if root {
        ""
    } else {
        "sudo "
    }
}

/// The command that installs bubblewrap.
pub fn install_bwrap(root: bool) -> String {
    format!("{}{}", sudo(root), crate::sandbox::bwrap::INSTALL_HINT)
}

/// The kernel settings that keep this user from a usable user namespace, as one
/// command; `None` when none of them is the cause (or nothing stands in the way).
pub fn userns_fix(u: &UsernsProbe) -> Option<String> {
    let mut steps = Vec::new();
    if u.max_user_namespaces == Some(0) {
        steps.push("sudo sysctl -w user.max_user_namespaces=15000");
    }
    if u.unprivileged_clone == Some(false) {
        steps.push("sudo sysctl -w kernel.unprivileged_userns_clone=1");
    }
    if u.apparmor_restricted == Some(true) {
        steps.push("sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0");
    }
    if steps.is_empty() {
        return None;
    }
    let mut fix = steps.join(" && ");
    if u.apparmor_restricted == Some(true) {
        fix.push_str("   (or an AppArmor profile that gives bwrap the userns permission)");
    }
    Some(fix)
}

fn bwrap(b: &BwrapProbe, u: &UsernsProbe, root: bool, namespaces: bool) -> LayerFinding {
    let name = b.version.as_deref().unwrap_or("bwrap");
    let at = b
        .path
        .as_deref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    if b.works && root {
        return finding(
            SandboxLayer::Bwrap,
            LayerState::Active,
            format!("{name}{at} works here, as root: no user namespace, scripts drop to the sandbox user"),
            None,
        );
    }
    if b.works && b.userns {
        return finding(
            SandboxLayer::Bwrap,
            LayerState::Active,
            format!("{name}{at} works here, with a user namespace of its own for each script"),
            None,
        );
    }
    if b.works {
        return finding(
            SandboxLayer::Bwrap,
            LayerState::Partial,
            format!("{name}{at} works here without a user namespace (setuid): no script starts warm inside the sandbox"),
            userns_fix(u),
        );
    }
    let instead = match (root, namespaces) {
        (true, true) => "; runs use the runner's own namespaces instead",
        (true, false) => {
            "; scripts only drop to the sandbox user (no CAP_SYS_ADMIN for namespaces)"
        }
        (false, _) => "; runs rely on the built-in layers (Landlock, seccomp) alone",
    };
    let why = b.error.as_deref().unwrap_or("it does not work here");
    let fix = if b.path.is_none() || b.too_old {
        Some(install_bwrap(root))
    } else if root && !namespaces {
        // Root in a container: bwrap, like the runner, may not make namespaces.
        Some("give the container CAP_SYS_ADMIN (docker run --cap-add SYS_ADMIN …)".into())
    } else if root {
        None
    } else {
        userns_fix(u)
    };
    finding(
        SandboxLayer::Bwrap,
        LayerState::Missing,
        format!("{why}{instead}"),
        fix,
    )
}

fn user_namespaces(u: &UsernsProbe, b: &BwrapProbe, root: bool) -> LayerFinding {
    let layer = SandboxLayer::UserNamespaces;
    if root {
        let can = if u.works {
            "can make one"
        } else {
            "cannot make one"
        };
        return finding(
            layer,
            LayerState::Unused,
            format!("root's runs use none (root's scripts drop to the sandbox user instead); root {can} here"),
            None,
        );
    }
    if b.userns || (u.works && u.apparmor_restricted != Some(true)) {
        return finding(
            layer,
            LayerState::Active,
            "this user can make user namespaces: bwrap gives each script one that maps only this user".into(),
            None,
        );
    }
    let why = if u.works {
        "AppArmor takes every capability inside a user namespace this user makes (kernel.apparmor_restrict_unprivileged_userns=1), so bwrap cannot use one".to_string()
    } else if u.max_user_namespaces == Some(0) {
        "user.max_user_namespaces is 0: no user namespace can be made".to_string()
    } else if u.unprivileged_clone == Some(false) {
        "kernel.unprivileged_userns_clone is 0: only root may make user namespaces".to_string()
    } else {
        format!(
            "this user cannot make a user namespace ({})",
            u.error.as_deref().unwrap_or("refused")
        )
    };
    finding(layer, LayerState::Missing, why, userns_fix(u))
}

fn landlock_finding(l: &LandlockProbe) -> LayerFinding {
    let layer = SandboxLayer::Landlock;
    let (newest, newest_kernel) = NEWEST_LANDLOCK;
    let upgrade = format!("a kernel of {newest_kernel} or newer (Landlock ABI {newest})");
    match l.abi {
        Some(abi) => {
            let covers = landlock::covers(abi).join(", ");
            if l.not_covered.is_empty() {
                finding(
                    layer,
                    LayerState::Active,
                    format!("ABI {abi} (kernel {}): restricts {covers}", l.kernel),
                    None,
                )
            } else {
                finding(
                    layer,
                    LayerState::Partial,
                    format!(
                        "ABI {abi} (kernel {}): restricts {covers}; not at this ABI: {}",
                        l.kernel,
                        l.not_covered.join(", ")
                    ),
                    Some(upgrade),
                )
            }
        }
        None => match l.error.as_deref() {
            Some("EOPNOTSUPP") => finding(
                layer,
                LayerState::Missing,
                format!("kernel {} has Landlock but did not enable it at boot", l.kernel),
                Some(format!(
                    "add landlock to the lsm= boot parameter: lsm=landlock,{} (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot)",
                    l.lsm.as_deref().unwrap_or("<the modules in /sys/kernel/security/lsm>")
                )),
            ),
            Some("ENOSYS") | None => finding(
                layer,
                LayerState::Missing,
                format!("kernel {} has no Landlock (5.13 or newer, built with CONFIG_SECURITY_LANDLOCK)", l.kernel),
                Some(upgrade),
            ),
            Some(other) => finding(
                layer,
                LayerState::Missing,
                format!("the Landlock call is refused here ({other}): a container's seccomp profile blocks it"),
                None,
            ),
        },
    }
}

fn seccomp(s: &SeccompProbe) -> LayerFinding {
    let layer = SandboxLayer::Seccomp;
    if !s.kernel {
        return finding(
            layer,
            LayerState::Missing,
            "this kernel has no seccomp (CONFIG_SECCOMP_FILTER)".into(),
            Some("a kernel built with CONFIG_SECCOMP_FILTER (every distribution's is)".into()),
        );
    }
    if s.filter {
        finding(
            layer,
            LayerState::Active,
            format!(
                "the {} filter is an allow-list: {} system calls granted (some with safe arguments only), every other refused (mounts, namespaces, ptrace, host sockets, setuid files, …)",
                s.arch, s.granted_calls
            ),
            None,
        )
    } else {
        finding(
            layer,
            LayerState::Missing,
            format!(
                "no filter for {}: jax-runner has filters for x86_64, aarch64 and riscv64",
                s.arch
            ),
            None,
        )
    }
}

fn sandbox_user(u: &SandboxUserProbe) -> LayerFinding {
    let layer = SandboxLayer::SandboxUser;
    let (Some(first), Some(last)) = (u.first_uid, u.last_uid) else {
        return finding(
            layer,
            LayerState::Unused,
            format!("scripts run as this user (uid {}): only a root runner gives them a uid of their own", u.uid),
            None,
        );
    };
    if u.mapped {
        finding(
            layer,
            LayerState::Active,
            format!("scripts drop to an unused uid from {first}–{last} (the same one for a tree's runs), with no capabilities"),
            None,
        )
    } else {
        finding(
            layer,
            LayerState::Missing,
            format!("this user namespace does not map uids {first}–{last} (/proc/self/uid_map): scripts cannot switch to them"),
            Some(format!("map at least uids 0–{last} into the container (65536 subordinate ids in /etc/subuid)")),
        )
    }
}

fn cgroups(c: &CgroupProbe, root: bool) -> LayerFinding {
    let layer = SandboxLayer::Cgroups;
    let v = &c.version;
    let watchdog = "falls back to the sampling watchdog (a fork burst or a spike between two samples can pass it)";
    let (state, message) = match (c.pids, c.memory) {
        (true, true) => {
            let message = format!(
                "cgroup {v}: a cgroup per slot (per attempt with --memory-limit); the kernel enforces --max-procs and --memory-limit"
            );
            return finding(layer, LayerState::Active, message, None);
        }
        (true, false) => (
            LayerState::Partial,
            format!("cgroup {v}: the kernel enforces --max-procs; --memory-limit {watchdog}"),
        ),
        (false, true) => (
            LayerState::Partial,
            format!("cgroup {v}: the kernel enforces --memory-limit; --max-procs {watchdog}"),
        ),
        (false, false) => {
            let why = if v == "none" {
                "no cgroup hierarchy has the pids and memory controllers".to_string()
            } else {
                format!("cgroup {v}: the runner cannot make cgroups with those controllers here")
            };
            let message = format!("{why}; each of --memory-limit and --max-procs {watchdog}");
            (LayerState::Missing, message)
        }
    };
    // A cgroup of the runner's own, with the controllers, delegated to whoever runs it.
    let fix = match (v.as_str(), root) {
        ("v2", false) => Some("systemd-run --user --scope -p Delegate=yes jax-runner …"),
        ("v2", true) => Some("systemd-run --scope -p Delegate=yes jax-runner …"),
        ("v1", false) => Some(
            "sudo cgcreate -a $USER -t $USER -g pids,memory:jax-runner-$USER && cgexec -g pids,memory:jax-runner-$USER jax-runner …",
        ),
        _ => None,
    };
    finding(layer, state, message, fix.map(String::from))
}
