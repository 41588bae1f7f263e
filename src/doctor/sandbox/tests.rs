//! The verdict and the advice from hand-made probes: each machine a doctor may meet,
//! without needing it.

use super::advice::{judge, userns_fix};
use super::*;
use crate::model::doctor::{LayerFinding, LayerState, SandboxLayer};

/// A root runner on a current kernel with bwrap installed, as on the CI machine.
fn root_machine() -> SandboxReport {
    SandboxReport {
        layers: Vec::new(),
        root: true,
        builtin_namespaces: true,
        bwrap: BwrapProbe {
            path: Some("/usr/bin/bwrap".into()),
            version: Some("bubblewrap 0.8.0".into()),
            works: true,
            privileged: true,
            ..BwrapProbe::default()
        },
        user_namespaces: UsernsProbe {
            works: true,
            max_user_namespaces: Some(63_000),
            ..UsernsProbe::default()
        },
        landlock: LandlockProbe {
            abi: Some(7),
            covers: landlock::covers(7).into_iter().map(String::from).collect(),
            kernel: "6.18.0".into(),
            ..LandlockProbe::default()
        },
        seccomp: SeccompProbe {
            arch: "x86_64".into(),
            filter: true,
            granted_calls: 275,
            denied_calls: 57,
            kernel: true,
        },
        sandbox_user: SandboxUserProbe {
            switched: true,
            first_uid: Some(FIRST_UID),
            last_uid: Some(LAST_UID),
            mapped: true,
            uid: 0,
        },
        cgroups: CgroupProbe {
            version: "v2".into(),
            pids: true,
            memory: true,
        },
        findings: Vec::new(),
    }
}

/// An ordinary user (uid 1000) on the same machine.
fn user_machine() -> SandboxReport {
    let mut r = root_machine();
    r.root = false;
    r.builtin_namespaces = false;
    r.bwrap.privileged = false;
    r.bwrap.userns = true;
    r.sandbox_user = SandboxUserProbe {
        mapped: true,
        uid: 1000,
        ..SandboxUserProbe::default()
    };
    r
}

fn judged(mut r: SandboxReport) -> SandboxReport {
    judge(&mut r);
    r
}

fn layer(r: &SandboxReport, layer: SandboxLayer) -> &LayerFinding {
    r.findings.iter().find(|f| f.layer == layer).unwrap()
}

fn fix(r: &SandboxReport, l: SandboxLayer) -> String {
    layer(r, l).fix.clone().unwrap_or_default()
}

#[test]
fn the_layers_a_run_uses_follow_from_what_works() {
    let l = |b, ns, ll, root, sc| expected_layers(b, ns, ll, root, sc).join(",");
    assert_eq!(
        l(true, true, Some(7), true, true),
        "bwrap,landlock-v7,uid,seccomp"
    );
    assert_eq!(
        l(false, true, Some(7), true, true),
        "namespaces,landlock-v7,uid,seccomp"
    );
    assert_eq!(
        l(false, false, Some(7), true, true),
        "landlock-v7,uid,seccomp"
    );
    assert_eq!(
        l(true, false, Some(3), false, true),
        "bwrap,landlock-v3,seccomp"
    );
    // Only a root runner makes namespaces itself.
    assert_eq!(l(false, true, None, false, true), "seccomp");
    assert_eq!(l(false, false, None, false, false), "");
}

#[test]
fn a_root_machine_with_everything_needs_nothing() {
    let r = judged(root_machine());
    assert_eq!(r.layers, ["bwrap", "landlock-v7", "uid", "seccomp"]);
    let order: Vec<SandboxLayer> = r.findings.iter().map(|f| f.layer).collect();
    assert_eq!(
        order,
        [
            SandboxLayer::Bwrap,
            SandboxLayer::UserNamespaces,
            SandboxLayer::Landlock,
            SandboxLayer::Seccomp,
            SandboxLayer::SandboxUser,
            SandboxLayer::Cgroups,
        ]
    );
    for f in &r.findings {
        assert!(f.fix.is_none(), "{f:?}");
        let want = match f.layer {
            SandboxLayer::UserNamespaces => LayerState::Unused,
            _ => LayerState::Active,
        };
        assert_eq!(f.state, want, "{f:?}");
    }
    assert!(layer(&r, SandboxLayer::SandboxUser)
        .message
        .contains("61184–65519"));
}

#[test]
fn bwrap_missing_gives_the_install_command() {
    let mut m = user_machine();
    m.bwrap = BwrapProbe {
        error: Some("bwrap is not installed".into()),
        ..BwrapProbe::default()
    };
    let r = judged(m.clone());
    assert_eq!(layer(&r, SandboxLayer::Bwrap).state, LayerState::Missing);
    assert!(fix(&r, SandboxLayer::Bwrap).starts_with("sudo apt-get install bubblewrap"));
    assert_eq!(r.layers, ["landlock-v7", "seccomp"]);

    // Root needs no sudo, and its runs fall back to the runner's own namespaces.
    let mut m = root_machine();
    m.bwrap = BwrapProbe::default();
    let r = judged(m);
    assert!(fix(&r, SandboxLayer::Bwrap).starts_with("apt-get install bubblewrap"));
    assert_eq!(r.layers, ["namespaces", "landlock-v7", "uid", "seccomp"]);
}

#[test]
fn apparmors_userns_restriction_is_named_with_its_sysctl() {
    let mut m = user_machine();
    // Ubuntu 24.04: unshare passes, the namespace has no capabilities, bwrap fails.
    m.user_namespaces.apparmor_restricted = Some(true);
    m.bwrap = BwrapProbe {
        path: Some("/usr/bin/bwrap".into()),
        version: Some("bubblewrap 0.9.0".into()),
        error: Some(
            "bwrap cannot create namespaces here: setting up uid map: Permission denied".into(),
        ),
        ..BwrapProbe::default()
    };
    let r = judged(m);
    let sysctl = "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0";
    for l in [SandboxLayer::Bwrap, SandboxLayer::UserNamespaces] {
        assert_eq!(layer(&r, l).state, LayerState::Missing);
        assert!(fix(&r, l).starts_with(sysctl), "{}", fix(&r, l));
        assert!(fix(&r, l).contains("AppArmor profile"));
    }
    assert!(layer(&r, SandboxLayer::UserNamespaces)
        .message
        .contains("AppArmor"));
    assert!(layer(&r, SandboxLayer::Bwrap).message.contains("uid map"));
}

#[test]
fn a_setuid_bwrap_under_apparmor_is_partial() {
    let mut m = user_machine();
    m.user_namespaces.apparmor_restricted = Some(true);
    m.bwrap.userns = false;
    let r = judged(m);
    assert_eq!(layer(&r, SandboxLayer::Bwrap).state, LayerState::Partial);
    assert!(fix(&r, SandboxLayer::Bwrap).contains("apparmor_restrict_unprivileged_userns=0"));
    assert_eq!(r.layers[0], "bwrap");
}

#[test]
fn each_userns_switch_that_is_off_is_in_the_one_command() {
    let u = |max, clone, aa| UsernsProbe {
        works: false,
        error: Some("ENOSPC".into()),
        max_user_namespaces: max,
        unprivileged_clone: clone,
        apparmor_restricted: aa,
    };
    assert_eq!(
        userns_fix(&u(Some(0), None, None)).unwrap(),
        "sudo sysctl -w user.max_user_namespaces=15000"
    );
    assert_eq!(
        userns_fix(&u(Some(100), Some(false), Some(false))).unwrap(),
        "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    );
    let both = userns_fix(&u(Some(0), None, Some(true))).unwrap();
    assert!(both.starts_with("sudo sysctl -w user.max_user_namespaces=15000 && sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"), "{both}");
    assert_eq!(userns_fix(&u(Some(100), None, None)), None);

    let mut m = user_machine();
    m.bwrap.userns = false;
    m.user_namespaces = u(Some(0), None, None);
    let r = judged(m);
    let f = layer(&r, SandboxLayer::UserNamespaces);
    assert_eq!(f.state, LayerState::Missing);
    assert!(
        f.message.contains("max_user_namespaces is 0"),
        "{}",
        f.message
    );
}

#[test]
fn landlock_not_enabled_at_boot_names_the_lsm_parameter() {
    let mut m = root_machine();
    m.landlock = LandlockProbe {
        error: Some("EOPNOTSUPP".into()),
        kernel: "6.8.0".into(),
        lsm: Some("lockdown,capability,yama,apparmor".into()),
        ..LandlockProbe::default()
    };
    let r = judged(m);
    let f = layer(&r, SandboxLayer::Landlock);
    assert_eq!(f.state, LayerState::Missing);
    assert!(f.message.contains("did not enable it at boot"));
    assert!(
        fix(&r, SandboxLayer::Landlock).contains("lsm=landlock,lockdown,capability,yama,apparmor")
    );
    assert_eq!(r.layers, ["bwrap", "uid", "seccomp"]);
}

#[test]
fn an_old_kernel_or_an_old_abi_asks_for_a_newer_kernel() {
    let mut m = root_machine();
    m.landlock = LandlockProbe {
        error: Some("ENOSYS".into()),
        kernel: "5.10.0".into(),
        ..LandlockProbe::default()
    };
    let r = judged(m);
    assert!(layer(&r, SandboxLayer::Landlock)
        .message
        .contains("no Landlock"));
    assert!(fix(&r, SandboxLayer::Landlock).contains("6.12 or newer"));

    let mut m = root_machine();
    m.landlock.abi = Some(3);
    m.landlock.not_covered = vec!["TCP bind and connect".into()];
    let r = judged(m);
    let f = layer(&r, SandboxLayer::Landlock);
    assert_eq!(f.state, LayerState::Partial);
    assert!(
        f.message.contains("not at this ABI: TCP bind and connect"),
        "{}",
        f.message
    );
    assert_eq!(r.layers[1], "landlock-v3");
}

#[test]
fn no_seccomp_filter_and_an_unmapped_uid_range_are_missing() {
    let mut m = root_machine();
    m.seccomp = SeccompProbe {
        arch: "powerpc64".into(),
        kernel: true,
        ..SeccompProbe::default()
    };
    m.sandbox_user.mapped = false;
    let r = judged(m);
    assert_eq!(layer(&r, SandboxLayer::Seccomp).state, LayerState::Missing);
    assert!(layer(&r, SandboxLayer::Seccomp)
        .message
        .contains("powerpc64"));
    assert_eq!(
        layer(&r, SandboxLayer::SandboxUser).state,
        LayerState::Missing
    );
    assert!(!r.layers.contains(&"seccomp".to_string()));
}

#[test]
fn cgroups_that_cannot_be_made_fall_back_to_the_watchdog_with_a_delegation_fix() {
    let mut m = user_machine();
    m.cgroups = CgroupProbe {
        version: "v2".into(),
        pids: false,
        memory: false,
    };
    let r = judged(m.clone());
    let f = layer(&r, SandboxLayer::Cgroups);
    assert_eq!(f.state, LayerState::Missing);
    assert!(f.message.contains("watchdog"));
    assert_eq!(
        f.fix.as_deref(),
        Some("systemd-run --user --scope -p Delegate=yes jax-runner …")
    );

    m.cgroups.version = "v1".into();
    assert!(fix(&judged(m.clone()), SandboxLayer::Cgroups).contains("cgcreate"));
    m.cgroups.memory = true;
    let r = judged(m);
    let f = layer(&r, SandboxLayer::Cgroups);
    assert_eq!(f.state, LayerState::Partial);
    assert!(
        f.message.contains("enforces --memory-limit"),
        "{}",
        f.message
    );
}

#[test]
fn uid_maps_and_cgroup_hierarchies_are_read() {
    assert!(maps(
        "         0          0 4294967295\n",
        FIRST_UID,
        LAST_UID
    ));
    assert!(maps("0 100000 65536\n", FIRST_UID, LAST_UID));
    assert!(!maps("0 1000 1\n", FIRST_UID, LAST_UID));
    assert!(!maps("0 100000 65000\n", FIRST_UID, LAST_UID));

    let v1 = "9:name=systemd:/\n8:pids:/\n4:memory:/x\n0::/\n";
    assert_eq!(hierarchy(v1, ""), "v1");
    assert_eq!(hierarchy("0::/user.slice\n", "cpu io memory pids\n"), "v2");
    assert_eq!(hierarchy("0::/\n", "cpu io\n"), "none");
    assert_eq!(hierarchy("", ""), "none");
}

#[test]
fn this_machines_probes_agree_with_the_runner() {
    let r = inspect();
    assert_eq!(r.landlock.abi, landlock::abi());
    assert_eq!(r.landlock.error.is_some(), r.landlock.abi.is_none());
    assert_eq!(r.seccomp.filter, seccomp::programs().is_some());
    assert_eq!(r.bwrap.works, bwrap::detect().is_ok());
    assert_eq!(r.findings.len(), 6);
    assert_eq!(r.layers.contains(&"uid".to_string()), r.root);
}
