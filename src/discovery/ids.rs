//! Unique, file-name-safe ids for discovered scripts. Every file the runner writes
//! for a script is named from its id (`<id>_results.json`, `logs/<id>.stdout.log`,
//! `logs/<id>.attempt2.stdout.log`, `data/<id>/`), so an id must fit the file
//! system's 255-byte name limit with those suffixes, and no id may name another's
//! files.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use sha2::{Digest, Sha256};

/// The longest id, in bytes. The longest name derived from an id is the atomic
/// temporary of its results file, `.<id>_results.json.<pid>.<n>.tmp`, 47 bytes more;
/// 160 + 47 stays well under the 255 bytes of `NAME_MAX`.
pub const MAX_ID_BYTES: usize = 160;
/// An id longer than this is cut and given a hash, leaving room for the `_<n>` that
/// tells equal ids apart.
const LONGEST_UNCUT: usize = 150;
/// Bytes kept of a cut id, before `_` and the hash.
const CUT_TO: usize = 136;
/// Hex digits of the hash of the script's path that end a cut id.
const HASH_HEX: usize = 12;

/// Assigns each script an id: its file stem, prefixed with parent folder names only
/// where two scripts share a stem. Inputs are paths relative to the output folder, in
/// discovery order; ids come back in the same order. Ids never end like a retried
/// attempt's log name (`x.attempt2`) and never exceed [`MAX_ID_BYTES`]: a long one is
/// cut and ends in a short hash of the script's path, the same in every run.
pub fn assign_ids(relative_paths: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = relative_paths.iter().map(|p| components(p)).collect();
    let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, p) in parts.iter().enumerate() {
        groups
            .entry(p.last().map(String::as_str).unwrap_or(""))
            .or_default()
            .push(i);
    }
    let mut ids: Vec<String> = parts
        .iter()
        .map(|p| p.last().cloned().unwrap_or_default())
        .collect();
    for members in groups.values().filter(|m| m.len() > 1) {
        for (i, id) in shortest_unique_suffixes(&parts, members) {
            ids[i] = id;
        }
    }
    for (id, path) in ids.iter_mut().zip(relative_paths) {
        *id = fit(std::mem::take(id), path);
    }
    // Sanitising can still make two ids equal ("a b" and "a_b"): number the later ones.
    let mut seen = HashSet::new();
    for id in &mut ids {
        if !seen.insert(id.clone()) {
            let mut n = 2;
            while !seen.insert(format!("{id}_{n}")) {
                n += 1;
            }
            *id = format!("{id}_{n}");
        }
    }
    ids
}

/// For scripts sharing a stem: the fewest trailing components that tell each apart
/// from the rest of its group. Linear in the group per suffix length, so a tree with a
/// thousand `model.py` files stays fast. Members identical even with every folder
/// keep the bare stem (the numbering tells them apart).
fn shortest_unique_suffixes(parts: &[Vec<String>], members: &[usize]) -> Vec<(usize, String)> {
    let mut out = Vec::with_capacity(members.len());
    let mut open: Vec<usize> = members.to_vec();
    let longest = members.iter().map(|&i| parts[i].len()).max().unwrap_or(1);
    for k in 2..=longest {
        let suffix = |i: usize| (parts[i].len() >= k).then(|| &parts[i][parts[i].len() - k..]);
        let mut counts: HashMap<&[String], usize> = HashMap::new();
        for &i in members {
            if let Some(s) = suffix(i) {
                *counts.entry(s).or_default() += 1;
            }
        }
        open.retain(|&i| match suffix(i) {
            Some(s) if counts[s] == 1 => {
                out.push((i, s.join("_")));
                false
            }
            _ => true,
        });
        if open.is_empty() {
            break;
        }
    }
    out
}

/// An id every derived file name can be built from: `x.attempt2` becomes
/// `x_attempt2` (attempt 2 of `x` names its logs `x.attempt2.*`), and an id longer
/// than [`LONGEST_UNCUT`] bytes is cut at a character boundary and ends in a hash of
/// the script's path.
fn fit(id: String, path: &Path) -> String {
    let id = match id.rsplit_once(".attempt") {
        Some((stem, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{stem}_attempt{n}")
        }
        _ => id,
    };
    if id.len() <= LONGEST_UNCUT {
        return id;
    }
    let mut end = CUT_TO;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    let digest = Sha256::digest(path.as_os_str().as_bytes());
    let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}_{}", &id[..end], &hash[..HASH_HEX])
}

/// Sanitised folder names followed by the sanitised file stem.
fn components(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = path
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
        .filter_map(|c| match c {
            Component::Normal(s) => Some(sanitize(&s.to_string_lossy())),
            _ => None,
        })
        .collect();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    out.push(sanitize(&stem));
    out
}

/// Keeps letters and digits (any script), `-`, `_` and `.`; everything else becomes `_`.
pub fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let out = out.trim_start_matches('.').to_string();
    if out.is_empty() {
        "script".into()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(paths: &[&str]) -> Vec<String> {
        let paths: Vec<&Path> = paths.iter().map(Path::new).collect();
        assign_ids(&paths)
    }

    #[test]
    fn unique_stems_stay_bare() {
        assert_eq!(ids(&["a/jax/x.py", "b/jax/y.py"]), vec!["x", "y"]);
    }

    #[test]
    fn shared_stems_get_the_parents_that_tell_them_apart() {
        assert_eq!(
            ids(&["m1/jax/model.py", "m2/jax/model.py", "other.py"]),
            vec!["m1_jax_model", "m2_jax_model", "other"]
        );
        assert_eq!(
            ids(&["a/model.py", "b/model.py"]),
            vec!["a_model", "b_model"]
        );
    }

    #[test]
    fn odd_names_are_made_safe_and_unique() {
        assert_eq!(
            ids(&["jax/my model.py", "jax/my_model.py"]),
            vec!["my_model", "my_model_2"]
        );
        assert_eq!(ids(&["jax/модель.py"]), vec!["модель"]);
        assert_eq!(sanitize("a/b\\c"), "a_b_c");
    }

    #[test]
    fn no_id_names_the_logs_of_another_scripts_retry() {
        // Attempt 2 of `x` writes `logs/x.attempt2.stdout.log`.
        assert_eq!(
            ids(&["jax/x.py", "jax/x.attempt2.py", "jax/x.attempt.py"]),
            vec!["x", "x_attempt2", "x.attempt"]
        );
        assert_eq!(
            ids(&["jax/x_attempt2.py", "jax/x.attempt2.py"]),
            vec!["x_attempt2", "x_attempt2_2"]
        );
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash_and_stay_unique() {
        let a = format!("jax/{}.py", "a".repeat(247));
        let b = format!("other/{}.py", "a".repeat(247));
        let c = format!("jax/{}b.py", "a".repeat(246));
        let utf8 = format!("jax/{}.py", "é".repeat(120));
        let got = ids(&[&a, &b, &c, &utf8]);
        for id in &got {
            assert!(id.len() <= MAX_ID_BYTES, "{} bytes: {id}", id.len());
        }
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(unique.len(), 4, "{got:?}");
        assert_eq!(got, ids(&[&a, &b, &c, &utf8]), "the same every run");
        assert!(got[3].starts_with("éé"), "cut at a character boundary");
        // A short name keeps its id.
        assert_eq!(ids(&["jax/short.py"]), vec!["short"]);
    }
}
