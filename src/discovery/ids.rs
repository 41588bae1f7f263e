//! Unique, file-name-safe ids for discovered scripts.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path};

/// Assigns each script an id: its file stem, prefixed with parent folder names only
/// where two scripts share a stem. Inputs are paths relative to the output folder, in
/// discovery order; ids come back in the same order.
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
}
