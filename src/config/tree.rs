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

/// The folders between the tree's root and the leaf of a results path that the
/// runner makes there itself (GNN's step-12 folder; without `--results-dir`,
/// `execution_results` and `execution_results/jax`): outermost first.
fn runner_folders(given: Option<&Path>, tree: &PipelineTree) -> Vec<(PathBuf, ResultsFolder)> {
    let mut folders = Vec::new();
    if given.is_none() {
        let results = tree.default_results_dir();
        folders.extend(
            results
                .parent()
                .map(|p| (p.to_path_buf(), ResultsFolder::Results)),
        );
        folders.push((results, ResultsFolder::Results));
    }
    folders.push((tree.step12_dir(), ResultsFolder::Step12));
    folders
}

/// Which of the run's folders a link was found on; it says what to do about it.
#[derive(Debug, Clone, Copy)]
enum ResultsFolder {
    Results,
    Step12,
}

impl ResultsFolder {
    fn refuse(self, link: &Path) -> ConfigError {
        let (what, fix) = match self {
            ResultsFolder::Results => (
                "results folder",
                "Remove the link, or name the folder with --results-dir if you mean it",
            ),
            ResultsFolder::Step12 => (
                "GNN step-12 folder",
                "Remove the link: jax-runner makes this folder itself",
            ),
        };
        ConfigError::ResultsLink {
            what,
            link: link.to_path_buf(),
            target: std::fs::read_link(link).unwrap_or_default(),
            fix,
        }
    }
}

/// Refuses a symlink at any folder of the results path below `--output-dir` (see
/// [`runner_folders`]): the tree may be another user's, and a link there would send
/// the runner's reports, and the scripts' data folders, wherever it points. Checked
/// before anything is written. A `--results-dir` the user names is taken as given;
/// below it, as below these folders, the runner makes its own folders without
/// following links as it goes (`crate::confined`).
pub(super) fn refuse_links(given: Option<&Path>, tree: &PipelineTree) -> Result<(), ConfigError> {
    for (folder, which) in runner_folders(given, tree) {
        // Outermost first: a link found stops the check before a path through it.
        if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(which.refuse(&folder));
        }
    }
    Ok(())
}

/// `--results-dir`, or the tree's default: created, and canonical. The default is
/// made one folder at a time below the tree's root, none through a link (a link
/// planted since [`refuse_links`] looked is refused all the same).
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
    match given {
        // As the user named it: a link there is followed, as they asked.
        Some(_) => std::fs::create_dir_all(&dir).map_err(failed)?,
        None => {
            let rel = dir.strip_prefix(&tree.root).unwrap_or(&dir);
            match crate::confined::make_dirs(&tree.root, rel, crate::confined::Planted::Refuse) {
                Ok(_) => {}
                Err(crate::confined::Refused::Symlink(link)) => {
                    return Err(ResultsFolder::Results.refuse(&link))
                }
                Err(refused) => return Err(failed(refused.into())),
            }
        }
    }
    let created = missing
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .collect();
    Ok((dir.canonicalize().map_err(failed)?, created))
}
