//! What a script's result depends on, part by part (`--resume`'s fingerprint): its
//! source, the files beside it, and the run's environment, each hashed on its own so a
//! rerun can say which input changed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::discovery::Script;

/// How many files beside a script its fingerprint reads: a generated model's folder
/// holds a few (the scripts, a `params.json`, a matrix file); a folder of thousands
/// is not a script's inputs, and the rest are left out (the count says so).
const MAX_BESIDE: usize = 256;
/// The bytes of one file hashed; a larger input stands by its size and change time.
const MAX_HASHED_BYTES: u64 = 64 << 20;

/// What a script's result depends on, part by part: its source, the files beside it
/// in its folder, the interpreter and its jax, the device asked for, and the
/// environment that changes jax's behaviour. Two runs with equal digests run the same
/// program on the same inputs the same way; the parts say which input changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fingerprint {
    /// One hash of every part.
    pub digest: String,
    /// Each part's short hash, by name (`source`, `file:params.json`, `jax`, …).
    pub parts: BTreeMap<String, String>,
}

/// The files beside the tree's scripts, folder by folder, each listed and hashed once:
/// every script of a folder shares them. The tree's scripts are never among them: a
/// script beside another has a record of its own, not the other's input, so editing
/// it reruns it alone.
#[derive(Debug, Default)]
pub struct Beside {
    by_dir: HashMap<PathBuf, Vec<(String, String)>>,
}

impl Beside {
    /// The files beside the scripts `wanted` (their folders alone are read), with
    /// `scripts` (every script of the tree) left out.
    pub fn of<'a>(scripts: &HashSet<&Path>, wanted: impl IntoIterator<Item = &'a Path>) -> Beside {
        let mut by_dir = HashMap::new();
        for script in wanted {
            let dir = script.parent().unwrap_or(Path::new("."));
            if !by_dir.contains_key(dir) {
                let not_a_script = |name: &str| !scripts.contains(dir.join(name).as_path());
                by_dir.insert(dir.to_path_buf(), files_in(dir, &not_a_script));
            }
        }
        Beside { by_dir }
    }

    /// The files beside `script`, by name, with their hashes.
    fn of_script(&self, script: &Path) -> &[(String, String)] {
        let dir = script.parent().unwrap_or(Path::new("."));
        self.by_dir.get(dir).map_or(&[], Vec::as_slice)
    }
}

/// The fingerprint of `script` with `inputs` (the run's environment, by name) and
/// the files `beside` it.
pub fn fingerprint(script: &Script, inputs: &[(&str, String)], beside: &Beside) -> Fingerprint {
    let mut parts = BTreeMap::new();
    parts.insert("source".to_string(), file_digest(&script.path));
    for (name, digest) in beside.of_script(&script.path) {
        parts.insert(format!("file:{name}"), digest.clone());
    }
    for (k, v) in inputs {
        let key = match *k {
            "env" | "override" => format!("{k}:{}", v.split('=').next().unwrap_or(v)),
            k => k.to_string(),
        };
        parts.insert(key, short(v.as_bytes()));
    }
    let mut h = Sha256::new();
    for (k, v) in &parts {
        h.update(k.as_bytes());
        h.update([0u8]);
        h.update(v.as_bytes());
        h.update([0u8]);
    }
    Fingerprint {
        digest: hex(&h.finalize()),
        parts,
    }
}

/// The files in `dir` that `keep` keeps, and their hashes: regular files (links
/// followed only to a regular file), neither hidden nor Python's bytecode, at most
/// [`MAX_BESIDE`], by name.
fn files_in(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && !n.ends_with(".pyc") && keep(n))
        .collect();
    names.sort();
    let files = names
        .into_iter()
        .filter(|n| std::fs::metadata(dir.join(n)).is_ok_and(|m| m.is_file()));
    let mut out: Vec<(String, String)> = Vec::new();
    let mut left_out = 0usize;
    for name in files {
        if out.len() == MAX_BESIDE {
            left_out += 1;
            continue;
        }
        let digest = file_digest(&dir.join(&name));
        out.push((name, digest));
    }
    if left_out > 0 {
        out.push(("(more files)".into(), left_out.to_string()));
    }
    out
}

/// A file's short hash, streamed, and only from a regular file: it could have been
/// swapped for a FIFO or a device since discovery. An unreadable file hashes as
/// such, never equal to its content's hash; a large one stands by size and time.
fn file_digest(path: &Path) -> String {
    let large = std::fs::metadata(path)
        .ok()
        .filter(|m| m.len() > MAX_HASHED_BYTES);
    if let Some(m) = large {
        let mtime = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        let stamp = format!("size {} mtime {:?}", m.len(), mtime);
        return short(stamp.as_bytes());
    }
    let mut h = Sha256::new();
    let hashed = crate::confined::open_followed(path)
        .map_err(|e| e.to_string())
        .and_then(|mut f| std::io::copy(&mut f, &mut h).map_err(|e| e.to_string()));
    match hashed {
        Ok(_) => hex(&h.finalize()[..8]),
        Err(e) => short(format!("unreadable: {e}").as_bytes()),
    }
}

/// A short hash of `bytes`: 16 hex digits, enough to tell inputs apart.
fn short(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes)[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What changed between an earlier result's inputs and `now`, in words
/// (`params.json changed`, `data.npy is new`, `jax changed`); `None` when the earlier
/// result names no inputs (it predates them) or none differs.
pub fn changed_inputs(
    earlier: &std::collections::BTreeMap<String, String>,
    now: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    if earlier.is_empty() {
        return None;
    }
    let name = |k: &str| k.strip_prefix("file:").unwrap_or(k).to_string();
    let mut said: Vec<String> = Vec::new();
    for (k, v) in now {
        match earlier.get(k) {
            Some(old) if old == v => {}
            Some(_) if k == "source" => said.push("the script changed".into()),
            Some(_) => said.push(format!("{} changed", name(k))),
            None => said.push(format!("{} is new", name(k))),
        }
    }
    let gone = earlier.keys().filter(|k| !now.contains_key(*k));
    said.extend(gone.map(|k| format!("{} is gone", name(k))));
    (!said.is_empty()).then(|| said.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(id: &str, size: u64) -> Script {
        Script::for_test(id, size)
    }

    #[test]
    fn fingerprints_change_with_any_input() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = script("x", 1);
        s.path = tmp.path().join("x.py");
        std::fs::write(&s.path, "print(1)\n").unwrap();
        let sibling = tmp.path().join("sibling.py");
        let scripts = HashSet::from([s.path.as_path(), sibling.as_path()]);
        // Read afresh each time: the test changes the folder between calls.
        let jax = |v: &str| {
            let beside = Beside::of(&scripts, [s.path.as_path()]);
            fingerprint(&s, &[("jax", v.into())], &beside)
        };
        let base = jax("0.10.2");
        assert_eq!(base, jax("0.10.2"));
        assert_ne!(base.digest, jax("0.10.3").digest);
        let said = changed_inputs(&base.parts, &jax("0.10.3").parts);
        assert_eq!(said.as_deref(), Some("jax changed"));
        std::fs::write(&s.path, "print(2)\n").unwrap();
        let edited = jax("0.10.2");
        assert_ne!(base.digest, edited.digest);
        let said = changed_inputs(&base.parts, &edited.parts);
        assert_eq!(said.as_deref(), Some("the script changed"));
        // A file beside the script is an input: new, changed, gone.
        std::fs::write(tmp.path().join("params.json"), "{\"a\": 1}").unwrap();
        let with = jax("0.10.2");
        let said = changed_inputs(&edited.parts, &with.parts);
        assert_eq!(said.as_deref(), Some("params.json is new"));
        std::fs::write(tmp.path().join("params.json"), "{\"a\": 2}").unwrap();
        let changed = jax("0.10.2");
        assert_ne!(with.digest, changed.digest);
        let said = changed_inputs(&with.parts, &changed.parts);
        assert_eq!(said.as_deref(), Some("params.json changed"));
        std::fs::remove_file(tmp.path().join("params.json")).unwrap();
        let said = changed_inputs(&changed.parts, &jax("0.10.2").parts);
        assert_eq!(said.as_deref(), Some("params.json is gone"));
        // Hidden files, bytecode and the other scripts of the folder are not inputs.
        std::fs::write(&sibling, "print(3)\n").unwrap();
        std::fs::write(tmp.path().join(".DS_Store"), "x").unwrap();
        std::fs::write(tmp.path().join("x.cpython-311.pyc"), "x").unwrap();
        assert_eq!(jax("0.10.2"), edited);
    }
}
