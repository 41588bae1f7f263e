//! Unique, file-name-safe ids for discovered scripts.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path};

/// Assigns each script an id: its file stem, prefixed with parent folder names only
/// where two scripts share a stem. Inputs are paths relative to the output folder, in
/// discovery order; ids come back in the same order.
pub fn assign_ids(relative_paths: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = relative_paths.iter().map(|p| components(p)).collect();
    let mut stem_count: HashMap<&str, usize> = HashMap::new();
    for p in &parts {
        *stem_count
            .entry(p.last().map(String::as_str).unwrap_or(""))
            .or_default() += 1;
    }
    let mut ids: Vec<String> = parts
        .iter()
        .map(|p| {
            let stem = p.last().map(String::as_str).unwrap_or("");
            if stem_count[stem] == 1 {
                return stem.to_string();
            }
            let group: Vec<&Vec<String>> = parts
                .iter()
                .filter(|q| q.last().map(String::as_str) == Some(stem))
                .collect();
            shortest_unique_suffix(p, &group)
        })
        .collect();
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

/// The fewest trailing components that tell `p` apart from the rest of its group.
fn shortest_unique_suffix(p: &[String], group: &[&Vec<String>]) -> String {
    for k in 2..=p.len() {
        let mine = &p[p.len() - k..];
        let clash = group
            .iter()
            .filter(|q| q.len() >= k && &q[q.len() - k..] == mine)
            .count();
        if clash == 1 {
            return mine.join("_");
        }
    }
    // Identical even with every folder: the numbering below tells them apart.
    p.last().cloned().unwrap_or_default()
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
