//! Which folders discovery never enters and which files count as JAX scripts.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How much of a file is read to look for `import jax`: imports sit at the top, and a
/// bounded read keeps discovery fast on trees with huge generated files.
const HEAD_BYTES: u64 = 256 * 1024;

/// Folder names that never hold pipeline scripts.
const SKIPPED_DIRS: &[&str] = &[
    "__pycache__",
    "site-packages",
    "dist-packages",
    "node_modules",
    "tests",
    "test",
    "venv",
    "env",
];

/// True for folders discovery must not enter: hidden ones, caches, installed
/// packages and test suites. Decided by name alone, with no system call, because it
/// runs for every folder of trees with hundreds of thousands of entries. (Virtual
/// environments by other names are recognised by their `pyvenv.cfg` as the walk meets
/// it; see [`is_venv_marker`].)
pub fn is_skipped_dir(path: &Path) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    let bytes = name.as_bytes();
    bytes.starts_with(b".") || SKIPPED_DIRS.iter().any(|s| s.as_bytes() == bytes)
}

/// A virtual environment by any name carries this file at its top.
pub fn is_venv_marker(name: &OsStr) -> bool {
    name.as_bytes() == b"pyvenv.cfg"
}

/// True for `*.py` files other than package markers.
pub fn is_python_file(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    bytes.ends_with(b".py") && bytes.len() > 3 && bytes != b"__init__.py"
}

/// True when the file's parent folder is named `jax`.
pub fn in_jax_folder(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n.as_bytes() == b"jax")
}

/// Reads the head of a file and reports whether it imports jax. One 16 KiB read
/// decides for almost every file (imports sit at the top); only a longer file without
/// a jax import there is read further, up to the head limit. Only a regular file is
/// read: a FIFO named `x.py` must not hang discovery.
pub fn file_imports_jax(path: &Path) -> std::io::Result<bool> {
    let mut file = crate::confined::open_followed(path)?;
    let mut head = vec![0u8; 16 * 1024];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    head.truncate(filled);
    if source_imports_jax(&String::from_utf8_lossy(&head)) {
        return Ok(true);
    }
    if filled < 16 * 1024 {
        return Ok(false);
    }
    file.take(HEAD_BYTES - filled as u64)
        .read_to_end(&mut head)?;
    Ok(source_imports_jax(&String::from_utf8_lossy(&head)))
}

/// Whether Python source imports jax: `import jax`, `import jax.numpy as jnp`,
/// `import numpy as np, jax`, `from jax import …`, `from jax.numpy import …`.
pub fn source_imports_jax(source: &str) -> bool {
    source.lines().any(|line| {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("import ") {
            rest.split(',').any(|item| {
                let module = item.split_whitespace().next().unwrap_or("");
                is_jax_module(module)
            })
        } else if let Some(rest) = line.strip_prefix("from ") {
            is_jax_module(rest.split_whitespace().next().unwrap_or(""))
        } else {
            false
        }
    })
}

fn is_jax_module(module: &str) -> bool {
    let module = module.trim_end_matches(';');
    module == "jax" || module.starts_with("jax.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_import_forms() {
        assert!(source_imports_jax("import jax\n"));
        assert!(source_imports_jax("import jax.numpy as jnp"));
        assert!(source_imports_jax("import numpy as np, jax"));
        assert!(source_imports_jax("from jax import lax"));
        assert!(source_imports_jax("from jax.numpy import array"));
        assert!(source_imports_jax(
            "try:\n    import jax\nexcept ImportError:\n    pass"
        ));
    }

    #[test]
    fn ignores_lookalikes() {
        assert!(!source_imports_jax("import jaxtyping"));
        assert!(!source_imports_jax("from jaxlib import xla_client"));
        assert!(!source_imports_jax("# uses jax elsewhere\nimport numpy"));
        assert!(!source_imports_jax("x = 'import jax'"));
        assert!(!source_imports_jax("from pyjax import y"));
    }

    #[test]
    fn skip_rules() {
        assert!(is_skipped_dir(Path::new("/a/.git")));
        assert!(is_skipped_dir(Path::new("/a/__pycache__")));
        assert!(is_skipped_dir(Path::new("/a/tests")));
        assert!(is_venv_marker(OsStr::new("pyvenv.cfg")));
        assert!(!is_skipped_dir(Path::new("/a/jax")));
        assert!(is_python_file(OsStr::new("model.py")));
        assert!(!is_python_file(OsStr::new("__init__.py")));
        assert!(!is_python_file(OsStr::new("notes.pyc")));
        assert!(in_jax_folder(Path::new("/x/jax/m.py")));
        assert!(!in_jax_folder(Path::new("/x/pymdp/m.py")));
    }
}
