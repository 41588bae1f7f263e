//! The runner never writes through a link it did not make (issue 30): with
//! `execution_results`, `execution_results/jax` or GNN's `12_execute_output` a symlink
//! to a root-only folder in a tree another user owns, a root runner refuses before
//! anything is written (exit 2, the link and the fix named), no script runs, and the
//! folder the link points to is byte for byte as it was. A `--results-dir` the user
//! names is taken as given, a link included.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::user::{set_mode, TEST_GID, TEST_UID};
use common::*;

/// What a folder holds, without following a link: each entry's kind, mode, owner and,
/// for files, contents; for links, where they point.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        let what = if meta.file_type().is_symlink() {
            format!(
                "link to {}",
                std::fs::read_link(entry.path()).unwrap().display()
            )
        } else if meta.is_file() {
            format!("file {:?}", std::fs::read(entry.path()).unwrap())
        } else {
            "folder".to_string()
        };
        let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
        out.insert(
            rel,
            format!("{what} mode {:o} owner {}", meta.mode(), meta.uid()),
        );
    }
    out
}

/// A folder only root may enter, outside the tree, with a report already in it: what
/// a planted link points the runner at.
fn root_only_folder() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("jr-root-only-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(dir.path().join("report.html"), "<p>root's own report</p>\n").unwrap();
    std::fs::create_dir(dir.path().join("jax")).unwrap();
    std::fs::write(
        dir.path().join("jax/report.html"),
        "<p>root's jax report</p>\n",
    )
    .unwrap();
    set_mode(dir.path(), 0o700);
    dir
}

/// Makes everything under `path` the test user's, as a tree another user wrote is.
fn give_to_user(path: &Path) {
    for entry in walkdir::WalkDir::new(path) {
        let entry = entry.unwrap();
        std::os::unix::fs::lchown(entry.path(), Some(TEST_UID), Some(TEST_GID)).unwrap();
    }
}

/// Root runs the tree; the checks every refusal shares: exit 2, the link and the fix
/// on stderr, the tree and the link's target unchanged (so no lock, no log, no data
/// folder, no script output).
fn assert_refused(
    tree: &Tree,
    output_dir: &Path,
    target: &Path,
    link: &Path,
    fix: &str,
    extra: &[&str],
) {
    let before_tree = snapshot(&tree.root());
    let before_target = snapshot(target);
    let out = run_at(output_dir, extra);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "stderr: {err}");
    assert!(
        err.contains(&format!("`{}` is a symbolic link", link.display())),
        "the link is not named: {err}"
    );
    assert!(
        err.contains(&format!("(to `{}`)", target.display())),
        "the link's target is not named: {err}"
    );
    assert!(
        err.contains("does not write through links"),
        "no reason: {err}"
    );
    assert!(err.contains(fix), "no fix {fix:?}: {err}");
    assert_eq!(snapshot(target), before_target, "the link's target changed");
    assert_eq!(snapshot(&tree.root()), before_tree, "the tree changed");
}

fn as_root(case: &str) -> bool {
    prereq::require(prereq::Prereq::Root, prereq::root(), case)
}

/// The runner as root on `output_dir` (CPU, cache off, the managed interpreter).
fn run_at(output_dir: &Path, extra: &[&str]) -> Output {
    assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--output-dir")
        .arg(output_dir)
        .arg("--python")
        .arg(python())
        .args(["--compilation-cache", "off", "--device", "cpu"])
        .args(extra)
        .env_remove("JAX_PLATFORM_NAME")
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap()
}

/// A plain tree (one script) whose `rel` is a link to a root-only folder, given to
/// the test user; `rel`'s parent folders are made real first.
fn tree_with_link(rel: &str) -> (tempfile::TempDir, Tree, PathBuf) {
    let target = root_only_folder();
    let tree = Tree::outside_tmp();
    tree.fixture("ok_plain.py", "jax/s.py");
    let link = tree.root().join(rel);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    give_to_user(&tree.root());
    (target, tree, link)
}

const FIX: &str = "Remove the link, or name the folder with --results-dir if you mean it";

#[test]
fn execution_results_as_a_link_is_refused_and_nothing_is_written() {
    if !as_root("execution_results as a link") {
        return;
    }
    let (target, tree, link) = tree_with_link("execution_results");
    assert_refused(&tree, &tree.root(), target.path(), &link, FIX, &[]);
}

#[test]
fn execution_results_jax_as_a_link_is_refused_and_nothing_is_written() {
    if !as_root("execution_results/jax as a link") {
        return;
    }
    let (target, tree, link) = tree_with_link("execution_results/jax");
    assert_refused(&tree, &tree.root(), target.path(), &link, FIX, &[]);
    // A dry run writes nothing either, and says the same.
    let dry = ["--dry-run"];
    assert_refused(
        &tree,
        &tree.root(),
        target.path(),
        &link,
        "--results-dir",
        &dry,
    );
}

#[test]
fn gnn_step12_folder_as_a_link_is_refused_and_nothing_is_written() {
    if !as_root("12_execute_output as a link") {
        return;
    }
    let target = root_only_folder();
    let tree = Tree::outside_tmp();
    one_model_tree(&tree.root(), "ok_plain.py");
    let link = tree.root().join("12_execute_output");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    give_to_user(&tree.root());
    // At the tree, and as GNN's step 12 points it: at the render folder.
    for output_dir in [tree.root(), tree.root().join("11_render_output")] {
        assert_refused(
            &tree,
            &output_dir,
            target.path(),
            &link,
            "Remove the link: jax-runner makes this folder itself",
            &[],
        );
    }
}

#[test]
fn a_results_dir_the_user_names_is_taken_as_given_link_and_all() {
    if !as_root("--results-dir as a link") {
        return;
    }
    let elsewhere = tempfile::Builder::new()
        .prefix("jr-results-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let real = elsewhere.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
    let named = elsewhere.path().join("named");
    std::os::unix::fs::symlink(&real, &named).unwrap();
    let tree = Tree::outside_tmp();
    tree.fixture("ok_plain.py", "jax/s.py");
    // The tree's own default is a link to root's folder: refused without the option.
    let target = root_only_folder();
    std::os::unix::fs::symlink(target.path(), tree.root().join("execution_results")).unwrap();
    give_to_user(&tree.root());
    let before_target = snapshot(target.path());
    let out = run_at(&tree.root(), &["--results-dir", named.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let result = read_json(&real.join("s_results.json"));
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert!(real.join("performance_metrics.json").is_file());
    assert!(real.join("report.html").is_file());
    assert!(named.is_symlink(), "the named link was replaced");
    assert_eq!(snapshot(target.path()), before_target);
}
