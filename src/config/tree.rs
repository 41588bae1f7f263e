//! Where a run's folders are: the output tree (checked), the pipeline around it
//! (GNN's render folder or a plain tree), and the results folder (created).

use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// Checks that the output folder exists, is a directory and can be listed; returns
/// it canonical. A folder that cannot be read is a bad input (exit 2), not an empty
/// tree (exit 3).
pub fn validate_output_dir(path: &Path) -> Result<PathBuf, ConfigError> {
    let unreadable = |source| ConfigError::OutputDirUnreadable {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ConfigError::OutputDirMissing {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(unreadable(source)),
        Ok(m) if !m.is_dir() => Err(ConfigError::OutputDirNotADirectory {
            path: path.to_path_buf(),
        }),
        Ok(_) => {
            std::fs::read_dir(path).map_err(unreadable)?;
            path.canonicalize().map_err(unreadable)
        }
    }
}

/// Where a pipeline tree's outputs go. `--output-dir` is either the pipeline's output
/// folder (holding `11_render_output/`) or, as GNN's own step 12 is pointed, the
/// render folder itself; either way the runner's outputs go beside the render folder,
/// never inside it, so both commands write the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineTree {
    /// The folder the outputs go in.
    pub root: PathBuf,
    /// Whether the tree is a GNN pipeline output (it has a render folder).
    pub is_gnn: bool,
}

impl PipelineTree {
    /// The tree around `output_dir` (canonical).
    pub fn of(output_dir: &Path) -> PipelineTree {
        use crate::discovery::manifest::{MANIFEST_NAME, RENDER_DIR};
        let is_render_folder = output_dir.join(MANIFEST_NAME).is_file()
            || output_dir.file_name().is_some_and(|n| n == RENDER_DIR);
        match output_dir.parent() {
            Some(parent) if is_render_folder => PipelineTree {
                root: parent.to_path_buf(),
                is_gnn: true,
            },
            _ => PipelineTree {
                root: output_dir.to_path_buf(),
                is_gnn: output_dir.join(RENDER_DIR).is_dir(),
            },
        }
    }

    /// `<root>/execution_results/jax`.
    pub fn default_results_dir(&self) -> PathBuf {
        self.root.join("execution_results").join("jax")
    }

    /// `<root>/12_execute_output`.
    pub fn step12_dir(&self) -> PathBuf {
        self.root.join(crate::discovery::manifest::STEP12_DIR)
    }
}

/// Makes a path absolute against the current directory without touching the filesystem.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `--results-dir`, or the tree's default: created, and canonical.
pub(super) fn results_dir(
    given: Option<&Path>,
    tree: &PipelineTree,
) -> Result<(PathBuf, Vec<PathBuf>), ConfigError> {
    let dir = given.map_or_else(|| tree.default_results_dir(), absolute);
    let failed = |source| ConfigError::ResultsDir {
        path: dir.clone(),
        source,
    };
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let created = missing
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .collect();
    Ok((dir.canonicalize().map_err(failed)?, created))
}
