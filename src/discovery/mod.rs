//! Stage 1, discovery: walk the pipeline output tree and return the JAX scripts to
//! run, in a deterministic order, with unique ids.

mod bounds;
mod classify;
mod ids;
pub mod manifest;
mod walk;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use classify::source_imports_jax;
pub use ids::{sanitize, MAX_ID_BYTES};

use crate::error::DiscoveryError;
use crate::model::DiscoveredBy;

/// A script to run.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Script {
    /// Unique id in this run.
    pub id: String,
    /// Absolute path (serialized lossily where it is not UTF-8: see [`Script::to_json`]).
    #[serde(serialize_with = "lossy")]
    #[schemars(with = "String")]
    pub path: PathBuf,
    /// Path relative to the output folder.
    #[serde(serialize_with = "lossy")]
    #[schemars(with = "String")]
    pub relative_path: PathBuf,
    /// Why it was picked.
    pub discovered_by: DiscoveredBy,
    /// Size in bytes (a stand-in for expected cost when there is no history).
    pub size_bytes: u64,
}

impl Script {
    /// The script as `list --json` shows it: with `path_hex`, the path's bytes in hex,
    /// where the path is not UTF-8 (then `path` is lossy).
    pub fn listed(&self) -> crate::model::list::ListedScript {
        crate::model::list::ListedScript {
            id: self.id.clone(),
            path: self.path.to_string_lossy().into_owned(),
            relative_path: self.relative_path.to_string_lossy().into_owned(),
            discovered_by: self.discovered_by,
            size_bytes: self.size_bytes,
            path_hex: crate::model::lossless_hex(&self.path),
        }
    }
}

/// Paths as text, lossily where they are not UTF-8 (serde refuses those).
fn lossy<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// What discovery found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The scripts this run considers: all found, less those `-k/--filter` and
    /// `--exclude` leave out.
    pub scripts: Vec<Script>,
    /// Scripts of the tree the selection left out: not run, but still the tree's, so
    /// their records stand (carried) and the sweep leaves their files alone.
    pub unselected: Vec<Script>,
    /// Scripts the render manifest lists that do not exist.
    pub missing: Vec<String>,
    /// The same, as absolute paths.
    pub missing_paths: Vec<PathBuf>,
    /// Entries of the render manifest that resolve outside the tree, as written:
    /// refused, never run.
    pub refused: Vec<String>,
    /// JAX renderings the manifest marks as failed: (source file name, message).
    pub render_failures: Vec<(String, String)>,
    /// Entries that could not be read, loops, and the like: reported, never fatal.
    pub warnings: Vec<String>,
    /// The render manifest used, if any.
    pub manifest: Option<PathBuf>,
}

#[cfg(test)]
impl Script {
    /// A script for tests: `/nonexistent/<id>.py`, found in a `jax/` folder, `size`
    /// bytes long.
    pub(crate) fn for_test(id: &str, size: u64) -> Script {
        Script {
            id: id.into(),
            path: format!("/nonexistent/{id}.py").into(),
            relative_path: format!("{id}.py").into(),
            discovered_by: DiscoveredBy::JaxFolder,
            size_bytes: size,
        }
    }
}

/// How to walk.
#[derive(Debug, Clone, Default)]
pub struct DiscoverOptions {
    /// Descend into sub-folders (otherwise only files directly in the root).
    pub recursive: bool,
    /// Folders never entered, such as the runner's own results folder.
    pub exclude: Vec<PathBuf>,
}

impl DiscoverOptions {
    /// Whether a walk with these options looks at the file `rel` (relative to the
    /// root): every file when recursive, else only those directly in the root. A
    /// script the walk does not reach is still the tree's (see [`crate::results::sweep`]).
    pub fn reaches(&self, rel: &Path) -> bool {
        self.recursive || rel.components().count() <= 1
    }
}

/// Walks `root` (an existing, canonical folder) and returns its JAX scripts.
pub fn discover(root: &Path, opts: &DiscoverOptions) -> Result<Discovery, DiscoveryError> {
    let mut found = Discovery::default();
    let mut picked: Vec<(PathBuf, DiscoveredBy, u64)> = Vec::new();
    // The same file reached through two symlinked paths runs once.
    let mut seen_files: HashSet<(u64, u64)> = HashSet::new();
    let mut exclude = opts.exclude.clone();

    // One rule for what may run, whoever finds it: the manifest or the walk.
    let bounds = bounds::Bounds::of(root);
    if let Some(manifest_path) = manifest::find(root) {
        let m = manifest::load(&manifest_path, &bounds)?;
        for path in m.scripts {
            if let Ok(meta) = std::fs::metadata(&path) {
                if seen_files.insert((meta.dev(), meta.ino())) {
                    picked.push((path, DiscoveredBy::Manifest, meta.len()));
                }
            }
        }
        found.missing = m.missing;
        found.missing_paths = m.missing_paths;
        found.refused = m.refused;
        found.render_failures = m.render_failures;
        found.warnings.extend(m.relocated);
        found.warnings.extend(m.refused_warning);
        // The manifest is authoritative for its own folder; the walk covers the rest.
        if let Some(dir) = manifest_path.parent() {
            exclude.push(dir.to_path_buf());
        }
        found.manifest = Some(manifest_path);
    }

    // Pointed at the render folder itself, the manifest decides for the whole tree:
    // nothing of it is walked, recursive or not (as when pointed at its parent).
    let manifest_owns_root = found.manifest.as_deref().and_then(Path::parent) == Some(root);
    let walked = match manifest_owns_root {
        true => walk::Walked::default(),
        false => walk::walk(&bounds, opts.recursive, &exclude),
    };
    found.warnings.extend(walked.warnings);
    let mut candidates = walked.candidates;
    // Sorted before de-duplication, so a file reached through two paths always keeps
    // the same one, whatever order the folders were read in.
    candidates.sort();
    // Files of a virtual environment are never scripts, whatever its folder's name.
    if !walked.venvs.is_empty() {
        candidates.retain(|c| !walked.venvs.iter().any(|v| c.reached.starts_with(v)));
    }
    for checked in check_all(candidates) {
        match checked {
            Checked::Script {
                path,
                by,
                dev,
                ino,
                size,
            } => {
                if seen_files.insert((dev, ino)) {
                    picked.push((path, by, size));
                }
            }
            Checked::NotJax => {}
            Checked::Unreadable(warning) => found.warnings.push(warning),
        }
    }

    picked.sort_by(|a, b| a.0.cmp(&b.0));
    let relative: Vec<PathBuf> = picked
        .iter()
        .map(|(p, _, _)| p.strip_prefix(root).unwrap_or(p).to_path_buf())
        .collect();
    let rel_refs: Vec<&Path> = relative.iter().map(PathBuf::as_path).collect();
    let ids = ids::assign_ids(&rel_refs);
    found.scripts = picked
        .into_iter()
        .zip(relative)
        .zip(ids)
        .map(
            |(((path, discovered_by, size_bytes), relative_path), id)| Script {
                id,
                path,
                relative_path,
                discovered_by,
                size_bytes,
            },
        )
        .collect();
    Ok(found)
}

/// One candidate file, checked.
enum Checked {
    Script {
        path: PathBuf,
        by: DiscoveredBy,
        dev: u64,
        ino: u64,
        size: u64,
    },
    NotJax,
    Unreadable(String),
}

fn check(candidate: walk::Candidate) -> Checked {
    let path = candidate.path;
    // A file linked into a `jax/` folder is there for the walk, wherever it lives.
    let by = if classify::in_jax_folder(&candidate.reached) || classify::in_jax_folder(&path) {
        DiscoveredBy::JaxFolder
    } else {
        match classify::file_imports_jax(&path) {
            Ok(true) => DiscoveredBy::ImportsJax,
            Ok(false) => return Checked::NotJax,
            Err(e) => {
                return Checked::Unreadable(format!(
                    "skipped unreadable file {}: {e}",
                    path.display()
                ))
            }
        }
    };
    match std::fs::metadata(&path) {
        Ok(meta) => Checked::Script {
            by,
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            path,
        },
        Err(e) => Checked::Unreadable(format!("skipped {}: {e}", path.display())),
    }
}

/// Checks candidates on one thread per core, keeping their order.
fn check_all(candidates: Vec<walk::Candidate>) -> Vec<Checked> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || candidates.len() < 64 {
        return candidates.into_iter().map(check).collect();
    }
    let chunk = candidates.len().div_ceil(threads);
    let mut chunks: Vec<Vec<walk::Candidate>> = Vec::new();
    let mut rest = candidates;
    while rest.len() > chunk {
        let tail = rest.split_off(chunk);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|c| s.spawn(move || c.into_iter().map(check).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a discovery thread does not panic"))
            .collect()
    })
}

#[cfg(test)]
mod tests;
