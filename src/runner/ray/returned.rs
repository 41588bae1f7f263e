//! What the job's wrapper (`ray_job.py`) sends back through the job's log: one framed,
//! base64-encoded zip with its report, the script's stdout and stderr, and the data
//! folder when it was copied. Finding it, decoding it, and unpacking the data folder
//! safely (no path leaves the folder, nothing follows a link, the size is bounded).

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::model::JaxTelemetry;

impl WrapperReport {
    /// The shim's report, when there is one this version reads.
    pub fn telemetry(&mut self) -> Option<JaxTelemetry> {
        serde_json::from_value(self.telemetry.take()?).ok()
    }
}
/// The wrapper's report (`report.json` in the returned archive).
#[derive(Debug, Default, Deserialize)]
pub struct WrapperReport {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    #[serde(default)]
    pub user_cpu_s: f64,
    #[serde(default)]
    pub system_cpu_s: f64,
    /// The kernel's peak RSS of the script process, bytes.
    #[serde(default)]
    pub max_rss_bytes: u64,
    /// The sampled peak memory of the script's process tree, bytes.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// What `peak_rss_bytes` counts (`pss` or `rss`); missing from an older wrapper.
    #[serde(default)]
    pub memory_source: Option<crate::model::MemorySource>,
    /// Whether a process of the script held a GPU device open when the wrapper looked
    /// (`None`: it never looked, the script ended first).
    #[serde(default)]
    pub gpu_device_opened: Option<bool>,
    /// The node's name, as the wrapper saw it.
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub shared_filesystem: bool,
    /// The shim's report as it wrote it; read on its own, so that a report this
    /// version cannot read loses the telemetry only.
    pub telemetry: Option<serde_json::Value>,
    #[serde(default)]
    pub data_bytes: u64,
    #[serde(default)]
    pub data_files: u64,
    /// Links and other non-files in the data folder, which never travel.
    #[serde(default)]
    pub data_left_out: u64,
    #[serde(default)]
    pub data_returned: bool,
    /// Where the files stay on the node when they were not copied.
    pub data_left_at: Option<String>,
    /// What the wrapper's watchdog killed the script for: `process_limit` or
    /// `memory_limit`; missing from an older wrapper.
    #[serde(default)]
    pub limit_hit: Option<String>,
    #[serde(default)]
    pub stdout_cut_bytes: u64,
    #[serde(default)]
    pub stderr_cut_bytes: u64,
}

/// A decoded return: the report, the two streams, and the archive for the data.
pub struct Returned {
    pub report: WrapperReport,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    archive: zip::ZipArchive<std::io::Cursor<Vec<u8>>>,
}

/// Finds the last complete block framed with `nonce` in the job's log and decodes it.
/// `None` when there is none (the job was killed, or the wrapper never started) or it
/// does not decode: the caller then reads the log as a whole.
pub fn find(logs: &str, nonce: &str) -> Option<Returned> {
    let begin = format!("==jax-runner-return:{nonce}:begin==");
    let end = format!("==jax-runner-return:{nonce}:end:");
    let start = logs.rfind(&begin)? + begin.len();
    let body_len = logs[start..].find(&end)?;
    let tail = &logs[start + body_len + end.len()..];
    let declared: usize = tail.split("==").next()?.trim().parse().ok()?;
    let text: String = logs[start..start + body_len]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    if text.len() != declared {
        return None;
    }
    use base64::Engine;
    // Standard base64 with padding, as the job's wrapper writes it; anything else is
    // no returned data.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&text)
        .ok()?;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).ok()?;
    let mut read = |name: &str| -> Option<Vec<u8>> {
        let mut out = Vec::new();
        archive.by_name(name).ok()?.read_to_end(&mut out).ok()?;
        Some(out)
    };
    let report = serde_json::from_slice(&read("report.json")?).ok()?;
    let stdout = read("stdout").unwrap_or_default();
    let stderr = read("stderr").unwrap_or_default();
    Some(Returned {
        report,
        stdout,
        stderr,
        archive,
    })
}

/// `text` up to the job's return block, if it has one.
pub fn without_block<'a>(text: &'a str, nonce: &str) -> &'a str {
    match text.find(&format!("==jax-runner-return:{nonce}:begin==")) {
        Some(at) => text[..at].trim_end(),
        None => text,
    }
}

/// Why returned data was not (wholly) written.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("failed to unpack the returned data: {0}")]
    Archive(String),
    #[error("failed to unpack the returned data: {0} leaves the data folder")]
    Escapes(String),
    #[error("failed to unpack the returned data: {0} is a link in the data folder")]
    Link(PathBuf),
    #[error("failed to unpack the returned data: more than {0} bytes")]
    TooLarge(u64),
    #[error("failed to write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Returned {
    /// Writes the archive's `data/` entries into `dir`, at most `limit` bytes in all;
    /// returns how many files were written.
    pub fn unpack_data(&mut self, dir: &Path, limit: u64) -> Result<u64, UnpackError> {
        let mut written = 0u64;
        let mut files = 0u64;
        for i in 0..self.archive.len() {
            let mut entry = self
                .archive
                .by_index(i)
                .map_err(|e| UnpackError::Archive(e.to_string()))?;
            let Some(rel) = entry.name().strip_prefix("data/").map(str::to_string) else {
                continue;
            };
            if rel.is_empty() {
                continue;
            }
            let rel_path = safe_relative(&rel).ok_or_else(|| UnpackError::Escapes(rel.clone()))?;
            if entry.is_symlink() {
                return Err(UnpackError::Escapes(rel));
            }
            let target = dir.join(&rel_path);
            let parent = if entry.is_dir() {
                target.clone()
            } else {
                target.parent().unwrap_or(dir).to_path_buf()
            };
            make_dirs(dir, &parent)?;
            if entry.is_dir() {
                continue;
            }
            let write = |source| UnpackError::Write {
                path: target.clone(),
                source,
            };
            match std::fs::symlink_metadata(&target) {
                Ok(m) if m.file_type().is_symlink() => return Err(UnpackError::Link(target)),
                _ => {}
            }
            // Made anew: a FIFO or hard link left at the name is replaced, never
            // waited on or written through.
            let mut out = crate::confined::create_file(&target).map_err(write)?;
            let room = limit.saturating_sub(written);
            let n = std::io::copy(&mut (&mut entry).take(room + 1), &mut out).map_err(write)?;
            written += n;
            if written > limit {
                drop(out);
                let _ = std::fs::remove_file(&target);
                return Err(UnpackError::TooLarge(limit));
            }
            files += 1;
        }
        Ok(files)
    }
}

/// `rel` as a path of plain components only (no `..`, no root, no prefix).
fn safe_relative(rel: &str) -> Option<PathBuf> {
    let path = Path::new(rel);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Creates `path` below `root` one folder at a time, refusing any that is a link.
fn make_dirs(root: &Path, path: &Path) -> Result<(), UnpackError> {
    use crate::confined::{Planted, Refused};
    let rel = path.strip_prefix(root).unwrap_or(Path::new(""));
    match crate::confined::make_dirs(root, rel, Planted::Refuse) {
        Ok(_) => Ok(()),
        Err(Refused::Symlink(here)) => Err(UnpackError::Link(here)),
        Err(other) => Err(UnpackError::Write {
            path: path.to_path_buf(),
            source: other.into(),
        }),
    }
}

#[cfg(test)]
mod tests;
