use super::*;

fn bwrap(privileged: bool) -> Bwrap {
    Bwrap {
        path: "/usr/bin/bwrap".into(),
        version: "bubblewrap 0.8.0".into(),
        userns: !privileged,
        cap_drop: true,
        privileged,
        disable_userns: true,
        tmpfs_size: true,
    }
}

fn strings(a: Vec<OsString>) -> Vec<String> {
    a.into_iter().map(|s| s.into_string().unwrap()).collect()
}

#[test]
fn a_cold_start_drops_everything_and_ends_in_the_separator() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let m = Mounts {
        writable: vec![data.clone()],
        cwd: data.clone(),
        ..Default::default()
    };
    let a = strings(args_of(&bwrap(false), &m));
    assert!(a
        .windows(3)
        .any(|w| w[0] == "--bind" && w[1] == w[2] && w[1] == data.to_str().unwrap()));
    for flag in [
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--unshare-user",
        "--disable-userns",
    ] {
        assert!(a.iter().any(|s| s == flag), "{flag} in {a:?}");
    }
    assert!(a.windows(2).any(|w| w[0] == "--cap-drop" && w[1] == "ALL"));
    assert!(!a.iter().any(|s| s == "--cap-add"), "{a:?}");
    assert!(a.windows(2).any(|w| w[0] == "--proc" && w[1] == "/proc"));
    assert!(a
        .windows(4)
        .any(|w| w == ["--perms", "1777", "--tmpfs", "/tmp"]));
    assert_eq!(a.last().unwrap(), "--");
}

#[test]
fn as_root_no_user_namespace_maps_the_script_to_the_hosts_root() {
    let a = strings(args_of(&bwrap(true), &Mounts::default()));
    assert!(!a.iter().any(|s| s == "--unshare-user"), "{a:?}");
    // Only what the helper needs to drop to the sandbox user, which then has none.
    let added: Vec<&String> = a
        .windows(2)
        .filter(|w| w[0] == "--cap-add")
        .map(|w| &w[1])
        .collect();
    assert_eq!(
        added,
        ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN"]
    );
    let z = strings(zygote_args(&bwrap(true), &Mounts::default()));
    assert!(!z.iter().any(|s| s == "--unshare-user" || s == "--cap-add"));
}

#[test]
fn the_zygote_keeps_capabilities_only_in_its_own_user_namespace() {
    let a = strings(zygote_args(&bwrap(false), &Mounts::default()));
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

#[test]
fn a_memory_limit_bounds_each_scratch_tmpfs_where_bwrap_can() {
    let m = Mounts {
        scratch_size: Some(300 << 20),
        ..Default::default()
    };
    let bounded = ["--perms", "1777", "--size", "314572800", "--tmpfs", "/tmp"];
    let a = strings(args_of(&bwrap(false), &m));
    assert!(a.windows(6).any(|w| w == bounded), "{a:?}");
    let old = Bwrap {
        tmpfs_size: false,
        ..bwrap(false)
    };
    let a = strings(args_of(&old, &m));
    assert!(!a.iter().any(|s| s == "--size"), "{a:?}");
    assert!(a
        .windows(4)
        .any(|w| w == ["--perms", "1777", "--tmpfs", "/tmp"]));
    let a = strings(args_of(&bwrap(false), &Mounts::default()));
    assert!(
        !a.iter().any(|s| s == "--size"),
        "no limit, no bound: {a:?}"
    );
}

/// bwrap's arguments for `m`, its steps made as the policy makes them.
fn args_of(b: &Bwrap, m: &Mounts) -> Vec<OsString> {
    args(b, m, &steps(m))
}
