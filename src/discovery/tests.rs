//! Discovery against real folder trees: rules, order, ids and hostile layouts.

use super::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn tree() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    (tmp, root)
}

fn run(root: &Path) -> Discovery {
    discover(
        root,
        &DiscoverOptions {
            recursive: true,
            exclude: vec![],
        },
    )
    .unwrap()
}

fn rels(d: &Discovery) -> Vec<String> {
    d.scripts
        .iter()
        .map(|s| s.relative_path.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn finds_jax_folder_and_importing_scripts_in_order() {
    let (_t, root) = tree();
    write(&root, "b/jax/solver.py", "print('no import needed here')\n");
    write(&root, "a/model.py", "import jax.numpy as jnp\n");
    write(&root, "a/plain.py", "import numpy\n");
    write(&root, "a/jax/__init__.py", "import jax\n");
    write(&root, "notes.txt", "import jax\n");
    let d = run(&root);
    assert_eq!(rels(&d), vec!["a/model.py", "b/jax/solver.py"]);
    assert_eq!(d.scripts[0].discovered_by, DiscoveredBy::ImportsJax);
    assert_eq!(d.scripts[1].discovered_by, DiscoveredBy::JaxFolder);
    assert!(d.warnings.is_empty());
}

#[test]
fn skips_hidden_venv_cache_tests_and_excluded_folders() {
    let (_t, root) = tree();
    write(&root, ".hidden/jax/x.py", "import jax\n");
    write(&root, "__pycache__/jax/x.py", "import jax\n");
    write(&root, "tests/jax/x.py", "import jax\n");
    write(&root, "myenv/pyvenv.cfg", "home = /usr\n");
    write(&root, "myenv/lib/jax/x.py", "import jax\n");
    write(&root, "lib/site-packages/jax/x.py", "import jax\n");
    write(&root, "execution_results/jax/old.py", "import jax\n");
    write(&root, "keep/jax/x.py", "import jax\n");
    let d = discover(
        &root,
        &DiscoverOptions {
            recursive: true,
            exclude: vec![root.join("execution_results")],
        },
    )
    .unwrap();
    assert_eq!(rels(&d), vec!["keep/jax/x.py"]);
}

#[test]
fn non_recursive_stays_at_the_top() {
    let (_t, root) = tree();
    write(&root, "top.py", "import jax\n");
    write(&root, "deep/jax/x.py", "import jax\n");
    let d = discover(
        &root,
        &DiscoverOptions {
            recursive: false,
            exclude: vec![],
        },
    )
    .unwrap();
    assert_eq!(rels(&d), vec!["top.py"]);
}

#[test]
fn symlink_loops_and_dangling_links_warn_and_go_on() {
    let (_t, root) = tree();
    write(&root, "m/jax/x.py", "import jax\n");
    symlink(&root, root.join("m/loop")).unwrap();
    symlink(root.join("nowhere"), root.join("m/dangling")).unwrap();
    let d = run(&root);
    assert_eq!(rels(&d), vec!["m/jax/x.py"]);
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings.iter().any(|w| w.contains("symlink loop")));
}

/// A file reached through links, whichever way, is one script named by its real path:
/// it runs from its own folder (as `python` runs a linked script), where the sandbox
/// lets it read its neighbours.
#[test]
fn a_file_reached_through_symlinks_runs_once_by_its_real_path() {
    let (_t, root) = tree();
    write(&root, "real/jax/x.py", "import jax\n");
    symlink(root.join("real"), root.join("alias")).unwrap();
    // A folder link, a file link, and a link to a file in the folder link.
    write(&root, "links/jax/.keep", "");
    symlink(root.join("real/jax/x.py"), root.join("links/jax/same.py")).unwrap();
    symlink(root.join("alias/jax/x.py"), root.join("links/jax/again.py")).unwrap();
    let d = run(&root);
    assert_eq!(rels(&d), vec!["real/jax/x.py"]);
    assert_eq!(d.scripts[0].path, root.join("real/jax/x.py"));
    // Reached only through a link, it is still named by where it lives.
    std::fs::remove_dir_all(root.join("real")).unwrap();
    write(&root, "elsewhere/y.py", "print(1)\n");
    symlink(root.join("elsewhere/y.py"), root.join("links/jax/y.py")).unwrap();
    symlink(root.join("elsewhere"), root.join("links/aliased")).unwrap();
    let d = run(&root);
    // Linked into a `jax/` folder it is a script there, though it never names jax.
    assert_eq!(rels(&d), vec!["elsewhere/y.py"], "{:?}", d.warnings);
    assert_eq!(d.scripts[0].discovered_by, DiscoveredBy::JaxFolder);
}

#[test]
fn odd_names_spaces_unicode_and_invalid_utf8() {
    let (_t, root) = tree();
    write(&root, "my models/jax/pomdp solver.py", "import jax\n");
    write(&root, "модели/jax/модель.py", "import jax\n");
    let bad = root
        .join("x/jax")
        .join(OsStr::from_bytes(b"bad\xffname.py"));
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "import jax\n").unwrap();
    let d = run(&root);
    assert_eq!(d.scripts.len(), 3);
    let ids: Vec<&str> = d.scripts.iter().map(|s| s.id.as_str()).collect();
    assert!(ids.contains(&"pomdp_solver"));
    assert!(ids.contains(&"модель"));
    assert!(ids.contains(&"bad_name"), "{ids:?}");
    assert!(d.scripts.iter().any(|s| s.path == bad));
}

#[test]
fn same_stem_gets_parent_prefix() {
    let (_t, root) = tree();
    write(&root, "m1/jax/model.py", "import jax\n");
    write(&root, "m2/jax/model.py", "import jax\n");
    let d = run(&root);
    let ids: Vec<&str> = d.scripts.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec!["m1_jax_model", "m2_jax_model"]);
}

#[test]
fn manifest_lists_scripts_and_missing_ones() {
    let (_t, root) = tree();
    write(&root, "11_render_output/m/jax/listed.py", "import jax\n");
    write(&root, "11_render_output/m/jax/unlisted.py", "import jax\n");
    write(&root, "elsewhere/jax/other.py", "import jax\n");
    write(
        &root,
        "11_render_output/render_processing_summary.json",
        r#"{"file_results":[{"framework_results":{"jax":{"output_file":"m/jax/listed.py"}}},
            {"framework_results":{"jax":{"output_file":"q/jax/missing.py"}}}]}"#,
    );
    let d = run(&root);
    assert_eq!(
        rels(&d),
        vec!["11_render_output/m/jax/listed.py", "elsewhere/jax/other.py"]
    );
    assert_eq!(d.scripts[0].discovered_by, DiscoveredBy::Manifest);
    assert_eq!(d.missing, vec!["q/jax/missing.py"]);
}

#[test]
fn pointed_at_the_render_folder_the_manifest_decides_for_all_of_it() {
    let (_t, root) = tree();
    let render = root.join("11_render_output");
    write(&render, "m/jax/listed.py", "import jax\n");
    write(&render, "m/jax/unlisted.py", "import jax\n");
    write(&render, "stray/jax/stray.py", "import jax\n");
    write(
        &render,
        "render_processing_summary.json",
        r#"{"file_results":[{"framework_results":{"jax":{"output_file":"m/jax/listed.py"}}}]}"#,
    );
    // As when pointed at its parent: the listed script alone, recursive or not.
    for recursive in [true, false] {
        let exclude = vec![];
        let d = discover(&render, &DiscoverOptions { recursive, exclude }).unwrap();
        assert_eq!(rels(&d), vec!["m/jax/listed.py"], "recursive: {recursive}");
    }
}

#[test]
fn order_is_deterministic_across_runs() {
    let (_t, root) = tree();
    for name in ["z", "a", "m", "B", "b"] {
        write(&root, &format!("{name}/jax/s.py"), "import jax\n");
    }
    let first = rels(&run(&root));
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(first, sorted);
    assert_eq!(first, rels(&run(&root)));
}

#[test]
fn symlinks_out_of_the_tree_are_never_walked_into() {
    let (_t, root) = tree();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "jax/evil.py", "import jax\n");
    write(&root, "m/jax/x.py", "import jax\n");
    symlink(outside.path(), root.join("m/linked")).unwrap();
    symlink(
        outside.path().join("jax/evil.py"),
        root.join("m/jax/link.py"),
    )
    .unwrap();
    // A link that stays inside is still followed.
    symlink(root.join("m/jax"), root.join("inside")).unwrap();
    let d = run(&root);
    assert_eq!(rels(&d), vec!["m/jax/x.py"]);
    let out: Vec<_> = d
        .warnings
        .iter()
        .filter(|w| w.contains("out of --output-dir"))
        .collect();
    // `link.py` is met twice: in `m/jax/` and through `inside/`.
    assert_eq!(out.len(), 3, "{:?}", d.warnings);
    assert!(
        out.iter().any(|w| w.contains("m/linked: a symlink out")),
        "{out:?}"
    );
}

#[test]
fn a_fifo_named_like_a_script_does_not_hang_discovery() {
    let (_t, root) = tree();
    write(&root, "m/jax/x.py", "import jax\n");
    let fifo = root.join("m/pipe.py");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o644)).unwrap();
    symlink(&fifo, root.join("m/link.py")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = root.clone();
    std::thread::spawn(move || tx.send(rels(&run(&r))).unwrap());
    let found = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("discovery blocked on a FIFO");
    assert_eq!(found, vec!["m/jax/x.py"]);
    // Not run, and said so: the FIFO and the link to it.
    let d = run(&root);
    let fifos: Vec<_> = d.warnings.iter().filter(|w| w.contains("a FIFO")).collect();
    assert_eq!(fifos.len(), 2, "{:?}", d.warnings);
    assert!(fifos.iter().all(|w| w.contains("not a regular file")));
}

/// The same manifest entry behind a symlinked folder is refused whether the tree is
/// the pipeline or the render folder itself, and the walk never runs it either.
#[test]
fn a_manifest_entry_behind_a_link_out_is_refused_from_either_root() {
    let (_t, root) = tree();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "jax/evil.py", "import jax\n");
    let render = root.join("11_render_output");
    write(&render, "m/jax/ok.py", "import jax\n");
    symlink(outside.path(), render.join("linked")).unwrap();
    write(
        &render,
        "render_processing_summary.json",
        r#"{"jax": ["m/jax/ok.py", "linked/jax/evil.py"]}"#,
    );
    for top in [&root, &render] {
        let d = run(top);
        let scripts: Vec<_> = d.scripts.iter().map(|s| s.path.clone()).collect();
        assert_eq!(
            scripts,
            vec![render.join("m/jax/ok.py")],
            "from {}",
            top.display()
        );
        assert_eq!(d.refused, vec!["linked/jax/evil.py"]);
    }
}

/// A loop met where the walk would not go anyway (a skipped folder's name, or below
/// the top without `--recursive`) is no warning; two links to one folder enter it once.
#[test]
fn loops_where_the_walk_does_not_go_are_quiet_and_linked_folders_are_entered_once() {
    let (_t, root) = tree();
    write(&root, "m/jax/x.py", "import jax\n");
    symlink(&root, root.join("m/__pycache__")).unwrap();
    symlink(root.join("m"), root.join("one")).unwrap();
    symlink(root.join("m"), root.join("two")).unwrap();
    let walked = super::walk::walk(&super::bounds::Bounds::of(&root), true, &[]);
    assert!(walked.warnings.is_empty(), "{:?}", walked.warnings);
    // `m/jax/x.py`, and once more through whichever link was read first.
    assert_eq!(walked.candidates.len(), 2, "{:?}", walked.candidates);
    symlink(&root, root.join("loop")).unwrap();
    let d = discover(
        &root,
        &DiscoverOptions {
            recursive: false,
            exclude: vec![],
        },
    )
    .unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}
