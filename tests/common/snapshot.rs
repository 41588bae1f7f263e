//! Committed files the code generates, checked like snapshots: `docs/cli.md` (the
//! binary's help), `schemas/` (the model's JSON Schemas) and the sample scripts in
//! `output/` (the templates rendered). A test fails when one drifts from what the code
//! makes now, showing the difference. One switch accepts every change, these files and
//! insta's snapshots alike (`tests/golden/*.snap`): `INSTA_UPDATE=always cargo test`
//! (with `--features integration` for the golden file). These files keep their own
//! formats (others read them), so they are compared here, not stored by insta.

use std::path::Path;

/// Whether this run rewrites snapshots instead of comparing them: insta's own switch.
pub fn updating() -> bool {
    std::env::var("INSTA_UPDATE").is_ok_and(|v| v == "always")
}

/// Fails when the committed file at `path` (relative to the repository) does not hold
/// `generated`, with a diff; under `INSTA_UPDATE=always` rewrites it instead.
pub fn assert_file(path: &str, generated: &str) {
    let full = super::repo().join(path);
    if updating() {
        write(&full, generated);
        return;
    }
    let committed = std::fs::read_to_string(&full).unwrap_or_default();
    if committed != generated {
        let diff = similar::TextDiff::from_lines(committed.as_str(), generated)
            .unified_diff()
            .context_radius(2)
            .header(
                &format!("{path} (committed)"),
                &format!("{path} (generated)"),
            )
            .to_string();
        panic!(
            "{path} drifted from the code; if the change is meant, accept it with \
             `INSTA_UPDATE=always cargo test`:\n{diff}"
        );
    }
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
