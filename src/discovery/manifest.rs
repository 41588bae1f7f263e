//! GNN's render manifest (`11_render_output/render_processing_summary.json`): when the
//! tree holds one, the JAX scripts it lists are the ones to run. The manifest is data,
//! not a licence: an entry that resolves outside `--output-dir` (an absolute path, a
//! `../..`, a symlink out) is refused and reported, never run, and a manifest larger
//! than [`MAX_MANIFEST_BYTES`] is not read at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::bounds::Bounds;
use crate::error::DiscoveryError;
use crate::listing::{first_named, NAMED};

pub const MANIFEST_NAME: &str = "render_processing_summary.json";
pub use super::bounds::RENDER_DIR;
/// GNN's step-12 folder, beside the render folder.
pub const STEP12_DIR: &str = "12_execute_output";
/// The largest manifest read. GNN writes a few KiB per model; parsing holds the
/// whole document in memory (about 2.5 times its size), so a runaway file must not.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

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
    /// Listed scripts that resolve outside the tree, as written in the manifest:
    /// refused, never run.
    pub refused: Vec<String>,
    /// JAX renderings step 11 marks as failed: (source file name, message).
    pub render_failures: Vec<(String, String)>,
    /// Set when listed paths point outside this tree and were found at the same place
    /// under it instead (a moved or copied tree): says so, once.
    pub relocated: Option<String>,
    /// Set when entries were refused: names them, once.
    pub refused_warning: Option<String>,
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

/// Reads the manifest and resolves the JAX scripts it lists, keeping those inside
/// `bounds` (the rule the tree walk follows too).
pub fn load(path: &Path, bounds: &Bounds) -> Result<Manifest, DiscoveryError> {
    let root = bounds.root();
    let json = read_bounded(path, MAX_MANIFEST_BYTES)?;
    let mut listed = Vec::new();
    collect_jax_scripts(&json, false, &mut listed);
    listed.dedup();
    let base = path.parent().unwrap_or(root);
    let tree = Tree { root, base, bounds };
    let mut manifest = Manifest {
        path: path.to_path_buf(),
        render_failures: render_failures(&json),
        ..Default::default()
    };
    drop(json);
    let mut relocated: Vec<(String, PathBuf)> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for entry in listed {
        match resolve(&entry, &tree) {
            Resolved::Here(p) => manifest.scripts.push(p),
            Resolved::Relocated(p) => {
                relocated.push((entry, p.clone()));
                manifest.scripts.push(p);
            }
            Resolved::Outside(p) => {
                refused.push(format!("{entry} ({})", p.display()));
                manifest.refused.push(entry);
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
    if !refused.is_empty() {
        manifest.refused_warning = Some(format!(
            "refused {} render manifest entr{} outside {}, which never run (only scripts \
             inside --output-dir run): {}",
            refused.len(),
            if refused.len() == 1 { "y" } else { "ies" },
            root.display(),
            first_named(&refused, NAMED)
        ));
    }
    manifest.scripts.sort();
    manifest.scripts.dedup();
    Ok(manifest)
}

/// Reads and parses the manifest, refusing one larger than `limit` bytes (checked
/// before reading, and again while reading, for a file that grows meanwhile).
fn read_bounded(path: &Path, limit: u64) -> Result<Value, DiscoveryError> {
    let failed = |e: std::io::Error| DiscoveryError::Manifest {
        path: path.to_path_buf(),
        source: Arc::new(e),
    };
    let too_large = |size: u64| DiscoveryError::ManifestTooLarge {
        path: path.to_path_buf(),
        size,
        limit,
    };
    // A regular file only: a FIFO left in its place must not hang discovery.
    let file = crate::confined::open_followed(path).map_err(|e| failed(e.into()))?;
    let bytes = file.read_to_end(limit).map_err(|e| match e {
        crate::confined::Refused::TooLarge { size, .. } => too_large(size),
        other => failed(other.into()),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| DiscoveryError::ManifestJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
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
    /// It exists, but outside this tree (canonical path): refused.
    Outside(PathBuf),
    Missing,
}

/// Where entries are looked for (`--output-dir`, canonical, and the manifest's
/// folder), and the bounds they must resolve into.
struct Tree<'a> {
    root: &'a Path,
    base: &'a Path,
    bounds: &'a Bounds,
}

impl Tree<'_> {
    /// Whether a canonical path is inside the tree.
    fn holds(&self, canonical: &Path) -> bool {
        self.bounds.hold(canonical)
    }
}

/// Relative entries may be written against the manifest's folder, the output folder,
/// or the folder above it (GNN records `output/11_render_output/...`). Entries that
/// lead outside this tree, or nowhere, are looked for under the manifest's folder by
/// the part after the folder's own name: GNN writes absolute paths, so a moved or
/// copied tree still lists the old place. Whatever is found must resolve, symlinks
/// and `..` followed, inside the tree; anything else is [`Resolved::Outside`].
fn resolve(entry: &str, tree: &Tree<'_>) -> Resolved {
    let (base, root) = (tree.base, tree.root);
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
    if let Some(f) = found.as_ref().filter(|f| tree.holds(f)) {
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
        (Some(m), _) if tree.holds(&m) => Resolved::Relocated(m),
        (_, Some(f)) => Resolved::Outside(f),
        (Some(m), None) => Resolved::Outside(m),
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
mod tests;
