//! Keeps the results folder (and GNN's step-12 layout) about one run: before any
//! script starts, the per-script files of scripts this run does not consider (a
//! deleted or renamed script's `<id>_results.json`, its logs, its data folder) move
//! into `<results>/history/<run_id>/`. Anything that globs `*_results.json` then reads
//! only the scripts of the run that `performance_metrics.json` describes, and nothing
//! is lost. `performance_metrics.json` itself stays: the scheduler's history reads it.
//!
//! The history keeps the newest [`HISTORY_KEEP`] run folders; older ones are removed,
//! so a results folder run into every day does not grow forever.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::gnn::GnnEntry;
use crate::error::ReportError;
use crate::model::gnn::FRAMEWORK;

/// The folder under the results folder that holds earlier runs' stale files.
pub const HISTORY_DIR: &str = "history";

/// Run folders `history/` keeps: the newest by run id, which starts with the run's
/// start time. The current run's is never removed.
pub const HISTORY_KEEP: usize = 20;

/// What the sweep looks at.
#[derive(Debug)]
pub struct Sweep<'a> {
    /// The results folder.
    pub results_dir: &'a Path,
    /// The ids of every script this run considers (run or kept).
    pub ids: HashSet<&'a str>,
    /// GNN's step-12 folder and this run's places in it, when the layout is written.
    pub gnn: Option<(&'a Path, &'a HashMap<String, GnnEntry>)>,
    /// This run's id: names the history folder.
    pub run_id: &'a str,
}

/// What the sweep moved, and what it could not.
#[derive(Debug, Default)]
pub struct Swept {
    /// Files and folders moved, as they were named before.
    pub moved: Vec<PathBuf>,
    /// Earlier runs' history folders removed, beyond the newest [`HISTORY_KEEP`].
    pub pruned: Vec<PathBuf>,
    /// Moves and removals that failed; the file stays where it was.
    pub errors: Vec<ReportError>,
}

impl Sweep<'_> {
    /// The history folder of this run.
    pub fn history(&self) -> PathBuf {
        self.results_dir.join(HISTORY_DIR).join(self.run_id)
    }

    /// Moves every stale per-script file into [`Sweep::history`].
    pub fn run(&self) -> Swept {
        let mut stale = self.stale_results();
        if let Some((step12, entries)) = self.gnn {
            stale.extend(stale_gnn(step12, entries).into_iter().map(|p| {
                let rel = p.strip_prefix(step12).unwrap_or(&p).to_path_buf();
                (p, Path::new("12_execute_output").join(rel))
            }));
        }
        let history = self.history();
        let mut swept = Swept::default();
        for (from, rel) in stale {
            match move_path(&from, &history.join(&rel)) {
                Ok(()) => {
                    // A model folder left empty by its `jax/` moving goes too.
                    if from.file_name() == Some(FRAMEWORK.as_ref()) {
                        let _ = from.parent().map(std::fs::remove_dir);
                    }
                    swept.moved.push(from)
                }
                Err(source) => swept.errors.push(ReportError::Move {
                    path: from,
                    to: history.clone(),
                    source,
                }),
            }
        }
        self.prune(HISTORY_KEEP, &mut swept);
        swept
    }

    /// Removes the history folders of all but the newest `keep` runs, never this
    /// run's. Only folders named like a run id are touched: anything else a person
    /// put there stays.
    pub fn prune(&self, keep: usize, swept: &mut Swept) {
        let root = self.results_dir.join(HISTORY_DIR);
        let mut runs: Vec<String> = names(&root)
            .into_iter()
            .filter(|n| is_run_id(n) && n != self.run_id && root.join(n).is_dir())
            .collect();
        // Newest first; this run's folder, when there is one, takes a place.
        runs.sort_by(|a, b| b.cmp(a));
        let room = keep.saturating_sub(usize::from(root.join(self.run_id).is_dir()));
        for name in runs.into_iter().skip(room) {
            let path = root.join(name);
            match std::fs::remove_dir_all(&path) {
                Ok(()) => swept.pruned.push(path),
                Err(source) => swept.errors.push(ReportError::Prune { path, source }),
            }
        }
    }

    /// Stale files of the results folder, with their place relative to it.
    fn stale_results(&self) -> Vec<(PathBuf, PathBuf)> {
        let dir = self.results_dir;
        let mut stale = Vec::new();
        for name in names(dir) {
            let id = name.strip_suffix("_results.json");
            if id.is_some_and(|id| !self.ids.contains(id)) && dir.join(&name).is_file() {
                stale.push(name);
            }
        }
        for name in names(&dir.join("logs")) {
            if !log_owner(&name).is_some_and(|id| self.ids.contains(id)) {
                stale.push(format!("logs/{name}"));
            }
        }
        for name in names(&dir.join("data")) {
            if !self.ids.contains(name.as_str()) {
                stale.push(format!("data/{name}"));
            }
        }
        stale
            .into_iter()
            .map(|rel| (dir.join(&rel), PathBuf::from(rel)))
            .collect()
    }
}

/// True for a name shaped like a run id: `20261122T183605.123Z-4242`, the UTC start
/// (so names sort by time) and a process id.
pub fn is_run_id(name: &str) -> bool {
    let Some((stamp, pid)) = name.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some((date, time)) = stamp.split_once('T') else {
        return false;
    };
    let Some(time) = time.strip_suffix('Z') else {
        return false;
    };
    let (whole, fraction) = time.split_once('.').unwrap_or((time, "0"));
    date.len() == 8
        && digits(date)
        && whole.len() == 6
        && digits(whole)
        && digits(fraction)
        && digits(pid)
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

/// Stale paths of GNN's layout: a model's `jax/` folder no script of this run uses,
/// and in a used one, `execution_logs/` files and `simulation_data/` folders of no
/// current script.
fn stale_gnn(step12: &Path, entries: &HashMap<String, GnnEntry>) -> Vec<PathBuf> {
    let impl_dirs: HashSet<&Path> = entries.values().map(|e| e.impl_dir.as_path()).collect();
    let logs: HashSet<PathBuf> = entries
        .values()
        .flat_map(|e| [e.results_file(), e.log_file()])
        .collect();
    let data: HashSet<&Path> = entries.values().map(|e| e.data_dir.as_path()).collect();
    let mut stale = Vec::new();
    for model in names(step12) {
        let impl_dir = step12.join(&model).join(FRAMEWORK);
        if model == "summaries" || !impl_dir.is_dir() {
            continue;
        }
        if !impl_dirs.contains(impl_dir.as_path()) {
            stale.push(impl_dir);
            continue;
        }
        let log_dir = impl_dir.join("execution_logs");
        stale.extend(
            names(&log_dir)
                .into_iter()
                .map(|n| log_dir.join(n))
                .filter(|p| !logs.contains(p)),
        );
        let sim = impl_dir.join("simulation_data");
        // With one script the data folder is `simulation_data` itself: all of it is its.
        if !data.contains(sim.as_path()) {
            stale.extend(
                names(&sim)
                    .into_iter()
                    .map(|n| sim.join(n))
                    .filter(|p| p.is_dir() && !data.contains(p.as_path())),
            );
        }
    }
    stale
}

/// The UTF-8 names in `dir`, sorted; none when it cannot be read. A name that is not
/// UTF-8 is no name jax-runner writes.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Moves `from` to `to`, creating `to`'s parent; across file systems, copies then
/// removes.
fn move_path(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_tree(from, to)?;
            match from.is_dir() {
                true => std::fs::remove_dir_all(from),
                false => std::fs::remove_file(from),
            }
        }
        other => other,
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

#[cfg(test)]
mod tests;
