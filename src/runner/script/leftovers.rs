//! A script's folders before it runs, and what it left in them after. The folders are
//! made without following a symlink planted where one should be (a tree another user
//! owns may hold such links), and the files the reports read afterwards (its logs,
//! `simulation_results.json`) are checked to be regular files within the runner's
//! limits. After every attempt the data folder keeps only regular files and folders.
//! Each problem is named on the script's result; the run goes on.

use std::path::Path;

use crate::confined::{self, Keep, Kind, Planted, TIDY_LIMIT};
use crate::listing;
use crate::model::gnn::{
    MAX_SIMULATION_RESULTS_BYTES, SIMULATION_RESULTS, SIMULATION_RESULTS_BUDGET,
};
use crate::model::ScriptResult;
use crate::runner::RunContext;

/// The folders of attempt `number`, made, with the halt checked when they cannot be.
/// A later attempt starts empty too: the one before keeps its files in the history.
pub(super) fn ready(
    ctx: &RunContext,
    id: &str,
    data_dir: &Path,
    number: u32,
    result: &mut ScriptResult,
) -> std::io::Result<()> {
    if number > 1 {
        for e in ctx.ledger().archive_attempt(id, data_dir, number) {
            result.note_problem(crate::error::chain(&e).join(": "));
        }
    }
    let made = make_folders(ctx, data_dir, result);
    if let Err(e) = &made {
        ctx.halt.check(data_dir, e);
    }
    made
}

/// Makes `logs/` and the script's data folder, each below the folder it belongs to
/// (the results folder, or GNN's `12_execute_output`), which is reached with no link
/// followed on its path (the configuration refused any and made the path canonical;
/// one planted since is refused). Below it, a symlink where a folder should be is
/// removed and a real folder made: the runner owns these folders, and a link there
/// would send the script's data, or the sandbox's writable mount, wherever the link
/// points.
///
/// What remains: the data folder goes to the script as a path (`GNN_OUTPUT_DIR`, the
/// sandbox's bind mount and Landlock rule), resolved again when the attempt starts. A
/// link planted on that path between this check and the attempt's start (the tree's
/// owner swapping `execution_results` for one, say) would be followed by the sandbox
/// setup; handing the attempt a descriptor of the folder instead would close it.
fn make_folders(
    ctx: &RunContext,
    data_dir: &Path,
    result: &mut ScriptResult,
) -> std::io::Result<()> {
    let results = &ctx.config.results_dir;
    make(results, Path::new("logs"), "logs folder", result)?;
    let root = [results, &ctx.config.step12_dir]
        .into_iter()
        .filter(|root| data_dir.starts_with(root))
        .max_by_key(|root| root.as_os_str().len());
    match root {
        Some(root) => {
            let rel = data_dir.strip_prefix(root).unwrap_or(data_dir);
            make(root, rel, "data folder", result)
        }
        // A data folder of a layout the runner does not own: made as named.
        None => std::fs::create_dir_all(data_dir),
    }
}

fn make(root: &Path, rel: &Path, what: &str, result: &mut ScriptResult) -> std::io::Result<()> {
    match confined::make_dirs(root, rel, Planted::Replace) {
        Ok(made) => {
            for link in made.replaced {
                result.note_problem(format!(
                    "{what}: a symlink was planted at {}; replaced by a folder",
                    link.display()
                ));
            }
            Ok(())
        }
        Err(refused) => Err(refused.into()),
    }
}

/// One pass over what an attempt left in its data folder, after every attempt and
/// before its record goes anywhere: the setuid and setgid bits (and write for others) are
/// cleared (the seccomp filter refuses such modes; should one get past it, no file
/// there keeps it), and FIFOs, sockets, device nodes and symlinks are removed, each
/// named: the next pipeline step (GNN's step 16 walks `12_execute_output` and opens
/// every file) reads only regular files and folders, and never blocks on what a
/// script left.
pub(super) fn tidy(data_dir: &Path, result: &mut ScriptResult) {
    let t = match confined::tidy(data_dir, Keep::FilesAndFolders) {
        Ok(t) => t,
        Err(e) => {
            result.note_problem(format!("data folder: failed to look it over: {e}"));
            return;
        }
    };
    if let Some(first) = t.cleared.first() {
        result.note_problem(format!(
            "data folder: cleared setuid, setgid or world-write bits of {} file(s), first {}",
            t.cleared.len(),
            first.display()
        ));
    }
    let removed: Vec<String> = t
        .removed
        .iter()
        .map(|(rel, kind)| removed(rel, *kind))
        .collect();
    let what = "entries removed from the data folder (FIFOs, sockets, device nodes or symlinks)";
    for problem in listing::bounded_messages(&removed, listing::LISTED, what) {
        result.note_problem(problem);
    }
    for (rel, e) in t.unopened.iter().take(listing::NAMED) {
        result.note_problem(format!(
            "data folder: could not look into `{}` ({e}): FIFOs, sockets, device nodes or symlinks in it were not removed",
            rel.display()
        ));
    }
    if t.cut {
        result.note_problem(format!(
            "data folder: looked at the first {TIDY_LIMIT} entries only: FIFOs, sockets, device nodes or symlinks beyond them were not removed"
        ));
    }
    if let Some(e) = t.failed {
        result.note_problem(format!(
            "data folder: failed to clear or remove an entry: {e}"
        ));
    }
}

/// The problem that names what [`tidy`] removed at `rel` (empty: the data folder's own
/// place).
fn removed(rel: &Path, kind: Kind) -> String {
    const KEPT: &str = "only regular files and folders are kept";
    match rel.as_os_str().is_empty() {
        true => format!("data folder: a {kind} stood in its place; removed: {KEPT}"),
        false => format!(
            "removed {kind} `{}` from the data folder: {KEPT}",
            rel.display()
        ),
    }
}

/// Notes what the script left where the reports will read: a `simulation_results.json`
/// (GNN's step-12 document copies from it) that is not a regular file, too large, or
/// holds more values than the runner parses, and a log of its final attempt that is
/// not a regular file. Only that JSON is read here (bounded, one at a time); the logs
/// are only looked at.
pub(super) fn check_leftovers(data_dir: &Path, result: &mut ScriptResult) {
    let simulation = data_dir.join(SIMULATION_RESULTS);
    let (max, budget) = (MAX_SIMULATION_RESULTS_BYTES, SIMULATION_RESULTS_BUDGET);
    match confined::check_json_in(&simulation, max, budget) {
        Err(e) if !e.is_not_found() => result.note_problem(format!("{SIMULATION_RESULTS}: {e}")),
        _ => {}
    }
    let logs = [
        ("stdout log", result.stdout_log.clone()),
        ("stderr log", result.stderr_log.clone()),
    ];
    for (what, log) in logs {
        let log = Path::new(&log);
        let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
            continue;
        };
        // Their size does not matter: the reports read a bounded tail, and copy no
        // more than the runner itself wrote.
        match confined::probe(dir, Path::new(name), u64::MAX) {
            Err(e) if !e.is_not_found() => result.note_problem(format!("{what}: {e}")),
            _ => {}
        }
    }
}
