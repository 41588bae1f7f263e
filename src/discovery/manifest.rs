//! GNN's render manifest (`11_render_output/render_processing_summary.json`): when the
//! tree holds one, the JAX scripts it lists are the ones to run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::DiscoveryError;

pub const MANIFEST_NAME: &str = "render_processing_summary.json";
pub const RENDER_DIR: &str = "11_render_output";
/// GNN's step-12 folder, beside the render folder.
pub const STEP12_DIR: &str = "12_execute_output";

/// What the manifest says.
#[derive(Debug, Default)]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    /// Listed scripts that exist (absolute).
    pub scripts: Vec<PathBuf>,
    /// Listed scripts that do not exist, as written in the manifest.
    pub missing: Vec<String>,
    /// The same entries as absolute paths (GNN's `missing_render_scripts`).
    pub missing_paths: Vec<PathBuf>,
    /// JAX renderings step 11 marks as failed: (source file name, message).
    pub render_failures: Vec<(String, String)>,
    /// Set when listed paths point outside this tree and were found at the same place
    /// under it instead (a moved or copied tree): says so, once.
    pub relocated: Option<String>,
}

/// Finds the manifest in `root/11_render_output/` or in `root` itself.
pub fn find(root: &Path) -> Option<PathBuf> {
    [
        root.join(RENDER_DIR).join(MANIFEST_NAME),
        root.join(MANIFEST_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Reads the manifest and resolves the JAX scripts it lists.
pub fn load(path: &Path, root: &Path) -> Result<Manifest, DiscoveryError> {
    let text = std::fs::read_to_string(path).map_err(|e| DiscoveryError::Manifest {
        path: path.to_path_buf(),
        source: Arc::new(e),
    })?;
    let json: Value = serde_json::from_str(&text).map_err(|e| DiscoveryError::ManifestJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut listed = Vec::new();
    collect_jax_scripts(&json, false, &mut listed);
    listed.dedup();
    let base = path.parent().unwrap_or(root);
    let mut manifest = Manifest {
        path: path.to_path_buf(),
        render_failures: render_failures(&json),
        ..Default::default()
    };
    let mut relocated: Vec<(String, PathBuf)> = Vec::new();
    for entry in listed {
        match resolve(&entry, base, root) {
            Resolved::Here(p) => manifest.scripts.push(p),
            Resolved::Relocated(p) => {
                relocated.push((entry, p.clone()));
                manifest.scripts.push(p);
            }
            Resolved::Missing => {
                manifest.missing_paths.push(lexical_absolute(&entry, base));
                manifest.missing.push(entry);
            }
        }
    }
    if let Some((first, _)) = relocated.first() {
        manifest.relocated = Some(format!(
            "the render manifest {} lists {} script(s) outside this tree (first: {first}); \
             the tree was moved or copied, so the same paths under {} run instead",
            path.display(),
            relocated.len(),
            base.display()
        ));
    }
    manifest.scripts.sort();
    manifest.scripts.dedup();
    Ok(manifest)
}

/// JAX renderings the manifest marks as failed. GNN keys `file_results` by the GNN
/// source path, each with `framework_results.jax.{success, message}`.
fn render_failures(json: &Value) -> Vec<(String, String)> {
    let entries: Vec<(Option<&str>, &Value)> = match json.get("file_results") {
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (Some(k.as_str()), v)).collect(),
        Some(Value::Array(items)) => items.iter().map(|v| (None, v)).collect(),
        _ => Vec::new(),
    };
    entries
        .into_iter()
        .filter_map(|(key, v)| {
            let jax = v
                .get("framework_results")?
                .as_object()?
                .iter()
                .find_map(|(k, r)| k.eq_ignore_ascii_case("jax").then_some(r))?;
            if jax.get("success").and_then(Value::as_bool) != Some(false) {
                return None;
            }
            let source = key
                .or_else(|| v.get("file").and_then(Value::as_str))
                .unwrap_or("unknown");
            let file = Path::new(source)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| source.to_string());
            let message = jax
                .get("message")
                .or_else(|| jax.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Some((file, message))
        })
        .collect()
}

/// Walks the JSON: inside a `jax` key or an object whose `framework` is `jax`, every
/// string naming a `.py` file is a JAX script. GNN's summary nests these under
/// per-file and per-framework records whose exact shape has changed between versions,
/// so the reader keys on meaning rather than on one layout.
fn collect_jax_scripts(value: &Value, in_jax: bool, out: &mut Vec<String>) {
    match value {
        Value::String(s) if in_jax && s.ends_with(".py") => out.push(s.clone()),
        Value::Array(items) => items
            .iter()
            .for_each(|v| collect_jax_scripts(v, in_jax, out)),
        Value::Object(map) => {
            let framework_is_jax = map
                .get("framework")
                .and_then(Value::as_str)
                .is_some_and(|f| f.eq_ignore_ascii_case("jax"));
            let framework_is_other = map
                .get("framework")
                .and_then(Value::as_str)
                .is_some_and(|f| !f.eq_ignore_ascii_case("jax"));
            for (key, v) in map {
                let here = (in_jax && !framework_is_other)
                    || framework_is_jax
                    || key.eq_ignore_ascii_case("jax");
                collect_jax_scripts(v, here, out);
            }
        }
        _ => {}
    }
}

/// Where a listed entry is.
#[derive(Debug, PartialEq)]
enum Resolved {
    /// In this tree, as listed.
    Here(PathBuf),
    /// Listed outside this tree, found at the same place under it (a moved tree).
    Relocated(PathBuf),
    Missing,
}

/// Relative entries may be written against the manifest's folder, the output folder,
/// or the folder above it (GNN records `output/11_render_output/...`). Entries that
/// lead outside this tree, or nowhere, are looked for under the manifest's folder by
/// the part after the folder's own name: GNN writes absolute paths, so a moved or
/// copied tree still lists the old place.
fn resolve(entry: &str, base: &Path, root: &Path) -> Resolved {
    let p = Path::new(entry);
    let candidates: Vec<PathBuf> = if p.is_absolute() {
        vec![p.to_path_buf()]
    } else {
        let mut c = vec![base.join(p), root.join(p)];
        if let Some(parent) = root.parent() {
            c.push(parent.join(p));
        }
        c
    };
    let found = candidates
        .into_iter()
        .find(|c| c.is_file())
        .and_then(|c| c.canonicalize().ok());
    let inside = |f: &PathBuf| f.starts_with(root) || f.starts_with(base);
    if let Some(f) = found.as_ref().filter(|f| inside(f)) {
        return Resolved::Here(f.clone());
    }
    let moved = base.file_name().and_then(|name| {
        let comps: Vec<_> = p.components().collect();
        let at = comps.iter().rposition(|c| c.as_os_str() == name)?;
        let suffix: PathBuf = comps[at + 1..].iter().collect();
        let candidate = base.join(suffix);
        candidate
            .is_file()
            .then(|| candidate.canonicalize().ok())
            .flatten()
    });
    match (moved, found) {
        (Some(m), _) => Resolved::Relocated(m),
        (None, Some(f)) => Resolved::Here(f),
        (None, None) => Resolved::Missing,
    }
}

/// `entry` as an absolute path (against the manifest's folder), `..` resolved by name.
fn lexical_absolute(entry: &str, base: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(entry).components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let m = load(&manifest, &root).unwrap();
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
        let m = load(&manifest, &render).unwrap();
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
        let err = load(&manifest, tmp.path()).unwrap_err();
        assert!(err.to_string().contains(MANIFEST_NAME));
    }
}
