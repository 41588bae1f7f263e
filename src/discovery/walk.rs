//! The tree walk, over `walkdir`. It lists `*.py` candidates with the file types the
//! directory read already gives (no `stat` per entry, no per-folder sort: the caller
//! sorts what it keeps), follows symlinked folders and files that stay inside the
//! tree's bounds (the rule the render manifest follows too), and warns about what it
//! skips instead of stopping. walkdir follows the links and finds the loops (a link
//! back to a folder the walk is inside); this module holds each link to the bounds
//! and enters each linked folder once. On a 100,000-file tree discovery stays as fast
//! as `find` (`bench/discovery.sh`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use walkdir::{DirEntry, WalkDir};

use super::bounds::Bounds;
use super::classify;

/// What the walk found.
#[derive(Debug, Default)]
pub struct Walked {
    /// `*.py` files (not `__init__.py`), in no particular order.
    pub candidates: Vec<PathBuf>,
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
        if kind.is_file() {
            if classify::is_python_file(name) {
                if !linked || self.inside(path).is_some() {
                    self.out.candidates.push(path.to_path_buf());
                }
            } else if classify::is_venv_marker(name) && !linked {
                let dir = path.parent().unwrap_or(path);
                self.out.venvs.push(dir.to_path_buf());
            }
            return false;
        }
        if !kind.is_dir() || !self.recursive || skipped(path, self.exclude) {
            return false;
        }
        if !linked {
            return true;
        }
        match self.inside(path) {
            Some(target) => self.followed.insert(target),
            None => false,
        }
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

fn skipped(path: &Path, exclude: &[PathBuf]) -> bool {
    classify::is_skipped_dir(path) || exclude.iter().any(|x| x == path)
}
