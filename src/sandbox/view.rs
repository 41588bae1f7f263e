//! What one sandboxed script sees, as a single list of mount steps. A cold start hands
//! the steps to bubblewrap as arguments (or, as root without bwrap, applies them itself
//! between fork and exec); a warm start hands the same steps to the zygote, whose
//! forked child applies them in a mount namespace of its own. One list, so the starts
//! cannot drift apart.
//!
//! The view grants instead of hiding: of the host's root only what `grants.rs` names
//! stays (the system's programs and libraries, the kernel's views); every other
//! top-level folder (`/etc`, `/opt`, `/home`, `/root`, `/var`, `/run`, the folder the
//! tree lives in, whatever a machine adds) is an empty read-only tmpfs, every other
//! top-level file is masked, and what the script may read inside them (`/etc`'s
//! granted files, its interpreter, its own folder) is bound back. `/tmp`, `/dev/shm`
//! and `$HOME` are private scratch. When the runner is root the script is an
//! unprivileged user: a host folder that user could not pass through on the way to
//! something it needs is hidden too, so the way there is made of fresh folders it can
//! pass.

use std::path::{Path, PathBuf};

use super::grants;
use super::user::SandboxUser;

/// One step of the view, and its form on the wire, live with the code that applies
/// them (`crates/confine`, `mount.rs`).
pub use jax_runner_confine::mount::MountStep;

/// What one sandboxed attempt may see, beyond a read-only root.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    /// `$HOME`, hidden behind an empty tmpfs (as `/tmp` is behind a private one).
    pub home: Option<PathBuf>,
    /// Readable again inside a hidden folder (interpreter, script folder, shim).
    pub readable: Vec<PathBuf>,
    /// Writable (data folder, compilation cache).
    pub writable: Vec<PathBuf>,
    /// The script's folder, the working directory.
    pub cwd: PathBuf,
    /// Pass the NVIDIA device nodes.
    pub gpu: bool,
    /// The runner's own outputs (results folder, GNN's step-12 folder): hidden behind an
    /// empty tmpfs, so no script reads another's results, logs or data; the script's
    /// own data folder is bound back (it is among `writable`).
    pub outputs: Vec<PathBuf>,
    /// Where the run's scripts live (`--output-dir`): hidden like the outputs, so no
    /// script reads or rewrites another's source; its own folder is bound back
    /// read-only (it is among `readable`).
    pub sources: Vec<PathBuf>,
    /// The unprivileged user the script becomes when the runner is root.
    pub user: Option<SandboxUser>,
    /// The most each scratch tmpfs holds, bytes (`--memory-limit`); `None`: the
    /// kernel's default, half of RAM.
    pub scratch_size: Option<u64>,
}

/// What the host's `/sys` says about its network: no business of a script that has
/// none.
const HOST_DETAILS: &[&str] = &["/sys/class/net", "/sys/devices/virtual/net"];

/// Private scratch space, a fresh writable tmpfs for each script.
const SCRATCH: &[&str] = &["/tmp", "/dev/shm"];

/// The covers of a view: hidden folders (read-only at the end) and scratch ones.
struct Covers {
    hidden: Vec<PathBuf>,
    scratch: Vec<PathBuf>,
}

/// The host's folders every view hides or replaces. Tests give no root, so their
/// trees may lie anywhere.
#[derive(Debug, Clone, Copy)]
struct System {
    /// The folder whose entries are hidden unless granted (`/`).
    root: Option<&'static str>,
    details: &'static [&'static str],
    scratch: &'static [&'static str],
}

const SYSTEM: System = System {
    root: Some("/"),
    details: HOST_DETAILS,
    scratch: SCRATCH,
};

impl Covers {
    /// The covers of `m`'s view. `own`: the run's tree and outputs are covered where
    /// they lie even inside another hidden folder (for [`split`], whose script part
    /// covers them; the view shows the same).
    fn of(m: &Mounts, system: System, own: bool) -> Covers {
        let mut scratch: Vec<PathBuf> = system.scratch.iter().map(PathBuf::from).collect();
        scratch.extend(m.home.clone().filter(|h| h != Path::new("/")));
        let (top, _) = top_level(system);
        let mut hidden: Vec<PathBuf> = top
            .into_iter()
            .chain(system.details.iter().map(PathBuf::from))
            .chain(m.sources.iter().cloned())
            .chain(m.outputs.iter().cloned())
            .filter(|p| p != Path::new("/") && is_real_dir(p))
            .collect();
        if let Some(user) = m.user {
            hidden.extend(closed_ways(m, user, &hidden, &scratch));
        }
        let mut c = Covers { hidden, scratch };
        let kept: Vec<PathBuf> = match own {
            true => m.sources.iter().chain(&m.outputs).cloned().collect(),
            false => Vec::new(),
        };
        c.prune(&kept);
        c
    }

    /// Drops covers already hidden by another: anything under a scratch tmpfs, and a
    /// hidden folder under another hidden one. A scratch folder under a hidden one
    /// stays (a writable `$HOME` inside a hidden `/home`), and so does a `kept` one
    /// inside a hidden folder not kept.
    fn prune(&mut self, kept: &[PathBuf]) {
        let under_scratch = |p: &Path| self.scratch.iter().any(|s| p != s && p.starts_with(s));
        let under_hidden = |p: &Path| {
            let held = |h: &PathBuf| kept.contains(&p.to_path_buf()) && !kept.contains(h);
            self.hidden
                .iter()
                .any(|h| p != h && p.starts_with(h) && !held(h))
        };
        let scratch: Vec<PathBuf> = self
            .scratch
            .iter()
            .filter(|p| !under_scratch(p))
            .cloned()
            .collect();
        let hidden: Vec<PathBuf> = self
            .hidden
            .iter()
            .filter(|p| !under_scratch(p) && !under_hidden(p) && !scratch.contains(p))
            .cloned()
            .collect();
        self.hidden = dedup(hidden);
        self.scratch = dedup(scratch);
    }

    /// Every cover, outermost first.
    fn in_order(&self) -> Vec<&PathBuf> {
        let mut all: Vec<&PathBuf> = self.hidden.iter().chain(&self.scratch).collect();
        all.sort_by_key(|p| p.components().count());
        all
    }

    /// The innermost cover holding `p` (or `p` itself when it is one).
    fn around(&self, p: &Path) -> Option<&PathBuf> {
        self.hidden
            .iter()
            .chain(&self.scratch)
            .filter(|c| p.starts_with(c))
            .max_by_key(|c| c.components().count())
    }
}

/// The steps for `m`, in the order they must be applied: the covers outermost first
/// (with the folders on the way to a cover nested in another), the binds back,
/// shallowest first, with the folders on their way, the masks, then the hidden covers
/// turn read-only (the binds under them keep their own modes).
pub fn steps(m: &Mounts) -> Vec<MountStep> {
    steps_in(m, SYSTEM)
}

fn steps_in(m: &Mounts, system: System) -> Vec<MountStep> {
    steps_of(m, system, &Covers::of(m, system, false))
}

fn steps_of(m: &Mounts, system: System, covers: &Covers) -> Vec<MountStep> {
    let mut view = View {
        covers: covers.in_order().into_iter().cloned().collect(),
        binds: Vec::new(),
        out: Vec::new(),
    };
    for cover in &covers.in_order() {
        view.way_to(cover);
        // A cover inside another lands on a folder the outer tmpfs does not have.
        if covers.around(cover.parent().unwrap_or(cover)).is_some() {
            view.out.push(MountStep::Dir((*cover).clone()));
        }
        let cover = (*cover).clone();
        view.out.push(match covers.scratch.contains(&cover) {
            true => MountStep::Scratch {
                path: cover,
                size: m.scratch_size,
            },
            false => MountStep::Tmpfs(cover),
        });
    }
    // What every script reads of the host comes back where a cover hid it (`/etc`'s
    // granted files, a store under `/nix`); the rest of `grants::host_reads` was
    // never hidden.
    let host = match system.root {
        Some(_) => grants::host_reads(),
        None => Vec::new(),
    };
    let mut readable: Vec<&PathBuf> = m
        .readable
        .iter()
        .chain(&host)
        .filter(|p| covers.around(p).is_some() && p.exists())
        .collect();
    readable.sort_by_key(|p| p.components().count());
    readable.dedup();
    for p in readable {
        view.bind(MountStep::ReadOnly(p.clone()));
    }
    for p in m.writable.iter().filter(|p| p.exists()) {
        view.bind(MountStep::Writable(p.clone()));
    }
    let mut out = view.out;
    out.extend(top_level(system).1.into_iter().map(MountStep::Mask));
    out.extend(
        covers
            .hidden
            .iter()
            .map(|c| MountStep::RemountReadOnly(c.clone())),
    );
    out
}

/// One view made in two parts: what every script of a run sees alike, made once by a
/// worker slot's zygote in a mount namespace of its own, and what is one script's,
/// made by each script's process in a copy of the slot's namespace. Applying `slot`
/// then `script` builds the same view as [`steps`] (tested against a model of the
/// kernel's mounts in `view/split.rs`).
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

/// [`steps`] for `m`, split into the run's part and the script's.
pub fn split(m: &Mounts) -> Split {
    split_in(m, SYSTEM)
}

fn split_in(m: &Mounts, system: System) -> Split {
    let covers = Covers::of(m, system, true);
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
    let under_own = |p: &Path| own.iter().any(|c| p.starts_with(c));
    let mut out = Split::default();
    for step in steps_of(m, system, &covers) {
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

/// The view as the steps so far build it.
struct View {
    covers: Vec<PathBuf>,
    binds: Vec<PathBuf>,
    out: Vec<MountStep>,
}

impl View {
    fn bind(&mut self, step: MountStep) {
        let p = step.path().to_path_buf();
        self.way_to(&p);
        self.out.push(step);
        self.binds.push(p);
    }

    /// The folders to make before `target` can be mounted: those between the innermost
    /// cover holding it and it. Under a bind the host's own folders are there already.
    fn way_to(&mut self, target: &Path) {
        let parent = target.parent().unwrap_or(target);
        let base = self
            .covers
            .iter()
            .chain(&self.binds)
            .filter(|c| parent.starts_with(c))
            .max_by_key(|c| c.components().count());
        let Some(base) = base.filter(|b| self.covers.contains(b)).cloned() else {
            return;
        };
        let mut dirs: Vec<PathBuf> = target
            .ancestors()
            .skip(1)
            .take_while(|a| *a != base)
            .map(Path::to_path_buf)
            .collect();
        dirs.reverse();
        for d in dirs {
            let step = MountStep::Dir(d);
            if !self.out.contains(&step) {
                self.out.push(step);
            }
        }
    }
}

/// Host folders the sandbox user could not pass through on its way to something it
/// must reach (a bind, a cover's place): each becomes hidden, so the way is made of
/// fresh folders. What else such a folder holds the user could not reach anyway.
fn closed_ways(
    m: &Mounts,
    user: SandboxUser,
    hidden: &[PathBuf],
    scratch: &[PathBuf],
) -> Vec<PathBuf> {
    let mut closed: Vec<PathBuf> = Vec::new();
    let targets: Vec<&PathBuf> = m
        .readable
        .iter()
        .chain(&m.writable)
        .chain(std::iter::once(&m.cwd))
        .chain(hidden)
        .chain(scratch)
        .collect();
    for t in targets {
        for a in t.ancestors().skip(1).collect::<Vec<_>>().into_iter().rev() {
            let covered = hidden
                .iter()
                .chain(scratch)
                .chain(&closed)
                .any(|c| a.starts_with(c));
            if covered {
                break;
            }
            let open = std::fs::metadata(a).map(|meta| user.can_enter(&meta));
            if open.is_ok_and(|o| !o) {
                closed.push(a.to_path_buf());
                break;
            }
        }
    }
    closed
}

/// The folders and files at the top of the host's root that no script sees.
fn top_level(system: System) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let Some(root) = system.root else {
        return (Vec::new(), Vec::new());
    };
    let scratch: Vec<PathBuf> = system.scratch.iter().map(PathBuf::from).collect();
    grants::hidden_at_top(Path::new(root), &scratch)
}

/// A folder, not a link to one: a link's target is the host's business.
fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn dedup(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod split;
#[cfg(test)]
mod tests;
