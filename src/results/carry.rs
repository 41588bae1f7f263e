//! What a run reports of the scripts it does not run: the earlier successes
//! `--resume` keeps are re-emitted as this run's, those the selection left out are
//! carried (their earlier record stands, untouched), and every line goes in
//! discovery order, run or carried. The runner carries the scripts it did not start
//! itself (see [`crate::runner::run_all`]).

use std::collections::HashMap;
use std::path::PathBuf;

use super::archive::Ledger;
use crate::config::RunConfig;
use crate::discovery::Discovery;
use crate::events::{EventSender, RunEvent};
use crate::model::{ScriptResult, ScriptSummary};
use crate::report::gnn::GnnEntry;

/// The files of GNN's layout that belong to each script's record (its
/// `execution_logs/` result and log), kept in the history with the rest of it.
pub fn record_files(gnn: Option<&HashMap<String, GnnEntry>>) -> HashMap<String, Vec<PathBuf>> {
    let entries = gnn.into_iter().flatten();
    entries
        .map(|(id, e)| (id.clone(), vec![e.results_file(), e.log_file()]))
        .collect()
}

/// An earlier success `--resume`/`--rerun-failed` keeps: not run, it says which run
/// ran it, and belongs to this one. The file it rewrites (and GNN's, in `extra`) is
/// kept in the history first.
pub fn kept(
    config: &RunConfig,
    mut previous: ScriptResult,
    extra: &HashMap<String, Vec<PathBuf>>,
    events: &EventSender,
) -> ScriptSummary {
    let extra = extra.get(&previous.id).map_or(&[][..], Vec::as_slice);
    for e in Ledger::of(config).keep_result(&previous.id, extra) {
        let message = crate::error::chain(&e).join(": ");
        events.emit(RunEvent::Warning { message });
    }
    let ran_in = std::mem::replace(&mut previous.run_id, config.run_id.clone());
    previous.resumed_from = previous.resumed_from.take().or(Some(ran_in));
    let mut line = ScriptSummary::of(&previous);
    line.resumed = true;
    events.emit(RunEvent::ScriptFinished {
        result: Box::new(previous),
    });
    line
}

/// The scripts the selection left out whose earlier record stands: each goes out as
/// carried, its files untouched. One that never ran has no record and is left out of
/// the run altogether: a `skipped` record for every script a `-k` did not pick would
/// bury the few it did, and would say a run considered a script it never looked at.
fn unselected(
    config: &RunConfig,
    discovery: &Discovery,
    events: &EventSender,
) -> Vec<(PathBuf, ScriptSummary)> {
    let why = format!("not selected by {}", config.selection.describe());
    let mut carried = Vec::new();
    for script in &discovery.unselected {
        let Some(earlier) =
            super::past::previous_result(&config.results_dir, &config.output_dir, &script.id)
        else {
            continue;
        };
        carried.push((
            script.relative_path.clone(),
            ScriptSummary::carried(&earlier),
        ));
        events.emit(RunEvent::ScriptCarried {
            result: Box::new(earlier),
            why: why.clone(),
        });
    }
    carried
}

/// Every script of the tree this run leaves out whose record stands, carried: those
/// the selection left out, and those its walk does not reach (`standing`).
pub fn left_out(
    config: &RunConfig,
    discovery: &Discovery,
    standing: Vec<ScriptResult>,
    events: &EventSender,
) -> Vec<(PathBuf, ScriptSummary)> {
    let mut carried = unselected(config, discovery, events);
    carried.extend(out_of_reach(config, standing, events));
    carried
}

/// The records of scripts this run's walk does not reach whose source is still in
/// the tree (see [`super::sweep`]): each goes out as carried, its files untouched.
fn out_of_reach(
    config: &RunConfig,
    standing: Vec<ScriptResult>,
    events: &EventSender,
) -> Vec<(PathBuf, ScriptSummary)> {
    let why = match config.recursive {
        false => "out of reach of --no-recursive; its source is still in the tree",
        true => "out of this run's reach; its source is still in the tree",
    };
    standing
        .into_iter()
        .map(|earlier| {
            let line = ScriptSummary::carried(&earlier);
            let key = PathBuf::from(&earlier.relative_path);
            events.emit(RunEvent::ScriptCarried {
                result: Box::new(earlier),
                why: why.to_string(),
            });
            (key, line)
        })
        .collect()
}

/// The lines in discovery order, which is by path relative to the tree (see
/// [`crate::discovery`]): the selected, the unselected and the unreached scripts are
/// all in it, so sorting their union by path puts each where a run of the whole tree
/// would.
pub fn in_discovery_order<T>(mut lines: Vec<(PathBuf, T)>) -> Vec<T> {
    lines.sort_by(|(a, _), (b, _)| a.cmp(b));
    lines.into_iter().map(|(_, line)| line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_and_carried_lines_interleave_as_discovered() {
        let [a, b, c, d] = ["a", "m/b", "m/jax/c", "z"].map(PathBuf::from);
        // Run lines first, carried after, as `execute` collects them.
        let lines = vec![(b, "b"), (d, "d"), (a, "a"), (c, "c")];
        let ids = in_discovery_order(lines);
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }
}
