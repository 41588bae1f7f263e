//! Keeps the results folder (and GNN's step-12 layout) about the scripts of the tree:
//! before any script starts, the per-script files of scripts no longer in it (a
//! deleted or renamed script's `<id>_results.json`, its logs, its data folder) move
//! into `<results>/history/<run_id>/`. A record leaves only when its script's source
//! has left the tree, never because a scope found fewer scripts: scripts
//! `-k`/`--exclude` leave out are still the tree's, and so is a script whose source
//! is still where its record says but which this run's walk does not reach
//! (`--no-recursive`); both keep theirs, and the run carries them ([`Swept::standing`],
//! [`super::carry`]). A script the walk does reach and no longer finds (its
//! `import jax` gone) is no script of the tree's. Anything that globs
//! `*_results.json` then reads only the scripts `performance_metrics.json` lists, and
//! nothing is lost. `performance_metrics.json` itself stays: the scheduler's history
//! reads it.
//!
//! The history keeps earlier runs' folders within a [`HistoryBudget`] (`--history-runs`,
//! `--history-size`): the newest first, older ones removed, so a results folder run
//! into every day does not grow forever.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::confined::Kind;
use crate::error::ReportError;
use crate::model::gnn::FRAMEWORK;
use crate::report::gnn::GnnEntry;

use super::archive::{entries, move_path, STEP12_IN_HISTORY};
pub use super::archive::{log_owner, HISTORY_DIR};
pub use crate::config::HistoryBudget;

/// What the sweep looks at.
#[derive(Debug)]
pub struct Sweep<'a> {
    /// The results folder.
    pub results_dir: &'a Path,
    /// The ids of every script of the tree (run, kept, or left out by the selection).
    pub ids: HashSet<&'a str>,
    /// The tree, and whether this run's walk reaches a file of it (relative path):
    /// a record of a script out of its reach stands while its source is there.
    pub tree: (&'a Path, &'a crate::discovery::DiscoverOptions),
    /// GNN's step-12 folder and this run's places in it, when the layout is written.
    pub gnn: Option<(&'a Path, &'a HashMap<String, GnnEntry>)>,
    /// This run's id: names the history folder.
    pub run_id: &'a str,
    /// What the history keeps of earlier runs.
    pub budget: HistoryBudget,
}

/// What the sweep moved, and what it could not.
#[derive(Debug, Default)]
pub struct Swept {
    /// Files and folders moved, as they were named before.
    pub moved: Vec<PathBuf>,
    /// Earlier runs' history folders removed, beyond the [`HistoryBudget`].
    pub pruned: Vec<PathBuf>,
    /// The bytes those held.
    pub pruned_bytes: u64,
    /// Moves and removals that failed; the file stays where it was.
    pub errors: Vec<ReportError>,
    /// Records of scripts this run's walk does not reach whose source is still in the
    /// tree: they stand, and the run carries them.
    pub standing: Vec<crate::model::ScriptResult>,
}

impl Sweep<'_> {
    /// The history folder of this run.
    pub fn history(&self) -> PathBuf {
        self.results_dir.join(HISTORY_DIR).join(self.run_id)
    }

    /// Moves every stale per-script file into [`Sweep::history`].
    pub fn run(&self) -> Swept {
        self.run_with(None)
    }

    /// [`Sweep::run`], weighing the earlier runs' folders by `sizes` where it has them
    /// (read while the zygote imported jax) instead of walking them again.
    pub fn run_with(&self, sizes: Option<&HistorySizes>) -> Swept {
        let results = self.results_dir;
        let (stale_results, standing) = self.stale_results();
        let mut stale: Vec<(&Path, PathBuf, PathBuf)> = stale_results
            .into_iter()
            .map(|rel| (results, rel.clone(), rel))
            .collect();
        if let Some((step12, entries)) = self.gnn {
            stale.extend(stale_gnn(step12, entries).into_iter().map(|rel| {
                let to = Path::new(STEP12_IN_HISTORY).join(&rel);
                (step12, rel, to)
            }));
        }
        let history = Path::new(HISTORY_DIR).join(self.run_id);
        let mut swept = Swept {
            standing,
            ..Swept::default()
        };
        for (root, rel, to) in stale {
            let from = root.join(&rel);
            match move_path(root, &rel, results, &history.join(&to)) {
                Ok(()) => {
                    // A model folder left empty by its `jax/` moving goes too.
                    if from.file_name() == Some(FRAMEWORK.as_ref()) {
                        let _ = from.parent().map(std::fs::remove_dir);
                    }
                    swept.moved.push(from)
                }
                Err(source) => swept.errors.push(ReportError::Move {
                    path: from,
                    to: self.history(),
                    source,
                }),
            }
        }
        self.prune(self.budget, sizes, &mut swept);
        swept
    }

    /// Removes the history folders of the earlier runs beyond `budget` (the newest
    /// that fit both its count and its size stay), never this run's. Only folders
    /// named like a run id are touched: anything else a person put there stays.
    pub fn prune(&self, budget: HistoryBudget, sizes: Option<&HistorySizes>, swept: &mut Swept) {
        let root = self.results_dir.join(HISTORY_DIR);
        let runs = earlier_runs(self.results_dir, self.run_id);
        // Newest first; this run's folder, when there is one, takes a place.
        let room = budget
            .runs
            .saturating_sub(usize::from(root.join(self.run_id).is_dir()));
        let mut held = 0u64;
        let mut full = false;
        for (i, name) in runs.into_iter().enumerate() {
            let known = sizes.and_then(|s| s.0.get(&name).copied());
            let path = root.join(name);
            let size = known.unwrap_or_else(|| tree_size(&path));
            if !full && i < room && held + size <= budget.bytes {
                held += size;
                continue;
            }
            // Once one run does not fit, no older one stays: history is the newest.
            full = true;
            // Through handles: a `history` swapped for a link meanwhile is refused.
            match crate::confined::remove_tree(&path) {
                Ok(()) => {
                    swept.pruned.push(path);
                    swept.pruned_bytes += size;
                }
                Err(refused) => swept.errors.push(ReportError::Prune {
                    path,
                    source: refused.into(),
                }),
            }
        }
    }

    /// Stale files of the results folder, relative to it, and the records out of
    /// this run's reach that stand. Folders are listed without following links, so a
    /// `logs/` or `data/` planted as a link to elsewhere lists nothing and nothing is
    /// moved out of where it points.
    fn stale_results(&self) -> (Vec<PathBuf>, Vec<crate::model::ScriptResult>) {
        let dir = self.results_dir;
        let mut stale = Vec::new();
        let mut standing = Vec::new();
        for (name, kind) in entries(dir, Path::new("")) {
            let Some(id) = name.strip_suffix("_results.json") else {
                continue;
            };
            if self.ids.contains(id) || kind != Kind::Regular {
                continue;
            }
            match super::past::previous_result(dir, self.tree.0, id).filter(|r| self.stands(r)) {
                Some(record) => standing.push(record),
                None => stale.push(PathBuf::from(name)),
            }
        }
        let known = |id: &str| self.ids.contains(id) || standing.iter().any(|r| r.id == id);
        for (name, _) in entries(dir, Path::new("logs")) {
            if !log_owner(&name).is_some_and(known) {
                stale.push(Path::new("logs").join(name));
            }
        }
        for (name, _) in entries(dir, Path::new("data")) {
            if !known(&name) {
                stale.push(Path::new("data").join(name));
            }
        }
        (stale, standing)
    }

    /// Whether the record of a script this run did not find stands: its source is
    /// still a file of the tree where the record says, and this run's walk does not
    /// reach it. The path is the record's own, relative to the tree, and must stay
    /// below it.
    fn stands(&self, record: &crate::model::ScriptResult) -> bool {
        let (root, walk) = self.tree;
        let rel = Path::new(&record.relative_path);
        let below = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        below
            && !rel.as_os_str().is_empty()
            && !walk.reaches(rel)
            && std::fs::metadata(root.join(rel)).is_ok_and(|m| m.is_file())
    }
}

/// What the sweep before a run left: what to warn about, and the records out of the
/// run's reach that stand ([`Swept::standing`]).
#[derive(Debug, Default)]
pub struct BeforeRun {
    pub warnings: Vec<String>,
    pub standing: Vec<crate::model::ScriptResult>,
}

/// Before a run: moves the files of scripts whose source left the tree into its
/// history folder, and prunes the history to its budget.
pub fn before_run(
    config: &crate::config::RunConfig,
    discovery: &crate::discovery::Discovery,
    gnn: Option<&HashMap<String, GnnEntry>>,
    sizes: Option<&HistorySizes>,
) -> BeforeRun {
    let walk = crate::discovery::DiscoverOptions {
        recursive: config.recursive,
        exclude: Vec::new(),
    };
    let sweep = Sweep {
        results_dir: &config.results_dir,
        // Scripts left out by the selection are still the tree's: their files stay.
        ids: (discovery.scripts.iter())
            .chain(&discovery.unselected)
            .map(|s| s.id.as_str())
            .collect(),
        tree: (&config.output_dir, &walk),
        gnn: gnn.map(|g| (config.step12_dir.as_path(), g)),
        run_id: &config.run_id,
        budget: config.history,
    };
    let swept = sweep.run_with(sizes);
    if !swept.moved.is_empty() {
        tracing::info!(
            "moved {} file(s) of scripts no longer in the tree into {}",
            swept.moved.len(),
            sweep.history().display()
        );
    }
    let mut warnings: Vec<String> = Vec::new();
    if !swept.pruned.is_empty() {
        let mib = |bytes: u64| crate::model::reason::size(bytes as f64 / (1024.0 * 1024.0));
        warnings.push(format!(
            "removed the history of {} earlier run(s) ({}): {HISTORY_DIR} keeps the newest {} run(s) within {} (--history-runs, --history-size)",
            swept.pruned.len(),
            mib(swept.pruned_bytes),
            config.history.runs,
            mib(config.history.bytes),
        ));
    }
    let errors = swept.errors.iter();
    warnings.extend(errors.map(|e| crate::error::chain(e).join(": ")));
    BeforeRun {
        warnings,
        standing: swept.standing,
    }
}

/// The earlier runs' history folders, newest first: folders named like a run id, not
/// `run_id`'s. Listed without following links: a `history` planted as a link to
/// elsewhere lists nothing, so nothing there is weighed or removed.
fn earlier_runs(results_dir: &Path, run_id: &str) -> Vec<String> {
    let mut runs: Vec<String> = entries(results_dir, Path::new(HISTORY_DIR))
        .into_iter()
        .filter(|(n, kind)| is_run_id(n) && n != run_id && *kind == Kind::Directory)
        .map(|(n, _)| n)
        .collect();
    runs.sort_by(|a, b| b.cmp(a));
    runs
}

/// The bytes each earlier run's history folder holds, by its name: what the sweep
/// weighs against the [`HistoryBudget`]. Walking them was most of a sweep's time (6 to
/// 14 ms for ten earlier runs of 8 scripts, measured) on the way from the zygote's
/// ready to the first script, so a run reads them while its zygote imports jax
/// ([`HistorySizes::read`]) and the sweep takes them from here. Nothing of the run
/// writes to an earlier run's folder meanwhile; one missing here is walked then.
#[derive(Debug, Default)]
pub struct HistorySizes(HashMap<String, u64>);

impl HistorySizes {
    /// Walks every earlier run's folder under `results_dir`'s history.
    pub fn read(results_dir: &Path, run_id: &str) -> HistorySizes {
        let root = results_dir.join(HISTORY_DIR);
        HistorySizes(
            earlier_runs(results_dir, run_id)
                .into_iter()
                .map(|name| {
                    let size = tree_size(&root.join(&name));
                    (name, size)
                })
                .collect(),
        )
    }
}

/// The bytes of the regular files under `dir`, links not followed.
fn tree_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
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

/// Stale paths of GNN's layout, relative to `step12`: a model's `jax/` folder no
/// script of this run uses, and in a used one, `execution_logs/` files and
/// `simulation_data/` folders of no current script. Only real folders are looked
/// into: a link among them is not the runner's, and stays.
fn stale_gnn(step12: &Path, entries_of: &HashMap<String, GnnEntry>) -> Vec<PathBuf> {
    let rel = |p: &Path| p.strip_prefix(step12).unwrap_or(p).to_path_buf();
    let impl_dirs: HashSet<PathBuf> = entries_of.values().map(|e| rel(&e.impl_dir)).collect();
    let logs: HashSet<PathBuf> = entries_of
        .values()
        .flat_map(|e| [rel(&e.results_file()), rel(&e.log_file())])
        .collect();
    let data: HashSet<PathBuf> = entries_of.values().map(|e| rel(&e.data_dir)).collect();
    let mut stale = Vec::new();
    for (model, kind) in entries(step12, Path::new("")) {
        let impl_dir = Path::new(&model).join(FRAMEWORK);
        let is_folder = |rel: &Path| crate::confined::list_dir(step12, rel, 0).is_ok();
        if model == "summaries" || kind != Kind::Directory || !is_folder(&impl_dir) {
            continue;
        }
        if !impl_dirs.contains(&impl_dir) {
            stale.push(impl_dir);
            continue;
        }
        let log_dir = impl_dir.join("execution_logs");
        stale.extend(
            entries(step12, &log_dir)
                .into_iter()
                .map(|(n, _)| log_dir.join(n))
                .filter(|p| !logs.contains(p)),
        );
        let sim = impl_dir.join("simulation_data");
        // With one script the data folder is `simulation_data` itself: all of it is its.
        if !data.contains(&sim) {
            stale.extend(
                entries(step12, &sim)
                    .into_iter()
                    .filter(|(_, kind)| *kind == Kind::Directory)
                    .map(|(n, _)| sim.join(n))
                    .filter(|p| !data.contains(p)),
            );
        }
    }
    stale
}

#[cfg(test)]
mod tests;
