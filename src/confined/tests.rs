use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use super::*;

/// Runs `f` on a thread and fails the test if it takes more than five seconds: what
/// is tested here must never block.
fn quickly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().expect_err("no value, so it panicked"))
        }
        Err(_) => panic!("blocked: a FIFO or device was waited on"),
    }
}

/// Runs `check` with openat2 and again with the component-by-component fallback.
fn both(check: impl Fn() + Send + Sync + Clone + 'static) {
    for components in [false, true] {
        let check = check.clone();
        quickly(move || {
            FORCE_COMPONENTS.with(|f| f.set(components));
            check();
        });
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(CWD, path, Mode::from(0o644)).unwrap();
}

#[test]
fn a_regular_file_reads_within_its_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/x.json"), "12345").unwrap();
    both(move || {
        assert_eq!(
            read_file(&root, Path::new("a/b/x.json"), 5).unwrap(),
            b"12345"
        );
        let err = read_file(&root, Path::new("a/b/x.json"), 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "larger than the 4 bytes the runner reads (5 bytes)"
        );
        assert!(read_file(&root, Path::new("a/none"), 4)
            .unwrap_err()
            .is_not_found());
    });
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    mkfifo(&root.join("t.json"));
    both(move || {
        let err = read_file(&root, Path::new("t.json"), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (fifo)");
        let err = probe(&root, Path::new("t.json"), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (fifo)");
        assert!(matches!(
            open_followed(&root.join("t.json")),
            Err(Refused::NotRegular(Kind::Fifo))
        ));
    });
}

#[test]
fn a_symlink_to_dev_zero_is_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    symlink("/dev/zero", root.join("t.json")).unwrap();
    both(move || {
        let err = read_in(&root.join("t.json"), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (symlink)");
        let err = probe(&root, Path::new("t.json"), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (symlink)");
        // Followed on purpose, it is still a device, not a file.
        assert!(matches!(
            open_followed(&root.join("t.json")),
            Err(Refused::NotRegular(Kind::CharDevice))
        ));
    });
}

#[test]
fn a_large_sparse_file_is_refused_by_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("big.json");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1536 << 20).unwrap();
    let err = read_in(&path, 16 << 20).unwrap_err();
    assert_eq!(
        err.to_string(),
        "larger than the 16 MiB the runner reads (1.5 GiB)"
    );
    assert!(matches!(
        probe(tmp.path(), Path::new("big.json"), 16 << 20),
        Err(Refused::TooLarge { .. })
    ));
    // The end of it is still there to read, bounded.
    assert_eq!(open_in(&path).unwrap().tail(10).unwrap(), vec![0u8; 10]);
}

#[test]
fn a_symlink_at_any_component_is_refused_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("b")).unwrap();
    std::fs::write(outside.path().join("b/x.json"), "secret").unwrap();
    std::fs::write(outside.path().join("x.json"), "secret").unwrap();
    for (at, planted) in [("a", "a/b/x.json"), ("a/b", "a/b/x.json")] {
        let root = tmp.path().join(at.replace('/', "_"));
        let link = root.join(at);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let target = if at == "a" {
            outside.path().to_path_buf()
        } else {
            outside.path().join("b")
        };
        symlink(target, &link).unwrap();
        let expected = format!(
            "{} is a symlink, which the runner does not follow",
            link.display()
        );
        both(move || {
            let err = read_file(&root, Path::new(planted), 1 << 20).unwrap_err();
            assert_eq!(err.to_string(), expected);
        });
    }
    let root = tmp.path().join("last");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    symlink(outside.path().join("x.json"), root.join("a/b/x.json")).unwrap();
    both(move || {
        let err = read_file(&root, Path::new("a/b/x.json"), 1 << 20).unwrap_err();
        assert!(matches!(err, Refused::NotRegular(Kind::Symlink)), "{err}");
        let err = read_file(&root, Path::new("a/../../x.json"), 1 << 20).unwrap_err();
        assert!(matches!(err, Refused::Outside { .. }), "{err}");
    });
}

#[test]
fn folders_and_sockets_are_not_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir(root.join("d")).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(root.join("s")).unwrap();
    both(move || {
        let err = read_file(&root, Path::new("d"), 10).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (directory)");
        let err = read_file(&root, Path::new("s"), 10).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file (socket)");
    });
}

#[test]
fn make_dirs_replaces_or_refuses_a_planted_symlink_and_leaves_its_target_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = tmp.path().join("results");
    std::fs::create_dir_all(root.join("data")).unwrap();
    symlink(outside.path(), root.join("data/x")).unwrap();
    let err = make_dirs(&root, Path::new("data/x/sub"), Planted::Refuse).unwrap_err();
    assert!(
        matches!(err, Refused::Symlink(ref p) if p == &root.join("data/x")),
        "{err}"
    );
    let made = make_dirs(&root, Path::new("data/x/sub"), Planted::Replace).unwrap();
    assert_eq!(made.path, root.join("data/x/sub"));
    assert_eq!(made.replaced, vec![root.join("data/x")]);
    assert!(root.join("data/x/sub").is_dir());
    assert!(!root.join("data/x").is_symlink());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // A planted link above, at `data` itself, goes the same way.
    std::fs::remove_dir_all(root.join("data")).unwrap();
    symlink(outside.path(), root.join("data")).unwrap();
    let made = make_dirs(&root, Path::new("data/y"), Planted::Replace).unwrap();
    assert_eq!(made.replaced, vec![root.join("data")]);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // A file where a folder should be is never removed.
    std::fs::write(root.join("data/file"), "keep").unwrap();
    let err = make_dirs(&root, Path::new("data/file/z"), Planted::Replace).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a folder (regular file)",
            root.join("data/file").display()
        )
    );
}

#[test]
fn create_file_replaces_a_planted_link_or_fifo_without_following_it() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let log = tmp.path().join("x.stdout.log");
    symlink(&victim, &log).unwrap();
    std::io::Write::write_all(&mut create_file(&log).unwrap(), b"mine").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "mine");
    std::fs::remove_file(&log).unwrap();
    mkfifo(&log);
    quickly(move || create_file(&log).map(|_| ()).unwrap());
}

#[test]
fn list_files_never_enters_a_symlinked_folder_or_opens_a_fifo() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "x").unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for name in ["a.json", "sub/b.csv", ".jax-runner-telemetry.1.json"] {
        std::fs::write(dir.join(name), "x").unwrap();
    }
    symlink(outside.path(), dir.join("link")).unwrap();
    mkfifo(&dir.join("pipe"));
    let (files, cut) = quickly(move || list_files(&dir, 10));
    let names: Vec<_> = files
        .iter()
        .map(|f| f.strip_prefix(tmp.path()).unwrap().to_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a.json", "link", "pipe", "sub/b.csv"]);
    assert!(!cut);
    let (files, cut) = list_files(tmp.path(), 2);
    assert_eq!((files.len(), cut), (2, true));
    // A data folder that is itself a link lists nothing.
    assert_eq!(list_files(&tmp.path().join("link"), 10).0.len(), 0);
}

#[test]
fn privilege_bits_are_cleared_and_links_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "x").unwrap();
    std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o4777)).unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
    };
    std::fs::write(dir.join("sub/suid"), "x").unwrap();
    set(&dir.join("sub/suid"), 0o4755);
    std::fs::write(dir.join("plain"), "x").unwrap();
    set(&dir.join("plain"), 0o644);
    set(&dir.join("sub"), 0o2777);
    mkfifo(&dir.join("pipe"));
    set(&dir.join("pipe"), 0o666);
    symlink(&victim, dir.join("link")).unwrap();
    let dir2 = dir.clone();
    let mut changed = quickly(move || clear_privilege_bits(&dir2).unwrap());
    changed.sort();
    assert_eq!(
        changed,
        vec![dir.join("pipe"), dir.join("sub"), dir.join("sub/suid")]
    );
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir.join("sub/suid")), 0o755);
    assert_eq!(mode(&dir.join("sub")), 0o775);
    assert_eq!(mode(&dir.join("pipe")), 0o664);
    assert_eq!(mode(&dir.join("plain")), 0o644);
    assert_eq!(mode(&victim), 0o4777, "the link's target was changed");
    assert!(clear_privilege_bits(&dir.join("link")).is_err());
}

#[test]
fn rename_moves_below_roots_and_replaces_a_planted_link_on_the_way() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("logs")).unwrap();
    std::fs::write(root.join("logs/old.stdout.log"), "x").unwrap();
    symlink(outside.path(), root.join("history")).unwrap();
    rename(
        root,
        Path::new("logs/old.stdout.log"),
        root,
        Path::new("history/run/logs/old.stdout.log"),
    )
    .unwrap();
    assert!(root.join("history/run/logs/old.stdout.log").is_file());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let entries = list_dir(root, Path::new("history/run/logs"), 10).unwrap();
    assert_eq!(entries, vec![("old.stdout.log".into(), Kind::Regular)]);
}

#[test]
fn sizes_read_as_people_write_them() {
    assert_eq!(Bytes(512).to_string(), "512 bytes");
    assert_eq!(Bytes(16 << 20).to_string(), "16 MiB");
    assert_eq!(Bytes(1536 << 20).to_string(), "1.5 GiB");
}

/// Every kind of entry a data folder can hold but a regular file or a folder.
fn plant_specials(dir: &Path, outside: &Path) {
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    std::fs::write(dir.join("kept.json"), "{}").unwrap();
    std::fs::write(dir.join("nested/deeper/kept.csv"), "a,b\n").unwrap();
    mkfifo(&dir.join("pipe"));
    mkfifo(&dir.join("nested/deeper/pipe"));
    symlink(outside, dir.join("to_outside")).unwrap();
    symlink("/nonexistent/anywhere", dir.join("dangling")).unwrap();
    symlink("loop_b", dir.join("loop_a")).unwrap();
    symlink("loop_a", dir.join("loop_b")).unwrap();
    symlink("kept.json", dir.join("to_sibling")).unwrap();
    symlink("../kept.json", dir.join("nested/up")).unwrap();
    std::os::unix::net::UnixListener::bind(dir.join("nested/sock")).unwrap();
}

#[test]
fn tidy_keeps_only_regular_files_and_folders_and_opens_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let dir = tmp.path().join("data");
    plant_specials(&dir, &victim);
    // A device node, where this test may make one (root): /dev/null's numbers.
    let device = rustix::fs::mknodat(
        CWD,
        dir.join("null"),
        rustix::fs::FileType::CharacterDevice,
        Mode::from(0o666),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
    };
    set(&dir.join("kept.json"), 0o4757);
    let dir2 = dir.clone();
    let t = quickly(move || tidy(&dir2, Keep::FilesAndFolders).unwrap());
    let mut expected = vec![
        ("dangling", Kind::Symlink),
        ("loop_a", Kind::Symlink),
        ("loop_b", Kind::Symlink),
        ("nested/deeper/pipe", Kind::Fifo),
        ("nested/sock", Kind::Socket),
        ("nested/up", Kind::Symlink),
        ("pipe", Kind::Fifo),
        ("to_outside", Kind::Symlink),
        ("to_sibling", Kind::Symlink),
    ];
    if device {
        expected.push(("null", Kind::CharDevice));
        expected.sort_by_key(|(p, _)| *p);
    }
    let removed: Vec<(&str, Kind)> = t
        .removed
        .iter()
        .map(|(p, k)| (p.to_str().unwrap(), *k))
        .collect();
    assert_eq!(removed, expected);
    assert!(
        !t.cut && t.unopened.is_empty() && t.failed.is_none(),
        "{t:?}"
    );
    assert_eq!(t.cleared, vec![dir.join("kept.json")]);
    // What stays: the regular files and the folders, and the links' targets untouched.
    let (files, _) = list_files(&dir, 100);
    assert_eq!(
        files,
        vec![dir.join("kept.json"), dir.join("nested/deeper/kept.csv")]
    );
    assert!(dir.join("nested/deeper").is_dir());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        std::fs::metadata(dir.join("kept.json"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    // A second pass finds nothing more.
    let again = tidy(&dir, Keep::FilesAndFolders).unwrap();
    assert!(again.removed.is_empty() && again.cleared.is_empty());
}

#[test]
fn tidy_keeping_everything_only_clears_bits() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    plant_specials(&dir, outside.path());
    let t = quickly(move || tidy(&dir, Keep::Everything).unwrap());
    assert!(t.removed.is_empty(), "{t:?}");
    assert!(tmp.path().join("cache/pipe").symlink_metadata().is_ok());
    assert!(tmp.path().join("cache/to_outside").is_symlink());
}

#[test]
fn tidy_removes_what_stands_in_the_folders_place_and_ignores_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "x").unwrap();
    let link = tmp.path().join("data");
    symlink(outside.path(), &link).unwrap();
    let t = tidy(&link, Keep::FilesAndFolders).unwrap();
    assert_eq!(t.removed, vec![(PathBuf::new(), Kind::Symlink)]);
    assert!(link.symlink_metadata().is_err());
    assert!(outside.path().join("keep.txt").is_file());
    mkfifo(&link);
    let link2 = link.clone();
    let t = quickly(move || tidy(&link2, Keep::FilesAndFolders).unwrap());
    assert_eq!(t.removed, vec![(PathBuf::new(), Kind::Fifo)]);
    let t = tidy(&link, Keep::FilesAndFolders).unwrap();
    assert!(t.removed.is_empty() && t.cleared.is_empty());
    // Keeping everything, a link there is refused, as before.
    symlink(outside.path(), &link).unwrap();
    assert!(tidy(&link, Keep::Everything).is_err());
    assert!(link.is_symlink());
}

#[test]
fn tidy_stops_at_its_bound_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..20 {
        mkfifo(&tmp.path().join(format!("pipe{i}")));
    }
    let t = tidy_within(tmp.path(), Keep::FilesAndFolders, 5).unwrap();
    assert!(t.cut);
    assert_eq!(t.removed.len(), 5);
    let t = tidy_within(tmp.path(), Keep::FilesAndFolders, 100).unwrap();
    assert!(!t.cut);
    assert_eq!(t.removed.len(), 15);
}

#[test]
fn make_dir_open_dir_and_create_file_refuse_a_link_anywhere_on_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    std::fs::create_dir(base.join("a")).unwrap();
    symlink(outside.path(), base.join("a/b")).unwrap();
    let link = base.join("a/b");
    let refused = |err: Refused| matches!(err, Refused::Symlink(ref p) if p == &link);
    let err = make_dir(&base.join("a/b/c")).unwrap_err();
    assert!(refused(err));
    let err = open_dir(&link).unwrap_err();
    assert!(refused(err));
    let err = open_dir(&base.join("a/b/c")).unwrap_err();
    assert!(refused(err));
    let err = create_file(&link.join("f")).unwrap_err();
    assert!(err.to_string().contains("is a symlink"), "{err}");
    // The same link as the folder a move goes into, or comes from.
    std::fs::write(base.join("a/x"), "x").unwrap();
    let err = rename(&base, Path::new("a/x"), &link, Path::new("x")).unwrap_err();
    assert!(refused(err));
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // Without a link, the folders are made.
    make_dir(&base.join("a/c/d")).unwrap();
    assert!(base.join("a/c/d").is_dir());
}

#[test]
fn remove_tree_removes_links_never_what_they_point_to() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "keep").unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let dir = base.join("results");
    std::fs::create_dir_all(dir.join("logs/deep")).unwrap();
    std::fs::write(dir.join("logs/deep/a.log"), "a").unwrap();
    symlink(outside.path(), dir.join("logs/out")).unwrap();
    remove_tree(&dir).unwrap();
    assert!(!dir.exists());
    assert!(outside.path().join("keep").is_file());
    // A link as the folder itself is refused, not removed through.
    let link = base.join("linked");
    symlink(outside.path(), &link).unwrap();
    let err = remove_tree(&link.join("keep")).unwrap_err();
    assert!(
        matches!(err, Refused::Symlink(ref p) if p == &link),
        "{err}"
    );
    assert!(outside.path().join("keep").is_file());
}

#[test]
fn a_listing_names_up_to_its_limit_and_counts_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    for i in 0..12 {
        let at = if i % 2 == 0 { "sub" } else { "" };
        std::fs::write(tmp.path().join(at).join(format!("f{i:02}")), "x").unwrap();
    }
    let l = relative_files(tmp.path(), 10);
    assert_eq!((l.files.len(), l.total, l.at_least), (10, 12, false));
    assert_eq!(
        l.cut("data_files").as_deref(),
        Some("data_files: the list names 10 of 12 files (it stops at 10)")
    );
    let all = relative_files(tmp.path(), 100);
    assert_eq!((all.files.len(), all.total), (12, 12));
    assert_eq!(all.cut("data_files"), None);
    assert!(
        all.files.contains(&"sub/f00".to_string()),
        "{:?}",
        all.files
    );
}
