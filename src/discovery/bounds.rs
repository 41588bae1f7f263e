//! The one rule for what discovery may run, used by the render manifest and by the
//! tree walk alike: a script's real path (symlinks and `..` resolved) lies inside
//! `--output-dir`, or inside the render folder it holds when that folder is itself a
//! link. Whatever `--output-dir` names (the pipeline folder or its render folder) and
//! however a script is reached (listed, walked, through a symlinked folder), a path
//! that resolves elsewhere never runs.

use std::path::{Path, PathBuf};

/// GNN's render folder (step 11's output), inside the pipeline folder.
pub const RENDER_DIR: &str = "11_render_output";

/// The folders scripts must resolve into (canonical).
#[derive(Debug, Clone)]
pub struct Bounds {
    roots: Vec<PathBuf>,
}

impl Bounds {
    /// The bounds of the tree at `root` (canonical): `root`, and its render folder
    /// where that resolves elsewhere (a pipeline whose `11_render_output` is a link).
    pub fn of(root: &Path) -> Bounds {
        let mut roots = vec![root.to_path_buf()];
        if let Ok(render) = root.join(RENDER_DIR).canonicalize() {
            if !render.starts_with(root) {
                roots.push(render);
            }
        }
        Bounds { roots }
    }

    /// The tree itself: `--output-dir`, canonical.
    pub fn root(&self) -> &Path {
        &self.roots[0]
    }

    /// Whether a canonical path lies inside the bounds.
    pub fn hold(&self, canonical: &Path) -> bool {
        self.roots.iter().any(|r| canonical.starts_with(r))
    }

    /// `path` resolved (symlinks and `..` followed): `Ok(Ok)` inside the bounds,
    /// `Ok(Err)` with where it leads otherwise; `Err` when it does not resolve.
    pub fn confine(&self, path: &Path) -> std::io::Result<Result<PathBuf, PathBuf>> {
        let real = path.canonicalize()?;
        Ok(if self.hold(&real) {
            Ok(real)
        } else {
            Err(real)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_are_outside_and_a_linked_render_folder_is_inside() {
        let tree = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let root = tree.path().canonicalize().unwrap();
        let render = elsewhere.path().canonicalize().unwrap().join("render");
        std::fs::create_dir_all(render.join("m/jax")).unwrap();
        std::fs::write(render.join("m/jax/s.py"), "").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.join("out")).unwrap();
        let bounds = Bounds::of(&root);
        let outside = root.join("out/render/m/jax/s.py");
        assert_eq!(
            bounds.confine(&outside).unwrap(),
            Err(render.join("m/jax/s.py"))
        );
        std::os::unix::fs::symlink(&render, root.join(RENDER_DIR)).unwrap();
        let bounds = Bounds::of(&root);
        assert_eq!(
            bounds.confine(&outside).unwrap(),
            Ok(render.join("m/jax/s.py"))
        );
        assert!(bounds.confine(&root.join("gone.py")).is_err());
    }
}
