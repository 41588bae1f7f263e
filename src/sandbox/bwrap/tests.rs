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

/// A stand-in bwrap in `dir`: `--help` lists `options`, a namespace probe exits
/// `probe_exit` (saying so on stderr), and `--version` answers only once a probe has
/// started, waiting up to 20 s for one: a detection that asks one question after
/// another gets "asked alone" for the version.
fn fake_bwrap(dir: &Path, options: &str, probe_exit: i32) -> PathBuf {
    use std::io::Write;
    let path = dir.join("bwrap");
    let script = format!(
        "#!/bin/sh\n\
         d=$(dirname \"$0\")\n\
         case \"$1\" in\n\
         --version) i=0; while [ ! -e \"$d/probe-started\" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\n\
         \x20 if [ -e \"$d/probe-started\" ]; then echo 'bubblewrap 0.9.0'; else echo 'asked alone'; fi;;\n\
         --help) for o in {options}; do echo \"    $o ARG\"; done;;\n\
         *) touch \"$d/probe-started\"; echo 'no namespaces here' >&2; exit {probe_exit};;\n\
         esac\n"
    );
    // Written by a child of its own: no descriptor of it open for writing is ever in
    // this process, where another test's fork could hold it and make its exec fail
    // with ETXTBSY.
    let mut sh = Command::new("sh")
        .args(["-c", "cat > \"$0\" && chmod 755 \"$0\""])
        .arg(&path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    sh.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(sh.wait().unwrap().success());
    path
}

/// What detection makes of a stand-in bwrap (see [`fake_bwrap`]), and its path.
fn detect_fake(options: &str, probe_exit: i32) -> (Result<Bwrap, SandboxError>, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_bwrap(tmp.path(), options, probe_exit);
    (detect_at(fake.clone()), fake)
}

#[test]
fn detection_asks_the_version_the_options_and_the_first_probe_side_by_side() {
    let (detected, fake) = detect_fake("--dir --perms --size", 0);
    let b = detected.unwrap();
    assert_eq!(
        b.version, "bubblewrap 0.9.0",
        "the version waited for no probe"
    );
    assert_eq!(b.path, fake);
    assert!(b.tmpfs_size, "--size is listed");
    assert!(!b.disable_userns, "--disable-userns is not");
    assert!(b.cap_drop);
}

#[test]
fn a_bwrap_without_perms_is_too_old_whatever_its_probe_says() {
    match detect_fake("--dir --size", 0).0 {
        Err(SandboxError::TooOld { version }) => assert_eq!(version, "bubblewrap 0.9.0"),
        other => panic!("expected TooOld, got {other:?}"),
    }
}

#[test]
fn a_probe_that_fails_every_try_says_what_bwrap_said() {
    match detect_fake("--dir --perms", 1).0 {
        Err(SandboxError::Namespaces { stderr }) => assert_eq!(stderr, "no namespaces here"),
        other => panic!("expected Namespaces, got {other:?}"),
    }
}
