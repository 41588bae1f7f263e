//! GNN's render manifest (`11_render_output/render_processing_summary.json`): when the
//! tree holds one, the JAX scripts it lists are the ones to run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::DiscoveryError;

pub const MANIFEST_NAME: &str = "render_processing_summary.json";
pub const RENDER_DIR: &str = "11_render_output";

/// What the manifest says.
#[derive(Debug, Default)]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    /// Listed scripts that exist (absolute).
    pub scripts: Vec<PathBuf>,
    /// Listed scripts that do not exist, as written in the manifest.
    pub missing: Vec<String>,
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
        ..Default::default()
    };
    for entry in listed {
        match resolve(&entry, base, root) {
            Some(p) => manifest.scripts.push(p),
            None => manifest.missing.push(entry),
        }
    }
    manifest.scripts.sort();
    manifest.scripts.dedup();
    Ok(manifest)
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

/// Relative entries may be written against the manifest's folder, the output folder,
/// or the folder above it (GNN records `output/11_render_output/...`).
fn resolve(entry: &str, base: &Path, root: &Path) -> Option<PathBuf> {
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
    candidates
        .into_iter()
        .find(|c| c.is_file())
        .and_then(|c| c.canonicalize().ok())
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
