//! The packages a job is made of, each a zip named by its content: the script's folder
//! (its `working_dir`) and jax-runner's own (`py_modules`): the wrapper entrypoint
//! and the telemetry shim, the same for every job of a jax-runner version.

use std::io::Write;
use std::path::Path;

use crate::error::RayError;

/// Largest script folder sent to the cluster.
const MAX_PACKAGE: u64 = 100 * 1024 * 1024;

/// The wrapper entrypoint, run as `python -m jax_runner_ray_job`.
pub const WRAPPER: &str = include_str!("../ray_job.py");
/// The wrapper's module name.
pub const WRAPPER_MODULE: &str = "jax_runner_ray_job";
/// The wrapper's folders on the node (made, marked, removed), a module beside it.
const FOLDERS: &str = include_str!("../ray_job_folders.py");
/// The wrapper's view of the script's processes (memory, devices, stacks, the guard).
const PROCS: &str = include_str!("../ray_job_procs.py");

/// Zips `dir` with its files at the archive's root (Ray's `working_dir` layout).
pub fn package(dir: &Path) -> Result<Vec<u8>, RayError> {
    let fail = |message: String| RayError::Package {
        path: dir.to_path_buf(),
        message,
    };
    // Sorted by name folder by folder, which is the order of the paths sorted whole:
    // the same folder always makes the same archive.
    let walk = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !is_left_out(e.file_name()));
    let mut files = Vec::new();
    for entry in walk {
        let entry = entry.map_err(|e| fail(e.to_string()))?;
        // Links are not followed, and neither sent: only what the folder holds.
        if entry.file_type().is_file() {
            files.push(entry.into_path());
        }
    }
    let mut total = 0u64;
    let mut entries = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(dir)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        // Regular files only, and never more than the room left: a FIFO or a huge
        // sparse file left in the folder must neither block nor fill memory.
        let too_big = || fail(format!("the folder is over {} MiB", MAX_PACKAGE >> 20));
        let room = MAX_PACKAGE - total;
        let bytes = crate::confined::open_in(&f)
            .and_then(|file| file.read_to_end(room))
            .map_err(|e| match e {
                crate::confined::Refused::TooLarge { .. } => too_big(),
                other => fail(format!("{}: {other}", f.display())),
            })?;
        total += bytes.len() as u64;
        entries.push((rel, bytes));
    }
    zip_entries(&entries).map_err(|e| fail(e.to_string()))
}

/// Bytecode caches and hidden files stay behind.
fn is_left_out(name: &std::ffi::OsStr) -> bool {
    name == "__pycache__" || name.to_string_lossy().starts_with('.')
}

/// jax-runner's own package: the wrapper and its two modules at the root (Ray
/// puts the root on `PYTHONPATH`), the shim in a folder of its own that only the
/// script's interpreter gets on its path.
pub fn wrapper_package() -> Vec<u8> {
    let entries = vec![
        (format!("{WRAPPER_MODULE}.py"), WRAPPER.as_bytes().to_vec()),
        (
            "jax_runner_ray_folders.py".to_string(),
            FOLDERS.as_bytes().to_vec(),
        ),
        (
            "jax_runner_ray_procs.py".to_string(),
            PROCS.as_bytes().to_vec(),
        ),
        (
            "jax_runner_shim/sitecustomize.py".to_string(),
            super::super::telemetry::SHIM.as_bytes().to_vec(),
        ),
    ];
    zip_entries(&entries).expect("an in-memory zip is written")
}

/// A zip of `entries` with fixed timestamps: the same files always make the same
/// package name.
fn zip_entries(entries: &[(String, Vec<u8>)]) -> zip::result::ZipResult<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(zip::DateTime::default());
    for (name, bytes) in entries {
        zip.start_file(name.as_str(), opts)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_put_files_at_the_root_and_are_reproducible() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("model.py"), "print(1)\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("data")).unwrap();
        std::fs::write(tmp.path().join("data/a.json"), "{}").unwrap();
        std::fs::create_dir_all(tmp.path().join("__pycache__")).unwrap();
        std::fs::write(tmp.path().join("__pycache__/x.pyc"), "x").unwrap();
        let a = package(tmp.path()).unwrap();
        assert_eq!(
            a,
            package(tmp.path()).unwrap(),
            "same folder, same bytes, same name"
        );
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(a)).unwrap();
        let mut names: Vec<String> = (0..z.len())
            .map(|i| z.by_index(i).unwrap().name().to_string())
            .collect();
        names.sort();
        assert_eq!(names, vec!["data/a.json", "model.py"]);
    }

    #[test]
    fn the_wrapper_package_holds_the_entrypoint_and_the_shim_apart() {
        let a = wrapper_package();
        assert_eq!(a, wrapper_package());
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(a)).unwrap();
        let mut names: Vec<String> = (0..z.len())
            .map(|i| z.by_index(i).unwrap().name().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                "jax_runner_ray_folders.py",
                "jax_runner_ray_job.py",
                "jax_runner_ray_procs.py",
                "jax_runner_shim/sitecustomize.py"
            ]
        );
    }
}
