//! The tree walk, over `walkdir`. It lists `*.py` candidates with the file types the
//! directory read already gives (no `stat` per entry, no per-folder sort: the caller
//! sorts what it keeps), follows symlinked folders and files that stay inside the
//! tree's bounds (the rule the render manifest follows too), and warns about what it
//! skips instead of stopping. walkdir follows the links and finds the loops (a link
//! back to a folder the walk is inside); this module holds each link to the bounds
//! and enters each linked folder once. A file reached through a link is named by its
//! real path when that lies in the tree: it runs from its own folder, as `python` runs
//! a linked script, and one reached both ways is the same candidate. On a
//! 100,000-file tree discovery stays as fast as `find` (`bench/discovery.sh`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use walkdir::{DirEntry, WalkDir};

use super::bounds::Bounds;
use super::classify;

/// A `*.py` file the walk met.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    /// Its path in the tree: the real one when it was reached through a link and
    /// resolves inside `--output-dir`, else the path it was reached by.
    pub path: PathBuf,
    /// The path it was reached by (through links), which decides whether it sits in a
    /// `jax/` folder or a virtual environment.
    pub reached: PathBuf,
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Walked {
    /// `*.py` files (not `__init__.py`), in no particular order.
    pub candidates: Vec<Candidate>,
    /// Folders holding a `pyvenv.cfg`: virtual environments.
    pub venvs: Vec<PathBuf>,
    /// Entries skipped, sorted.
    pub warnings: Vec<String>,
}

/// Walks the tree of `bounds` from its root (canonical). Without `recursive` only its
/// direct files count.
pub fn walk(bounds: &Bounds, recursive: bool, exclude: &[PathBuf]) -> Walked {
    let mut walker = Walker {
        bounds,
        recursive,
        exclude,
        followed: HashSet::new(),
        via: Vec::new(),
        out: Walked::default(),
    };
    let mut entries = WalkDir::new(bounds.root()).follow_links(true).into_iter();
    while let Some(entry) = entries.next() {
        match entry {
            // The root itself: always entered.
            Ok(entry) if entry.depth() == 0 => {}
            Ok(entry) => {
                // walkdir has opened a folder it yields; skipping closes it unread.
                if !walker.enter(&entry) && entry.file_type().is_dir() {
                    entries.skip_current_dir();
                }
            }
            Err(e) => walker.skip(&e),
        }
    }
    walker.out.warnings.sort();
    walker.out
}

/// The walk's rules and what it has found so far.
struct Walker<'a> {
    bounds: &'a Bounds,
    recursive: bool,
    exclude: &'a [PathBuf],
    /// Linked folders entered, by their real path: two links to one folder enter it
    /// once, so a tree of links cannot multiply the walk.
    followed: HashSet<PathBuf>,
    /// The linked folders the walk is inside, outermost first, each with its real
    /// path: walkdir goes depth first, so they form a stack.
    via: Vec<(PathBuf, PathBuf)>,
    out: Walked,
}

impl Walker<'_> {
    /// Takes one entry below the root (links already followed: its file type is its
    /// target's); for a folder, says whether to walk into it.
    fn enter(&mut self, entry: &DirEntry) -> bool {
        let name = entry.file_name();
        let path = entry.path();
        let linked = entry.path_is_symlink();
        let kind = entry.file_type();
        while matches!(self.via.last(), Some((link, _)) if !path.starts_with(link)) {
            self.via.pop();
        }
        if kind.is_file() {
            if classify::is_python_file(name) {
                let real = match linked {
                    true => self.inside(path),
                    false => self.real_below_link(path),
                };
                if !linked || real.is_some() {
                    let path = path.to_path_buf();
                    self.out.candidates.push(Candidate {
                        path: real
                            .filter(|r| r.starts_with(self.bounds.root()))
                            .unwrap_or_else(|| path.clone()),
                        reached: path,
                    });
                }
            } else if classify::is_venv_marker(name) && !linked {
                let dir = path.parent().unwrap_or(path);
                self.out.venvs.push(dir.to_path_buf());
            }
            return false;
        }
        if !kind.is_dir() {
            // A FIFO, socket or device named like a script: never opened (reading a
            // FIFO would block), but never dropped without a word either.
            if classify::is_python_file(name) {
                self.out.warnings.push(format!(
                    "skipped {}: not a regular file ({})",
                    path.display(),
                    file_kind(kind)
                ));
            }
            return false;
        }
        if !self.recursive || skipped(path, self.exclude) {
            return false;
        }
        if !linked {
            return true;
        }
        match self.inside(path) {
            Some(target) if self.followed.insert(target.clone()) => {
                self.via.push((path.to_path_buf(), target));
                true
            }
            _ => false,
        }
    }

    /// The real path of a file below a linked folder (none outside one): the
    /// innermost link's real path and the rest of the path.
    fn real_below_link(&self, path: &Path) -> Option<PathBuf> {
        let (link, target) = self.via.last()?;
        Some(target.join(path.strip_prefix(link).ok()?))
    }

    /// The real path of the link `path` when it stays in bounds; otherwise none, with
    /// a warning.
    fn inside(&mut self, path: &Path) -> Option<PathBuf> {
        match self.bounds.confine(path) {
            Ok(Ok(target)) => Some(target),
            Ok(Err(outside)) => {
                self.out.warnings.push(format!(
                    "skipped {}: a symlink out of --output-dir (to {})",
                    path.display(),
                    outside.display()
                ));
                None
            }
            Err(e) => {
                self.out
                    .warnings
                    .push(format!("skipped unreadable entry {}: {e}", path.display()));
                None
            }
        }
    }

    /// Records what walkdir could not read or follow, and goes on.
    fn skip(&mut self, e: &walkdir::Error) {
        let warning = match (e.loop_ancestor(), e.path()) {
            // A loop through a folder the walk would not enter anyway is no news.
            (Some(_), Some(path)) if !self.recursive || skipped(path, self.exclude) => return,
            (Some(ancestor), Some(path)) => format!(
                "skipped symlink loop at {} (points back to {})",
                path.display(),
                ancestor.display()
            ),
            (None, Some(path)) => match e.io_error() {
                Some(io) => format!("skipped unreadable entry {}: {io}", path.display()),
                None => format!("skipped unreadable entry {}: {e}", path.display()),
            },
            _ => format!("skipped unreadable entry: {e}"),
        };
        self.out.warnings.push(warning);
    }
}

/// What a file that is neither a regular file nor a folder is, in words.
fn file_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if kind.is_fifo() => "a FIFO",
        _ if kind.is_socket() => "a socket",
        _ if kind.is_block_device() || kind.is_char_device() => "a device",
        _ => "not a file",
    }
}

fn skipped(path: &Path, exclude: &[PathBuf]) -> bool {
    classify::is_skipped_dir(path) || exclude.iter().any(|x| x == path)
}
