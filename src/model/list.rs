//! The document `list --json` prints: what discovery found, before anything runs. A
//! typed model with a committed schema, like every other document jax-runner writes.

use serde::Serialize;

use super::DiscoveredBy;

/// `list --json`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ListDocument {
    /// Version of jax-runner's documents.
    pub schema_version: u32,
    /// The tree searched (`--output-dir`), lossily where it is not UTF-8.
    pub output_dir: String,
    /// The render manifest (`11_render_output/render_processing_summary.json`) used, if
    /// any.
    pub manifest: Option<String>,
    /// Every script a run would consider, in discovery order.
    pub scripts: Vec<ListedScript>,
    /// Scripts the render manifest lists that do not exist.
    pub missing: Vec<String>,
    /// Manifest entries that resolve outside the tree: refused, never run.
    pub refused: Vec<String>,
    /// What discovery could not read or follow, in words.
    pub warnings: Vec<String>,
}

/// One script of `list --json`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ListedScript {
    /// Its id in a run (results and logs are named by it).
    pub id: String,
    /// Absolute path, lossily where it is not UTF-8 (then `path_hex` is there).
    pub path: String,
    /// Path relative to `output_dir`.
    pub relative_path: String,
    /// Why discovery picked it.
    pub discovered_by: DiscoveredBy,
    /// Size in bytes.
    pub size_bytes: u64,
    /// The path's raw bytes in hex, only when the path is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
}

/// One script of a `--dry-run`'s plan: what a run with the same options would do
/// with it. Nothing was started to find out.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PlannedScript {
    /// Position in the run's order, from 1 (scripts kept by `--resume` come first).
    pub order: usize,
    /// Its id.
    pub id: String,
    /// Path relative to `--output-dir`.
    pub relative_path: String,
    /// `run`, or `keep` for an earlier result `--resume`/`--rerun-failed` keeps.
    pub action: String,
    /// Why it is kept, or why it runs again when an earlier result exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The platform it would start on.
    pub device: super::Platform,
    /// `bwrap` or `none`.
    pub sandbox: String,
    /// `warm` (forked from the zygote, if it starts) or `cold`.
    pub start: String,
    /// Its time limit, seconds.
    pub timeout_s: f64,
    /// Retries after a failed first attempt.
    pub retries: u32,
    /// Settings a profile override changed for it.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub overrides: std::collections::BTreeMap<String, super::Setting>,
}
