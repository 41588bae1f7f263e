//! What one sandboxed script sees, as a single list of mount steps. A cold start hands
//! the steps to bubblewrap as arguments (or, as root without bwrap, applies them itself
//! between fork and exec); a warm start hands the same steps to the zygote, whose
//! forked child applies them in a mount namespace of its own. One list, so the starts
//! cannot drift apart. A worker slot's script gets the same list cut in two
//! (`view/parts.rs`): the run's part, which the slot's zygote makes once, and its
//! own, which it adds on a copy of the slot's namespace.
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

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::grants;
use super::user::SandboxUser;

/// One step of the view, and its form on the wire, live with the code that applies
/// them (`crates/confine`, `mount.rs`).
pub use jax_runner_confine::mount::MountStep;
#[cfg(test)]
use parts::both_in;
pub use parts::{steps_and_split, Split};

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
    /// they lie even inside another hidden folder (for [`Split`], whose script part
    /// covers them; the view shows the same; without, the fewest covers, which the
    /// tests hold the split to).
    fn of(m: &Mounts, system: System, own: bool) -> Covers {
        let mut scratch: Vec<PathBuf> = system.scratch.iter().map(PathBuf::from).collect();
        scratch.extend(m.home.clone().filter(|h| h != Path::new("/")));
        // The host's top level was listed as folders already.
        let (mut hidden, _) = top_level(system);
        hidden.extend(
            system
                .details
                .iter()
                .map(PathBuf::from)
                .chain(m.sources.iter().cloned())
                .chain(m.outputs.iter().cloned())
                .filter(|p| p != Path::new("/") && is_real_dir(p)),
        );
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
        let under_scratch = |p: &Path| self.scratch.iter().any(|s| p != s && under(p, s));
        let under_hidden = |p: &Path| {
            let held = |h: &PathBuf| kept.iter().any(|k| k == p) && !kept.contains(h);
            self.hidden
                .iter()
                .any(|h| p != h && under(p, h) && !held(h))
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
            .filter(|c| under(p, c))
            .max_by_key(|c| c.as_os_str().len())
    }
}

/// The whole view's steps for `m` (see [`steps_of`]): the zygote's own view; an
/// attempt takes them with their split ([`steps_and_split`]).
pub fn steps(m: &Mounts) -> Vec<MountStep> {
    steps_in(m, SYSTEM)
}

fn steps_in(m: &Mounts, system: System) -> Vec<MountStep> {
    let m = &m.normalized();
    steps_of(m, system, &Covers::of(m, system, true))
}

/// The steps for `m` and its `covers`, in the order they must be applied: the covers
/// outermost first (with the folders on the way to a cover nested in another), the
/// binds back, shallowest first, with the folders on their way, the masks, then the
/// hidden covers turn read-only (the binds under them keep their own modes). With
/// [`Covers::of`]'s `own`, the run's tree and outputs get covers of their own even
/// inside another hidden folder, where one cover would do: the same view, in the
/// shape [`Split`] cuts.
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
    // never hidden. Those the host has are looked up once per run.
    static HOST: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    let host: &[PathBuf] = match system.root {
        Some(_) => HOST.get_or_init(|| {
            let reads = grants::host_reads().into_iter();
            reads.filter(|p| p.exists()).collect()
        }),
        None => &[],
    };
    let mut readable: Vec<&PathBuf> = m
        .readable
        .iter()
        .filter(|p| covers.around(p).is_some() && p.exists())
        .chain(host.iter().filter(|p| covers.around(p).is_some()))
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
            .filter(|c| under(parent, c))
            .max_by_key(|c| c.as_os_str().len());
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
    // Each folder is looked at once: most targets share their first folders.
    let mut looked: std::collections::HashSet<&Path> = std::collections::HashSet::new();
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
                .any(|c| under(a, c));
            if covered {
                break;
            }
            if !looked.insert(a) {
                continue;
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

/// The folders and files at the top of the host's root that no script sees: read
/// once per run (every attempt's view, the runner's own, would list `/` twice).
fn top_level(system: System) -> (Vec<PathBuf>, Vec<PathBuf>) {
    static HOST: std::sync::OnceLock<(Vec<PathBuf>, Vec<PathBuf>)> = std::sync::OnceLock::new();
    let Some(root) = system.root else {
        return (Vec::new(), Vec::new());
    };
    let read = || {
        let scratch: Vec<PathBuf> = system.scratch.iter().map(PathBuf::from).collect();
        grants::hidden_at_top(Path::new(root), &scratch)
    };
    match root == SYSTEM.root.unwrap_or_default() && system.scratch == SYSTEM.scratch {
        true => HOST.get_or_init(read).clone(),
        false => read(),
    }
}

/// `p` is `base` or lies beneath it, for normalized paths (see [`Mounts::normalized`]):
/// the view's loops ask this some thousands of times per attempt, and
/// `Path::starts_with` parses both paths into components each time.
fn under(p: &Path, base: &Path) -> bool {
    let (p, b) = (p.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    p.starts_with(b) && (p.len() == b.len() || b.ends_with(b"/") || p[b.len()] == b'/')
}

/// `p` without doubled slashes, `.` components or a trailing slash.
fn normal(p: &Path) -> PathBuf {
    p.components().collect()
}

impl Mounts {
    /// The same mounts with every path normalized, so that [`under`] agrees with
    /// `Path::starts_with` on them.
    fn normalized(&self) -> Mounts {
        let all = |v: &[PathBuf]| v.iter().map(|p| normal(p)).collect();
        Mounts {
            home: self.home.as_deref().map(normal),
            readable: all(&self.readable),
            writable: all(&self.writable),
            cwd: normal(&self.cwd),
            outputs: all(&self.outputs),
            sources: all(&self.sources),
            ..self.clone()
        }
    }
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

mod parts;
#[cfg(test)]
mod split;
#[cfg(test)]
mod tests;
