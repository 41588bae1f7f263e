//! The sandboxed runs' default compilation cache: one folder per tree, so what a
//! script of one tree writes there never reaches the scripts of another. Folders of
//! trees no run has used for a while are forgotten.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// A tree's cache is forgotten once no run has used it for this long.
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// The cache folder of the tree `output_dir` under `root`: named by a hash of the
/// tree's path, which runs of the same tree share.
pub fn tree_cache(root: &Path, output_dir: &Path) -> PathBuf {
    let canonical = output_dir
        .canonicalize()
        .unwrap_or_else(|_| output_dir.to_path_buf());
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    root.join(format!("tree-{name}"))
}

/// Marks `used` as used now and removes its siblings that no run used for
/// [`UNUSED_FOR`]. Best effort: a cache is only ever a cache.
pub fn forget_unused(used: &Path) {
    let now = SystemTime::now();
    let _ = std::fs::File::open(used).and_then(|f| f.set_modified(now));
    let Some(root) = used.parent() else { return };
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        let stale = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() > UNUSED_FOR);
        let ours = name.to_string_lossy().starts_with("tree-");
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if ours && is_dir && stale && path != used {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tree_has_its_own_folder_and_the_same_tree_keeps_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let root = tmp.path().join("cache");
        assert_ne!(tree_cache(&root, &a), tree_cache(&root, &b));
        assert_eq!(tree_cache(&root, &a), tree_cache(&root, &a.join(".")));
        assert!(tree_cache(&root, &a).starts_with(&root));
    }

    #[test]
    fn caches_unused_for_a_month_are_forgotten_and_others_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let [used, recent, old, other] =
            ["tree-used", "tree-recent", "tree-old", "not-a-tree"].map(|n| tmp.path().join(n));
        for d in [&used, &recent, &old, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let long_ago = SystemTime::now() - UNUSED_FOR - Duration::from_secs(60);
        for d in [&old, &other] {
            std::fs::File::open(d)
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }
        forget_unused(&used);
        assert!(used.exists() && recent.exists() && other.exists());
        assert!(!old.exists());
    }
}
