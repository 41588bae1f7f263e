use super::*;
use crate::sandbox::grants;

fn dirs(root: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| {
            let d = root.join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect()
}

/// A folder for a test's tree (the checkout's `target/`, not `/tmp`, whose `noexec`
/// or size some machines limit).
fn outside_tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/target")).unwrap()
}

/// No host folder hidden or replaced: a test's tree may lie anywhere (under `/tmp` or
/// `/var` in a CI checkout) and its own covers still show.
const NONE: System = System {
    root: None,
    details: &[],
    scratch: &[],
};

fn steps(m: &Mounts) -> Vec<MountStep> {
    steps_in(m, NONE)
}

fn at(s: &[MountStep], step: &MountStep) -> usize {
    s.iter()
        .position(|x| x == step)
        .unwrap_or_else(|| panic!("no {step:?} in {s:?}"))
}

#[test]
fn home_is_hidden_then_the_needed_folders_come_back_by_fresh_folders() {
    let tmp = outside_tmp();
    let d = dirs(tmp.path(), &["home/.cache/venv", "data"]);
    let home = tmp.path().join("home");
    let s = steps(&Mounts {
        home: Some(home.clone()),
        readable: vec![d[0].clone(), PathBuf::from("/usr")],
        writable: vec![d[1].clone()],
        ..Default::default()
    });
    let cover = at(
        &s,
        &MountStep::Scratch {
            path: home.clone(),
            size: None,
        },
    );
    let way = at(&s, &MountStep::Dir(home.join(".cache")));
    let venv = at(&s, &MountStep::ReadOnly(d[0].clone()));
    assert!(cover < way && way < venv, "{s:?}");
    assert!(s.contains(&MountStep::Writable(d[1].clone())));
    assert!(
        !s.contains(&MountStep::ReadOnly("/usr".into())),
        "outside a hidden folder nothing needs binding back"
    );
    assert!(
        !s.contains(&MountStep::RemountReadOnly(home)),
        "$HOME is scratch"
    );
}

/// The view grants: every top-level folder of the host but the system's and the
/// kernel's is an empty read-only tmpfs, every top-level file masked, and of `/etc`
/// only the granted entries come back; the password hashes never do.
#[test]
fn every_top_level_folder_but_the_granted_is_hidden_and_read_only() {
    let s = super::steps(&Mounts::default());
    for scratch in ["/tmp", "/dev/shm"] {
        assert!(
            s.contains(&MountStep::Scratch {
                path: scratch.into(),
                size: None
            }),
            "{s:?}"
        );
        assert!(!s.contains(&MountStep::RemountReadOnly(scratch.into())));
    }
    let kept: Vec<&str> = grants::kept_at_top().collect();
    for entry in std::fs::read_dir("/").unwrap().flatten() {
        let path = entry.path();
        let t = entry.file_type().unwrap();
        let name = path.to_str().unwrap();
        if kept.contains(&name) || name == "/tmp" || t.is_symlink() {
            assert!(!s.contains(&MountStep::Tmpfs(path.clone())), "{name}");
            continue;
        }
        if t.is_dir() {
            assert!(s.contains(&MountStep::Tmpfs(path.clone())), "{name}: {s:?}");
            assert!(s.contains(&MountStep::RemountReadOnly(path.clone())));
        } else if t.is_file() {
            assert!(s.contains(&MountStep::Mask(path.clone())), "{name}");
        }
    }
    for granted in grants::ETC.iter().filter(|p| Path::new(p).exists()) {
        assert!(
            s.contains(&MountStep::ReadOnly(granted.into())),
            "{granted}"
        );
    }
    let shown: Vec<&Path> = s.iter().map(MountStep::path).collect();
    for secret in [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/opt",
        "/srv",
    ] {
        let bound = |p: &&Path| {
            Path::new(secret).starts_with(p) && p.starts_with("/etc") && *p != Path::new("/etc")
        };
        assert!(!shown.iter().any(bound), "{secret} is bound back: {s:?}");
    }
}

#[test]
fn a_home_inside_a_hidden_folder_stays_writable() {
    let s = super::steps(&Mounts {
        home: Some("/home/someone".into()),
        ..Default::default()
    });
    if is_real_dir(Path::new("/home")) {
        let home = at(
            &s,
            &MountStep::Scratch {
                path: "/home/someone".into(),
                size: None,
            },
        );
        let place = at(&s, &MountStep::Dir("/home/someone".into()));
        assert!(at(&s, &MountStep::Tmpfs("/home".into())) < place, "{s:?}");
        assert!(place < home, "its mount point is made first: {s:?}");
        assert!(!s.contains(&MountStep::RemountReadOnly("/home/someone".into())));
    }
}

#[test]
fn sources_and_outputs_are_hidden_but_the_scripts_own_folders() {
    let tmp = outside_tmp();
    let tree = tmp.path().join("tree");
    let d = dirs(&tree, &["a/jax", "b/jax", "results/data/a"]);
    let results = tree.join("results");
    let s = steps(&Mounts {
        readable: vec![d[0].clone()],
        writable: vec![d[2].clone()],
        sources: vec![tree.clone()],
        outputs: vec![results.clone(), PathBuf::from("/")],
        ..Default::default()
    });
    let hidden = at(&s, &MountStep::Tmpfs(tree.clone()));
    let way = at(&s, &MountStep::Dir(tree.join("a")));
    let own_source = at(&s, &MountStep::ReadOnly(d[0].clone()));
    let data_way = at(&s, &MountStep::Dir(results.join("data")));
    let own_data = at(&s, &MountStep::Writable(d[2].clone()));
    assert!(
        hidden < way && way < own_source && data_way < own_data,
        "{s:?}"
    );
    assert!(!s.contains(&MountStep::ReadOnly(d[1].clone())));
    assert!(!s.contains(&MountStep::Tmpfs("/".into())), "never hide /");
    assert!(
        !s.contains(&MountStep::Tmpfs(results)),
        "inside the hidden tree already"
    );
    let frozen = at(&s, &MountStep::RemountReadOnly(tree));
    assert!(frozen > own_data, "read-only after the binds: {s:?}");
}

#[test]
fn a_folder_the_sandbox_user_cannot_enter_is_replaced_on_the_way() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = outside_tmp();
    let private = tmp.path().join("private");
    let d = dirs(&private, &["tree/m/jax", "tree/results/data/m"]);
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let base = Mounts {
        readable: vec![d[0].clone()],
        writable: vec![d[1].clone()],
        cwd: d[0].clone(),
        sources: vec![private.join("tree")],
        ..Default::default()
    };
    let user = SandboxUser {
        uid: 61999,
        gid: 61999,
    };
    let mine = steps(&base);
    assert!(
        !mine.contains(&MountStep::Tmpfs(private.clone())),
        "the runner's own user passes: {mine:?}"
    );
    let s = steps(&Mounts {
        user: Some(user),
        ..base
    });
    // The 0700 folder, or a folder above it the user cannot enter either (a checkout
    // under /root), is hidden; the way to the script is made of fresh folders.
    let cover = s
        .iter()
        .position(|x| matches!(x, MountStep::Tmpfs(p) if private.starts_with(p)))
        .unwrap_or_else(|| panic!("nothing hides {private:?}: {s:?}"));
    let way = at(&s, &MountStep::Dir(private.join("tree")));
    assert!(cover < way && way < at(&s, &MountStep::ReadOnly(d[0].clone())));
    // The tree gets a cover of its own inside it (the shape `split` cuts), after it.
    let tree = at(&s, &MountStep::Tmpfs(private.join("tree")));
    assert!(cover < tree, "{s:?}");
    assert!(s.contains(&MountStep::RemountReadOnly(s[cover].path().to_path_buf())));
}

#[test]
fn a_bind_inside_a_bind_needs_no_folders_made() {
    let tmp = outside_tmp();
    let tree = tmp.path().join("tree");
    let d = dirs(&tree, &["m/jax/out/data"]);
    let script = tree.join("m/jax");
    let s = steps(&Mounts {
        readable: vec![script.clone()],
        writable: vec![d[0].clone()],
        sources: vec![tree.clone()],
        ..Default::default()
    });
    assert!(!s.contains(&MountStep::Dir(script.join("out"))), "{s:?}");
    assert!(at(&s, &MountStep::ReadOnly(script)) < at(&s, &MountStep::Writable(d[0].clone())));
}

#[test]
fn a_scratch_step_carries_its_bound_to_the_zygote() {
    let s = steps(&Mounts {
        home: Some("/nonexistent-home".into()),
        scratch_size: Some(1 << 20),
        ..Default::default()
    });
    let scratch = MountStep::Scratch {
        path: "/nonexistent-home".into(),
        size: Some(1 << 20),
    };
    assert!(s.contains(&scratch), "{s:?}");
}

/// `under` agrees with `Path::starts_with` on the normalized forms of any two paths,
/// however they were written (doubled slashes, `.`, a trailing slash).
#[test]
fn under_is_starts_with_on_normalized_paths() {
    let paths = [
        "/",
        "/a",
        "/a/",
        "/a/b",
        "/a//b",
        "/a/./b",
        "/a/bc",
        "/ab",
        "/a/b/c/",
        "/b",
        "/a/b/..",
        "/a/b/../c",
    ];
    for p in paths {
        for b in paths {
            let (p, b) = (normal(Path::new(p)), normal(Path::new(b)));
            assert_eq!(under(&p, &b), p.starts_with(&b), "{p:?} under {b:?}");
        }
    }
    let m = Mounts {
        readable: vec!["/x//y/./z/".into()],
        cwd: "/x/y/".into(),
        ..Default::default()
    }
    .normalized();
    assert_eq!(m.readable, vec![PathBuf::from("/x/y/z")]);
    assert_eq!(m.cwd, PathBuf::from("/x/y"));
}
