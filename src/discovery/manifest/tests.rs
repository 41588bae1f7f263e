use super::*;
use crate::discovery::bounds::Bounds;
use serde_json::json;

#[test]
fn collects_only_jax_entries() {
    let v = json!({
        "file_results": [{
            "file": "model.md",
            "framework_results": {
                "jax": {"success": true, "output_file": "m/jax/m_jax.py"},
                "pymdp": {"success": true, "output_file": "m/pymdp/m_pymdp.py"}
            }
        }, {
            "renderings": [
                {"framework": "JAX", "script": "n/jax/n.py"},
                {"framework": "pymdp", "script": "n/pymdp/n.py"}
            ]
        }]
    });
    let mut out = Vec::new();
    collect_jax_scripts(&v, false, &mut out);
    assert_eq!(out, vec!["m/jax/m_jax.py", "n/jax/n.py"]);
}

#[test]
fn resolves_and_reports_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let render = root.join(RENDER_DIR);
    std::fs::create_dir_all(render.join("m/jax")).unwrap();
    std::fs::write(render.join("m/jax/m.py"), "import jax\n").unwrap();
    let manifest = render.join(MANIFEST_NAME);
    let doc = json!({"jax": ["m/jax/m.py", "gone/jax/gone.py"]});
    std::fs::write(&manifest, doc.to_string()).unwrap();
    assert_eq!(find(&root), Some(manifest.clone()));
    let m = load(&manifest, &Bounds::of(&root)).unwrap();
    assert_eq!(m.scripts, vec![render.join("m/jax/m.py")]);
    assert_eq!(m.missing, vec!["gone/jax/gone.py".to_string()]);
    assert_eq!(m.missing_paths, vec![render.join("gone/jax/gone.py")]);
    assert!(m.relocated.is_none());
}

#[test]
fn a_moved_tree_runs_its_own_copy_and_says_so_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let render = root.join("new").join(RENDER_DIR);
    std::fs::create_dir_all(render.join("m/jax")).unwrap();
    std::fs::write(render.join("m/jax/m.py"), "import jax\n").unwrap();
    // The original tree still exists beside it: its copy must not run.
    let old = root.join("old").join(RENDER_DIR);
    std::fs::create_dir_all(old.join("m/jax")).unwrap();
    std::fs::write(old.join("m/jax/m.py"), "import jax\n").unwrap();
    let doc = json!({"file_results": {"/in/m.md": {"framework_results": {"jax": {
        "success": true,
        "output_files": [old.join("m/jax/m.py"), "/gone/11_render_output/m/jax/x.py"]
    }}}}});
    let manifest = render.join(MANIFEST_NAME);
    std::fs::write(&manifest, doc.to_string()).unwrap();
    let m = load(&manifest, &Bounds::of(&render)).unwrap();
    assert_eq!(m.scripts, vec![render.join("m/jax/m.py")]);
    assert_eq!(
        m.missing,
        vec!["/gone/11_render_output/m/jax/x.py".to_string()]
    );
    let note = m.relocated.unwrap();
    assert!(
        note.contains("1 script(s)") && note.contains("moved"),
        "{note}"
    );
}

#[test]
fn failed_jax_renderings_are_reported_by_source_file() {
    let v = json!({"file_results": {
        "input/gnn_files/bad.md": {"framework_results": {
            "jax": {"success": false, "message": "no B matrix"},
            "pymdp": {"success": false, "message": "other framework"}
        }},
        "input/gnn_files/good.md": {"framework_results": {"jax": {"success": true}}}
    }});
    assert_eq!(
        render_failures(&v),
        vec![("bad.md".to_string(), "no B matrix".to_string())]
    );
}

#[test]
fn broken_json_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join(MANIFEST_NAME);
    std::fs::write(&manifest, "{not json").unwrap();
    let err = load(&manifest, &Bounds::of(tmp.path())).unwrap_err();
    assert!(err.to_string().contains(MANIFEST_NAME));
}

/// A tree with a render folder, a manifest listing `entries`, and a script outside
/// the tree that hostile entries aim at. Returns (temp, root, render, outside script).
fn hostile(entries: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().canonicalize().unwrap();
    let evil = top.join("evil.py");
    std::fs::write(&evil, "import jax\n").unwrap();
    let root = top.join("out");
    let render = root.join(RENDER_DIR);
    std::fs::create_dir_all(render.join("m/jax")).unwrap();
    std::fs::write(render.join("m/jax/m.py"), "import jax\n").unwrap();
    let listed: Vec<String> = entries
        .iter()
        .map(|e| e.replace("EVIL", &evil.display().to_string()))
        .collect();
    let doc = json!({"jax": listed});
    std::fs::write(render.join(MANIFEST_NAME), doc.to_string()).unwrap();
    (tmp, root, render, evil)
}

#[test]
fn entries_outside_the_tree_are_refused_and_named() {
    let (_t, root, render, evil) = hostile(&["m/jax/m.py", "EVIL", "../../evil.py"]);
    std::os::unix::fs::symlink(&evil, render.join("m/jax/link.py")).unwrap();
    let manifest = render.join(MANIFEST_NAME);
    let doc = json!({"jax": ["m/jax/m.py", evil, "../../evil.py", "m/jax/link.py"]});
    std::fs::write(&manifest, doc.to_string()).unwrap();
    let m = load(&manifest, &Bounds::of(&root)).unwrap();
    assert_eq!(m.scripts, vec![render.join("m/jax/m.py")]);
    assert_eq!(m.refused.len(), 3, "{:?}", m.refused);
    assert!(m.missing.is_empty());
    let warning = m.refused_warning.unwrap();
    assert!(
        warning.contains("refused 3") && warning.contains("../../evil.py"),
        "{warning}"
    );
    assert!(warning.contains(&evil.display().to_string()), "{warning}");
}

#[test]
fn a_relocation_that_climbs_out_of_the_render_folder_is_refused() {
    let (_t, root, render, _evil) = hostile(&["/old/11_render_output/../../evil.py"]);
    let m = load(&render.join(MANIFEST_NAME), &Bounds::of(&root)).unwrap();
    assert!(m.scripts.is_empty(), "{:?}", m.scripts);
    assert_eq!(m.refused, vec!["/old/11_render_output/../../evil.py"]);
    assert!(m.relocated.is_none());
}

#[test]
fn relocation_into_this_tree_still_works_beside_refusals() {
    let (_t, root, render, _evil) = hostile(&["/old/11_render_output/m/jax/m.py", "EVIL"]);
    let m = load(&render.join(MANIFEST_NAME), &Bounds::of(&root)).unwrap();
    assert_eq!(m.scripts, vec![render.join("m/jax/m.py")]);
    assert!(m.relocated.is_some());
    assert_eq!(m.refused.len(), 1);
}

#[test]
fn an_oversized_manifest_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join(MANIFEST_NAME);
    std::fs::write(&manifest, format!("{{\"jax\": [\"{}\"]}}", "a".repeat(100))).unwrap();
    let err = read_bounded(&manifest, 64).unwrap_err();
    assert!(matches!(
        err,
        DiscoveryError::ManifestTooLarge { limit: 64, .. }
    ));
    let text = err.to_string();
    assert!(
        text.contains(MANIFEST_NAME) && text.contains("move it aside"),
        "{text}"
    );
    assert!(read_bounded(&manifest, 1024).is_ok());
}
