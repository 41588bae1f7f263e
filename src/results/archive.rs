//! The results folder as a ledger: every script of the tree has one current record,
//! its `<id>_results.json`, its logs and its data folder, made by the latest attempt
//! that really ran. A run replaces only the records of the scripts it runs, and keeps
//! the earlier version of each in `history/<run_id>/` (the layout the sweep uses)
//! before anything of the new one is written:
//!
//! - when a script's first attempt of a run starts ([`Ledger::archive_record`]), its
//!   earlier logs and data folder move there, and its result is copied there (it stays
//!   current until the new one is whole), so the attempt starts in an empty folder and
//!   its result lists only what it wrote;
//! - before a retry ([`Ledger::archive_attempt`]), the previous attempt's data folder
//!   moves to `history/<run_id>/attempts/<id>/attempt<n>/`;
//! - a result `--resume` keeps, and rewrites with this run's id, is copied first
//!   ([`Ledger::keep_result`]).
//!
//! Every move is confined below its root and follows no symlink (see
//! [`crate::confined::rename`]).

use std::path::{Path, PathBuf};

use crate::confined::{Kind, Refused};
use crate::model::results_file_name;

/// The folder under the results folder that holds earlier runs' files.
pub const HISTORY_DIR: &str = "history";

/// Where GNN's step-12 files go inside a run's history folder.
pub const STEP12_IN_HISTORY: &str = "12_execute_output";

/// The largest result copied into the history: results are a few KiB (their tails are
/// bounded); anything larger is no result of the runner's and stays where it is.
const MAX_RESULT_BYTES: u64 = 16 << 20;

/// A record that could not be kept: the file stays where it was.
#[derive(Debug, thiserror::Error)]
#[error("failed to keep {path}, of {id}'s earlier record, in {to}")]
pub struct KeepError {
    pub id: String,
    pub path: PathBuf,
    pub to: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The places of a run's records.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The results folder.
    pub results_dir: PathBuf,
    /// GNN's step-12 folder (written or not: a data folder below it is archived).
    pub step12_dir: PathBuf,
    /// This run's id: names its history folder.
    pub run_id: String,
}

impl Ledger {
    /// The places of `config`'s run.
    pub fn of(config: &crate::config::RunConfig) -> Ledger {
        Ledger {
            results_dir: config.results_dir.clone(),
            step12_dir: config.step12_dir.clone(),
            run_id: config.run_id.clone(),
        }
    }

    /// This run's history folder.
    pub fn history(&self) -> PathBuf {
        self.results_dir.join(HISTORY_DIR).join(&self.run_id)
    }

    /// Before a script's first attempt of this run: its earlier result copied into the
    /// history, its logs, its data folder and `extra` (GNN's per-script files, absolute)
    /// moved there. Returns what failed; each such file stays where it was.
    pub fn archive_record(
        &self,
        id: &str,
        data_dir: &Path,
        extra: &[PathBuf],
        logs: &EarlierLogs,
    ) -> Vec<KeepError> {
        let mut errors = self.keep_result(id, extra);
        for name in logs.of(id) {
            let rel = Path::new(LOGS_DIR).join(name);
            errors.extend(self.move_in(id, &self.results_dir.join(rel), None));
        }
        for file in extra {
            errors.extend(self.move_in(id, file, None));
        }
        if has_contents(data_dir) {
            errors.extend(self.move_in(id, data_dir, None));
        }
        errors
    }

    /// Before attempt `next` (from 2) of a script: the data folder the attempt before
    /// left moves to `history/<run_id>/attempts/<id>/attempt<next - 1>`, so each attempt
    /// starts empty. A folder left empty stays (and so does anything not a folder).
    pub fn archive_attempt(&self, id: &str, data_dir: &Path, next: u32) -> Vec<KeepError> {
        if !has_contents(data_dir) {
            return Vec::new();
        }
        let to = Path::new(HISTORY_DIR)
            .join(&self.run_id)
            .join("attempts")
            .join(id)
            .join(format!("attempt{}", next.saturating_sub(1)));
        self.move_in(id, data_dir, Some(to)).into_iter().collect()
    }

    /// Copies a script's current result and `extra` (GNN's per-script files) into the
    /// history, leaving them in place: for a record this run rewrites whole.
    pub fn keep_result(&self, id: &str, extra: &[PathBuf]) -> Vec<KeepError> {
        let result = self.results_dir.join(results_file_name(id));
        std::iter::once(&result)
            .chain(extra)
            .filter_map(|file| {
                let (root, rel, to) = self.place(file)?;
                let to_path = self.results_dir.join(&to);
                let fail = |source| KeepError {
                    id: id.to_string(),
                    path: file.clone(),
                    to: to_path.clone(),
                    source,
                };
                match crate::confined::read_file(root, &rel, MAX_RESULT_BYTES) {
                    Ok(bytes) => write_into(&self.results_dir, &to, &bytes).err().map(fail),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => Some(fail(e.into())),
                }
            })
            .collect()
    }

    /// Where `path` is below its root, and where it goes in this run's history
    /// (relative to the results folder); `None` for a path below neither root, which is
    /// no folder of the runner's.
    fn place<'a>(&'a self, path: &Path) -> Option<(&'a Path, PathBuf, PathBuf)> {
        let history = Path::new(HISTORY_DIR).join(&self.run_id);
        // The longer root wins: one may hold the other.
        let mut roots = [
            (self.results_dir.as_path(), history.clone()),
            (self.step12_dir.as_path(), history.join(STEP12_IN_HISTORY)),
        ];
        roots.sort_by_key(|(root, _)| std::cmp::Reverse(root.as_os_str().len()));
        roots.into_iter().find_map(|(root, into)| {
            let rel = path.strip_prefix(root).ok()?;
            (!rel.as_os_str().is_empty()).then(|| (root, rel.to_path_buf(), into.join(rel)))
        })
    }

    /// Moves `path` (if there) into the history: to `to` (relative to the results
    /// folder) or to its own place there.
    fn move_in(&self, id: &str, path: &Path, to: Option<PathBuf>) -> Option<KeepError> {
        std::fs::symlink_metadata(path).ok()?;
        let (root, rel, own) = self.place(path)?;
        let to = to.unwrap_or(own);
        match move_path(root, &rel, &self.results_dir, &to) {
            Ok(()) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => Some(KeepError {
                id: id.to_string(),
                path: path.to_path_buf(),
                to: self.results_dir.join(to),
                source,
            }),
        }
    }
}

/// True when `dir` is a real folder with something in it: a record's data to keep.
/// Anything else there (a symlink, a file in the way) is no folder of a record's, and
/// is left to the attempt's own folder making, which replaces a link and fails on the
/// rest, saying why.
fn has_contents(dir: &Path) -> bool {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()),
        _ => false,
    }
}

/// Writes `bytes` as the file `rel` below `root`, making its folders without following
/// a link planted on the way: a hidden temporary first, then renamed, so a runner
/// killed in between leaves no torn copy in the history.
fn write_into(root: &Path, rel: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let made = crate::confined::make_dirs(root, parent, crate::confined::Planted::Replace)?;
    let name = rel.file_name().unwrap_or_default();
    let tmp = parent.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    crate::confined::create_file(&made.path.join(tmp.file_name().unwrap_or_default()))?
        .write_all(bytes)?;
    crate::confined::rename(root, &tmp, root, rel).map_err(std::io::Error::from)
}

/// The folder of the results folder that holds the scripts' logs.
pub const LOGS_DIR: &str = "logs";

/// The logs earlier runs left in the results folder, by the script they belong to.
/// Read once, before the run writes any: looking the folder through again for each
/// script made a run's cost grow with the square of its scripts (2,000 names read per
/// script at 1,000 scripts).
#[derive(Debug, Default)]
pub struct EarlierLogs(std::collections::HashMap<String, Vec<String>>);

impl EarlierLogs {
    /// The logs in `results_dir`'s `logs/` folder now, none when it cannot be read.
    pub fn read(results_dir: &Path) -> EarlierLogs {
        let mut by_owner: std::collections::HashMap<String, Vec<String>> = Default::default();
        for (name, _) in entries(results_dir, Path::new(LOGS_DIR)) {
            if let Some(id) = log_owner(&name) {
                by_owner.entry(id.to_string()).or_default().push(name);
            }
        }
        EarlierLogs(by_owner)
    }

    /// The names of `id`'s earlier logs.
    pub fn of(&self, id: &str) -> &[String] {
        self.0.get(id).map_or(&[], Vec::as_slice)
    }
}

/// The script id a log file name belongs to: `<id>.stdout.log`, `<id>.stderr.log`,
/// or the same with `.attempt<N>` before the stream.
pub fn log_owner(name: &str) -> Option<&str> {
    let stem = name
        .strip_suffix(".stdout.log")
        .or_else(|| name.strip_suffix(".stderr.log"))?;
    match stem.rsplit_once(".attempt") {
        Some((id, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => Some(id),
        _ => Some(stem),
    }
}

/// How many entries of one folder are looked at: far more than a results folder
/// holds (two logs and a result per script), few enough to bound what a runaway
/// script's leftovers cost.
pub const MAX_ENTRIES: usize = 1_000_000;

/// The UTF-8 names in the folder `rel` below `root`, sorted, with their kinds; none
/// when it cannot be read or is a symlink. A name that is not UTF-8 is no name
/// jax-runner writes.
pub fn entries(root: &Path, rel: &Path) -> Vec<(String, Kind)> {
    crate::confined::list_dir(root, rel, MAX_ENTRIES)
        .into_iter()
        .flatten()
        .filter_map(|(name, kind)| Some((name.into_string().ok()?, kind)))
        .collect()
}

/// Moves `from` (below `from_root`) to `to` (below `to_root`), making `to`'s parents,
/// with no symlink followed on either side; across file systems, copies then removes.
pub fn move_path(from_root: &Path, from: &Path, to_root: &Path, to: &Path) -> std::io::Result<()> {
    match crate::confined::rename(from_root, from, to_root, to) {
        Err(Refused::Io(e)) if e.raw_os_error() == Some(libc::EXDEV) => {
            let (from, to) = (from_root.join(from), to_root.join(to));
            copy_tree(&from, &to)?;
            // Through handles, as the copy was made: no link on the way is followed.
            match std::fs::symlink_metadata(&from)?.is_dir() {
                true => Ok(crate::confined::remove_tree(&from)?),
                false => Ok(crate::confined::remove_file(&from)?),
            }
        }
        other => other.map_err(Into::into),
    }
}

/// Copies a tree as it is: links as links, regular files streamed, anything else (a
/// FIFO, a device) left out, so nothing is waited on. No link is followed, `from`
/// itself included.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(from).follow_root_links(false) {
        let entry = entry?;
        let rel = entry.path().strip_prefix(from).unwrap_or(Path::new(""));
        let dest = match rel.as_os_str().is_empty() {
            true => to.to_path_buf(),
            false => to.join(rel),
        };
        let kind = entry.file_type();
        if kind.is_dir() {
            crate::confined::make_dir(&dest)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else if kind.is_file() {
            let mut source = crate::confined::open_in(entry.path())?;
            std::io::copy(&mut source, &mut crate::confined::create_file(&dest)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
