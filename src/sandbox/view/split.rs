//! The view in two parts builds the same view as in one: both are applied to a model
//! of the kernel's mount table (a later mount at or above a path hides what was
//! there; a bind shows the host's folder its source named when the step list began;
//! folders are made only in a writable tmpfs) and every path the steps name, with
//! their neighbours, must show the same thing. The model is the boundary's test: a
//! path the script's part left to the slot's, or a bind whose source the slot's part
//! had already hidden, shows differently.

use std::collections::BTreeSet;

use super::*;

/// What a mount holds in the model.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// The host's folder or file at this path (a bind's source, opened before the
    /// list's first cover).
    Host(PathBuf),
    /// A fresh tmpfs, and the folders made in it (relative paths).
    Tmpfs {
        scratch: bool,
        made: BTreeSet<PathBuf>,
    },
    /// An empty device over a file.
    Mask,
    /// A bind whose source the view had already hidden: never right.
    Hidden(PathBuf),
}

#[derive(Debug, Clone)]
struct Mount {
    at: PathBuf,
    kind: Kind,
    read_only: bool,
}

/// What a path shows in a view.
#[derive(Debug, Clone, PartialEq)]
enum Shown {
    Host {
        path: PathBuf,
        read_only: bool,
    },
    Tmpfs {
        scratch: bool,
        read_only: bool,
        exists: bool,
    },
    Mask,
    Hidden(PathBuf),
}

#[derive(Debug, Clone, Default)]
struct Table(Vec<Mount>);

impl Table {
    /// The mount `p` resolves through: the latest at or above it.
    fn top(&self, p: &Path) -> Option<usize> {
        (0..self.0.len())
            .rev()
            .find(|&i| p.starts_with(&self.0[i].at))
    }

    fn shows(&self, p: &Path) -> Shown {
        let Some(i) = self.top(p) else {
            return Shown::Host {
                path: p.to_path_buf(),
                read_only: false,
            };
        };
        let m = &self.0[i];
        let rel = p.strip_prefix(&m.at).expect("under its mount");
        match &m.kind {
            Kind::Host(src) => Shown::Host {
                path: if rel.as_os_str().is_empty() {
                    src.clone()
                } else {
                    src.join(rel)
                },
                read_only: m.read_only,
            },
            Kind::Tmpfs { scratch, made } => Shown::Tmpfs {
                scratch: *scratch,
                read_only: m.read_only,
                exists: rel.as_os_str().is_empty() || made.contains(rel),
            },
            Kind::Mask => Shown::Mask,
            Kind::Hidden(src) => Shown::Hidden(src.clone()),
        }
    }

    /// Whether `p` is there to mount on (a host path, or a folder made in a tmpfs).
    fn exists(&self, p: &Path) -> bool {
        match self.shows(p) {
            Shown::Host { path, .. } => path.exists(),
            Shown::Tmpfs { exists, .. } => exists,
            Shown::Mask => false,
            Shown::Hidden(_) => false,
        }
    }

    /// Makes `p` in the writable tmpfs it lies in; a folder already there is kept
    /// (`make_dir` and `bind_from` take `EEXIST` as done).
    fn make(&mut self, p: &Path) -> Result<(), String> {
        if self.exists(p) {
            return Ok(());
        }
        let parent = p.parent().unwrap_or(p);
        if !self.exists(parent) {
            return Err(format!("no folder above {p:?}"));
        }
        let i = self
            .top(p)
            .ok_or(format!("{p:?} would be made on the host"))?;
        let m = &mut self.0[i];
        let rel = p.strip_prefix(&m.at).unwrap().to_path_buf();
        match (&mut m.kind, m.read_only) {
            (Kind::Tmpfs { made, .. }, false) => {
                made.insert(rel);
                Ok(())
            }
            _ => Err(format!("{p:?} would be made in {:?}", m.at)),
        }
    }

    /// One list of steps, as `MountNamespace::apply` runs it.
    fn apply(&mut self, steps: &[MountStep]) -> Result<(), String> {
        let before = self.clone();
        let source = |p: &Path| match before.shows(p) {
            Shown::Host { path, .. } => Kind::Host(path),
            _ => Kind::Hidden(p.to_path_buf()),
        };
        for step in steps {
            let p = step.path().to_path_buf();
            let fresh = |scratch| Kind::Tmpfs {
                scratch,
                made: BTreeSet::new(),
            };
            let (kind, read_only) = match step {
                MountStep::Dir(_) => {
                    self.make(&p)?;
                    continue;
                }
                MountStep::RemountReadOnly(_) => {
                    let i = self.top(&p).filter(|&i| self.0[i].at == p);
                    let i = i.ok_or(format!("nothing mounted at {p:?}"))?;
                    self.0[i].read_only = true;
                    continue;
                }
                MountStep::Tmpfs(_) | MountStep::Scratch { .. } if !self.exists(&p) => {
                    return Err(format!("no place for the cover at {p:?}"))
                }
                MountStep::Tmpfs(_) => (fresh(false), false),
                MountStep::Scratch { .. } => (fresh(true), false),
                MountStep::ReadOnly(_) | MountStep::Writable(_) => {
                    self.make(&p)?;
                    (source(&p), matches!(step, MountStep::ReadOnly(_)))
                }
                MountStep::Mask(_) => (Kind::Mask, true),
            };
            self.0.push(Mount {
                at: p,
                kind,
                read_only,
            });
        }
        Ok(())
    }
}

/// Every path the steps name, their folders above, a child of each (made or not),
/// and what lies in the test's tree: what a script could look at.
fn probes(steps: &[MountStep], tree: &Path) -> BTreeSet<PathBuf> {
    let mut all = BTreeSet::new();
    for s in steps {
        for a in s.path().ancestors() {
            all.insert(a.to_path_buf());
            all.insert(a.join("unmade"));
        }
    }
    for e in walkdir::WalkDir::new(tree).into_iter().flatten() {
        all.insert(e.path().to_path_buf());
        all.insert(e.path().join("unmade"));
    }
    all
}

/// Applies the view whole and in two parts; every probe must show the same, and the
/// script's part holds only what lies under the script's own covers.
fn same_view(m: &Mounts, system: System, tree: &Path) -> Split {
    // The fewest covers: the tree and outputs inside a hidden folder get none.
    let fewest = {
        let m = &m.normalized();
        steps_of(m, system, &Covers::of(m, system, false))
    };
    let whole = steps_in(m, system);
    let parts = both_in(m, system).1;
    let mut reference = Table::default();
    reference
        .apply(&fewest)
        .unwrap_or_else(|e| panic!("fewest: {e}: {fewest:?}"));
    let mut one = Table::default();
    one.apply(&whole)
        .unwrap_or_else(|e| panic!("whole: {e}: {whole:?}"));
    let mut two = Table::default();
    two.apply(&parts.slot)
        .unwrap_or_else(|e| panic!("slot: {e}: {:?}", parts.slot));
    two.apply(&parts.script)
        .unwrap_or_else(|e| panic!("script: {e}: {:?}", parts.script));
    let mut named = probes(&whole, tree);
    named.extend(probes(&fewest, tree));
    for p in named {
        let want = reference.shows(&p);
        assert_eq!(
            want,
            one.shows(&p),
            "{p:?}\nfewest {fewest:?}\nwhole {whole:?}"
        );
        assert_eq!(
            want,
            two.shows(&p),
            "{p:?}\nfewest {fewest:?}\nsplit {parts:?}"
        );
    }
    parts
}

/// A system of the test's own: `work` and `homes` hidden as a host's top-level
/// folders are, `tmp` scratch.
fn system(base: &Path) -> System {
    std::fs::create_dir_all(base.join("tmp")).unwrap();
    let leak = |p: PathBuf| -> &'static str { Box::leak(p.to_str().unwrap().to_owned().into()) };
    System {
        root: None,
        details: Box::leak(vec![leak(base.join("work")), leak(base.join("homes"))].into()),
        scratch: Box::leak(vec![leak(base.join("tmp"))].into()),
    }
}

fn tree() -> tempfile::TempDir {
    tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/target")).unwrap()
}

/// One script's mounts in a run whose tree lies at `tree`, its results at
/// `results`, its interpreter in `$HOME`, its cache in a hidden folder.
fn script(base: &Path, tree: &Path, results: &Path, name: &str) -> Mounts {
    let home = base.join("homes/u");
    let folder = tree.join(name).join("jax");
    let data = results.join("data").join(name);
    for d in [
        &folder,
        &data,
        &home.join(".cache/venv"),
        &base.join("work/cache"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(folder.join("s.py"), "print(1)\n").unwrap();
    Mounts {
        home: Some(home.clone()),
        readable: vec![home.join(".cache/venv"), folder.clone(), tree.join("lib")],
        writable: vec![data, base.join("work/cache")],
        cwd: folder,
        sources: vec![tree.to_path_buf()],
        outputs: vec![results.to_path_buf(), base.join("work/step12")],
        ..Default::default()
    }
}

/// Two scripts of one run, their tree at `tree` and their results at `results`: each
/// splits into the same view, and the run's part is both scripts'.
fn two_scripts(b: &Path, tree: &Path, results: &Path) -> (Split, Split) {
    std::fs::create_dir_all(tree.join("lib")).unwrap();
    let a = same_view(&script(b, tree, results, "a"), system(b), b);
    let other = same_view(&script(b, tree, results, "b"), system(b), b);
    assert_eq!(a.slot, other.slot, "the run's part is every script's");
    assert_ne!(a.script, other.script);
    (a, other)
}

#[test]
fn a_tree_in_a_hidden_folder_splits_into_the_same_view() {
    let base = tree();
    let b = base.path();
    let tree = b.join("work/tree");
    let (a, _) = two_scripts(b, &tree, &tree.join("results"));
    // The script's part is its scratch, its tree's and outputs' covers and what it
    // sees in them; the interpreter in a hidden folder and the cache are the run's.
    assert!(a.slot.contains(&MountStep::Writable(b.join("work/cache"))));
    assert!(a.slot.contains(&MountStep::ReadOnly(tree.clone())));
    assert!(a.script.contains(&MountStep::Tmpfs(tree.clone())));
    assert!(a.script.contains(&MountStep::ReadOnly(tree.join("a/jax"))));
    assert!(!a.slot.iter().any(|s| s.path().starts_with(tree.join("a"))));
}

#[test]
fn a_tree_in_scratch_with_outputs_elsewhere_splits_into_the_same_view() {
    let base = tree();
    let b = base.path();
    let (a, _) = two_scripts(b, &b.join("tmp/tree"), &b.join("work/results"));
    assert!(a.script.contains(&MountStep::Scratch {
        path: b.join("tmp"),
        size: None
    }));
}

#[test]
fn a_tree_behind_a_folder_the_sandbox_user_cannot_enter_splits_into_the_same_view() {
    use std::os::unix::fs::PermissionsExt;
    let base = tree();
    let b = base.path();
    let private = b.join("work/private");
    let tree = private.join("tree");
    std::fs::create_dir_all(tree.join("lib/closed")).unwrap();
    let results = tree.join("results");
    let user = Some(SandboxUser {
        uid: 61999,
        gid: 61999,
    });
    let a = Mounts {
        user,
        ..script(b, &tree, &results, "a")
    };
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        tree.join("lib/closed"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let parts = same_view(&a, system(b), b);
    let other = same_view(
        &Mounts {
            user,
            ..script(b, &tree, &results, "b")
        },
        system(b),
        b,
    );
    assert_eq!(parts.slot, other.slot);
}

/// The host's own root, with the tree in the checkout's `target/`: the run's part
/// holds the host's covers and `/etc`'s files.
#[test]
fn the_hosts_view_splits_into_the_same_view() {
    let base = tree();
    let b = base.path();
    let tree = b.join("tree");
    std::fs::create_dir_all(tree.join("lib")).unwrap();
    let results = b.join("tree/results");
    let m = script(b, &tree, &results, "a");
    let parts = same_view(&m, SYSTEM, b);
    assert!(parts.slot.contains(&MountStep::Tmpfs("/etc".into())));
    let tmp = MountStep::Scratch {
        path: "/tmp".into(),
        size: None,
    };
    assert!(parts.script.contains(&tmp) && !parts.slot.contains(&tmp));
    assert!(parts.script.len() < parts.slot.len(), "{parts:?}");
}

/// The tree is itself one of the host's hidden folders (`--output-dir /data`): its
/// cover is the script's, with nothing of the run's around it.
#[test]
fn a_tree_that_is_a_hidden_folder_itself_splits_into_the_same_view() {
    let base = tree();
    let b = base.path();
    let tree = b.join("work");
    let (a, _) = two_scripts(b, &tree, &tree.join("results"));
    assert!(a.script.contains(&MountStep::Tmpfs(tree.clone())));
    assert!(!a.slot.iter().any(|s| s.path() == tree));
}
