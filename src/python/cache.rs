//! Remembers what the probe said about an interpreter, so a run does not pay ~1 s of
//! `python -c probe` (which imports jax) to learn what it learnt last time. An entry
//! holds only while nothing it depends on changed: the executable, every folder on the
//! interpreter's `sys.path` and its user site (installing or removing a package changes
//! the folder's modification time), and the variables that move `sys.path`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::PythonInfo;

/// Variables that change what an interpreter imports.
const ENV: &[&str] = &[
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONSAFEPATH",
    "HOME",
];

/// One cached probe.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Entry {
    /// What the entry was made from; it holds while every piece still reads the same.
    witness: Witness,
    info: PythonInfo,
}

/// The state an entry depends on.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Witness {
    /// The interpreter as given.
    path: PathBuf,
    /// Its resolved executable: (path, size, modification time in ns, inode).
    executable: Option<(PathBuf, u64, i128, u64)>,
    /// Each `sys.path` entry and the user site with its modification time (ns), or
    /// `None` while it does not exist.
    folders: Vec<(PathBuf, Option<i128>)>,
    /// The variables of [`ENV`], as they were.
    env: Vec<(String, Option<String>)>,
}

fn mtime(path: &Path) -> Option<i128> {
    let m = std::fs::metadata(path).ok()?;
    Some(m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128)
}

impl Witness {
    fn now(path: &Path, folders: &[PathBuf]) -> Witness {
        let executable = path.canonicalize().ok().and_then(|real| {
            let m = std::fs::metadata(&real).ok()?;
            let t = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
            Some((real, m.size(), t, m.ino()))
        });
        Witness {
            path: path.to_path_buf(),
            executable,
            folders: folders.iter().map(|f| (f.clone(), mtime(f))).collect(),
            env: ENV
                .iter()
                .map(|k| {
                    // The process's own: the probe's child inherits exactly these.
                    let v = std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
                    (k.to_string(), v)
                })
                .collect(),
        }
    }
}

/// The entry's file: one per interpreter path.
fn file_for(dir: &Path, path: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    // v2: the probe's answer holds `sys_path` and `user_site`, which the sandbox's
    // grants read; an entry from before would grant less.
    dir.join(format!("probe-v2-{:016x}.json", h.finish()))
}

/// The cached probe of `path`, when nothing it depends on changed.
pub fn lookup(dir: &Path, path: &Path) -> Option<PythonInfo> {
    let text = std::fs::read_to_string(file_for(dir, path)).ok()?;
    let entry: Entry = serde_json::from_str(&text).ok()?;
    let folders: Vec<PathBuf> = entry
        .witness
        .folders
        .iter()
        .map(|(f, _)| f.clone())
        .collect();
    (Witness::now(path, &folders) == entry.witness).then_some(entry.info)
}

/// Remembers a fresh probe of `path`; `folders` are the interpreter's `sys.path` and
/// user site. Best effort: a cache that cannot be written only costs the next probe.
pub fn store(dir: &Path, path: &Path, info: &PythonInfo, folders: &[PathBuf]) {
    let entry = Entry {
        witness: Witness::now(path, folders),
        info: info.clone(),
    };
    let Ok(text) = serde_json::to_vec(&entry) else {
        return;
    };
    let file = file_for(dir, path);
    let tmp = file.with_extension(format!("{}.tmp", std::process::id()));
    let _ = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, &file));
    let _ = std::fs::remove_file(&tmp);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> PythonInfo {
        serde_json::from_value(serde_json::json!({
            "executable": "/x/python", "prefix": "/x", "base_prefix": "/x",
            "python_version": "3.11.0", "jax_version": "0.4.30", "jaxlib_version": null,
            "jax_importable": true, "import_error": null,
        }))
        .unwrap()
    }

    #[test]
    fn an_entry_holds_until_a_folder_on_sys_path_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let site = tmp.path().join("site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let python = tmp.path().join("python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        assert_eq!(lookup(&cache, &python), None, "nothing cached yet");
        store(
            &cache,
            &python,
            &info(),
            &[site.clone(), tmp.path().join("user")],
        );
        assert_eq!(lookup(&cache, &python), Some(info()));
        // A package installed: the folder's modification time moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(site.join("newpkg-1.0.dist-info")).unwrap();
        assert_eq!(lookup(&cache, &python), None, "the install invalidates it");
        store(
            &cache,
            &python,
            &info(),
            &[site.clone(), tmp.path().join("user")],
        );
        // A user site that appears later (pip install --user) invalidates it too.
        std::fs::create_dir(tmp.path().join("user")).unwrap();
        assert_eq!(lookup(&cache, &python), None);
    }

    #[test]
    fn a_changed_executable_invalidates_its_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let python = tmp.path().join("python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        store(tmp.path(), &python, &info(), &[]);
        assert!(lookup(tmp.path(), &python).is_some());
        std::fs::write(&python, "#!/bin/sh\n# upgraded\n").unwrap();
        assert_eq!(lookup(tmp.path(), &python), None);
    }
}
