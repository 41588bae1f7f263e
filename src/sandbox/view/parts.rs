//! A view in two parts: the run's, which a worker slot's zygote makes once, and the
//! script's, which each script's process adds on a copy of it (see [`Split`]).

use std::path::{Path, PathBuf};

use super::{steps_of, under, Covers, MountStep, Mounts, System, SYSTEM};

/// The view's steps ([`super::steps`]) and the same steps cut in two ([`Split`]), from
/// one look at the host.
pub fn steps_and_split(m: &Mounts) -> (Vec<MountStep>, Split) {
    both_in(m, SYSTEM)
}

pub(super) fn both_in(m: &Mounts, system: System) -> (Vec<MountStep>, Split) {
    let m = &m.normalized();
    let covers = Covers::of(m, system, true);
    let whole = steps_of(m, system, &covers);
    let split = split_of(m, &covers, &whole);
    (whole, split)
}

/// One view made in two parts: what every script of a run sees alike, made once by a
/// worker slot's zygote in a mount namespace of its own, and what is one script's,
/// made by each script's process in a copy of the slot's namespace. Applying `slot`
/// then `script` builds the same view as the whole list (tested against a model of
/// the kernel's mounts in `view/split.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// The run's part: the hidden folders, the host's files and the interpreter
    /// bound back, the masks; the places of the script's part (a run's tree, its
    /// outputs, `$HOME` inside a hidden folder) bound back whole from the host, so
    /// the script's process can open its own folders there before covering them.
    pub slot: Vec<MountStep>,
    /// The script's part: fresh scratch (`/tmp`, `/dev/shm`, `$HOME`), the run's
    /// tree and outputs covered, and what the script may see in them bound back.
    pub script: Vec<MountStep>,
}

/// Cuts `whole` ([`steps_of`] with the tree's and outputs' own covers) in two.
fn split_of(m: &Mounts, covers: &Covers, whole: &[MountStep]) -> Split {
    // The covers whose contents differ between scripts: fresh scratch, and the tree's
    // and the outputs' folders, where each script sees only its own.
    let own: Vec<PathBuf> = covers
        .scratch
        .iter()
        .chain(
            covers
                .hidden
                .iter()
                .filter(|c| m.sources.contains(c) || m.outputs.contains(c)),
        )
        .cloned()
        .collect();
    let under_own = |p: &Path| own.iter().any(|c| under(p, c));
    let mut out = Split::default();
    for step in whole.iter().cloned() {
        let path = step.path().to_path_buf();
        if !under_own(&path) {
            out.slot.push(step);
            continue;
        }
        match &step {
            // The folder a cover inside a hidden folder lands on is the run's.
            MountStep::Dir(p) if own.contains(p) => out.slot.push(step),
            // Where the script's cover lands inside one of the run's, the slot shows
            // the host's folder, whence the script's process binds its own.
            MountStep::Tmpfs(p) | MountStep::Scratch { path: p, .. }
                if own.contains(p)
                    && covers.around(p.parent().unwrap_or(p)).is_some()
                    && p.exists() =>
            {
                out.slot.push(match m.outputs.contains(p) {
                    true => MountStep::Writable(p.clone()),
                    false => MountStep::ReadOnly(p.clone()),
                });
                out.script.push(step);
            }
            _ => out.script.push(step),
        }
    }
    out
}
