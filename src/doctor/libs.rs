//! cuDNN and cuBLAS libraries on `LD_LIBRARY_PATH`: a folder listed there wins over
//! the CUDA wheels, which is how an older cuDNN gets loaded and jax fails with
//! `Loaded runtime CuDNN library: X but source was compiled with: Y`.

use std::ffi::OsStr;
use std::path::Path;

use crate::model::doctor::LibraryDir;

/// The version in a name like `libcudnn.so.9.1.0` for library `libcudnn`.
fn version_of(file: &str, lib: &str) -> Option<String> {
    let rest = file.strip_prefix(lib)?.strip_prefix(".so.")?;
    (!rest.is_empty()
        && rest
            .split('.')
            .all(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty()))
    .then(|| rest.to_string())
}

fn versions(dir: &Path, lib: &str) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| version_of(&e.file_name().to_string_lossy(), lib))
        .collect();
    found.sort_by(|a, b| super::version_cmp(b, a));
    found.dedup();
    found
}

/// Every `LD_LIBRARY_PATH` folder that holds cuDNN or cuBLAS, in search order.
pub fn scan_ld_library_path(value: Option<&OsStr>) -> Vec<LibraryDir> {
    let Some(value) = value else {
        return Vec::new();
    };
    std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| LibraryDir {
            cudnn: versions(&p, "libcudnn"),
            cublas: versions(&p, "libcublas"),
            path: p.display().to_string(),
        })
        .filter(|d| !d.cudnn.is_empty() || !d.cublas.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_file_names() {
        assert_eq!(
            version_of("libcudnn.so.9.1.0", "libcudnn").as_deref(),
            Some("9.1.0")
        );
        assert_eq!(
            version_of("libcudnn.so.9", "libcudnn").as_deref(),
            Some("9")
        );
        assert_eq!(version_of("libcudnn.so", "libcudnn"), None);
        assert_eq!(version_of("libcudnn_ops.so.9.1.0", "libcudnn"), None);
        assert_eq!(version_of("libcublasLt.so.12", "libcublas"), None);
    }

    #[test]
    fn finds_libraries_in_search_order() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        let empty = tmp.path().join("empty");
        for d in [&a, &b, &empty] {
            std::fs::create_dir_all(d).unwrap();
        }
        for f in ["libcudnn.so.9", "libcudnn.so.9.1.0"] {
            std::fs::write(a.join(f), "").unwrap();
        }
        std::fs::write(b.join("libcublas.so.12.4.5.8"), "").unwrap();
        let joined = std::env::join_paths([&empty, &a, &b]).unwrap();
        let dirs = scan_ld_library_path(Some(&joined));
        assert_eq!(dirs.len(), 2);
        assert_eq!(dirs[0].cudnn, vec!["9.1.0", "9"]);
        assert_eq!(dirs[1].cublas, vec!["12.4.5.8"]);
    }
}
