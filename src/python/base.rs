//! Which interpreter the managed environment is made from. The first `python3` on
//! PATH sets the Python version; among the CPythons of that version on PATH the
//! fastest build is taken, measured once at setup on a pure-Python loop.
//!
//! Builds of one version differ by a quarter and more: a CPython configured with
//! `--enable-shared` and without `--enable-optimizations` (pyenv's default) calls
//! its own functions through the dynamic linker and has no profile-guided layout,
//! where a distribution's is profile-guided and linked in one piece. jax's tracing
//! and lowering are Python, and they are most of a warm script's time: on the
//! development machine, 8 generated scripts on a filled cache took 2.05–2.28 s from
//! Debian's `/usr/bin/python3.11` against 2.95–3.32 s from pyenv's 3.11.7 (3 rounds
//! in turn); three of them, run by each, wrote the same simulation values.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

/// Run with `-I -S -c`: what the interpreter is, whether `-m venv` can work with it
/// (Debian ships `ensurepip` apart, in `python3.X-venv`), and the best of 5 runs of a
/// loop of integer arithmetic, string formatting and dict stores, timed inside the
/// interpreter so its start does not count.
const PROBE: &str = r#"
import json, os, sys, time
def loop():
    t = time.perf_counter()
    d, s = {}, 0
    for i in range(40000):
        s += i * i % 7
        d[str(i)] = (i, s)
    return time.perf_counter() - t
try:
    import ensurepip, venv
    can_venv = True
except ImportError:
    can_venv = False
print(json.dumps({"implementation": sys.implementation.name,
                  "version": "%d.%d" % sys.version_info[:2],
                  "executable": os.path.realpath(sys.executable),
                  "venv": can_venv, "loop_s": min(loop() for _ in range(5))}))
"#;

/// A faster build must take at most this share of the first one's loop time to be
/// taken instead: a closer one is within what the measurement itself varies.
const FASTER_BY: f64 = 0.9;

/// One interpreter on PATH, as its probe saw it.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Probed {
    /// `sys.implementation.name`: jaxlib's wheels are CPython's.
    pub implementation: String,
    /// `major.minor`.
    pub version: String,
    /// The interpreter that really runs (a pyenv shim names another).
    pub executable: PathBuf,
    /// Whether `ensurepip` and `venv` import.
    pub venv: bool,
    /// The loop's best time, seconds.
    pub loop_s: f64,
}

/// The interpreters to make the managed environment from, best first: the fastest
/// CPython of the first `python3`'s version on PATH when it is clearly faster, then
/// that first `python3` itself (tried when the first choice cannot make the
/// environment). Empty when PATH has no `python3`.
pub fn bases(path_var: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let Some(first) = crate::paths::find_on_path("python3", path_var) else {
        return Vec::new();
    };
    let mut bases = Vec::new();
    if let Some(first_probe) = probe(&first) {
        // Only names that can be of its version: `python3` and `python3.N`.
        let names = [
            "python3".to_string(),
            format!("python{}", first_probe.version),
        ];
        let found: Vec<Probed> = candidates(path_var, &names)
            .iter()
            .filter(|p| **p != first)
            .filter_map(|p| probe(p))
            .collect();
        if let Some(fast) = pick(&first_probe, &found) {
            tracing::info!(
                "setup: base interpreter {} (Python {}): a pure-Python loop took {:.1} ms in it against {:.1} ms in {}",
                fast.executable.display(),
                fast.version,
                fast.loop_s * 1e3,
                first_probe.loop_s * 1e3,
                first.display()
            );
            bases.push(fast.executable.clone());
        }
    }
    bases.push(first);
    bases
}

/// The candidate to take over `first`: a CPython of its version that can make a
/// virtual environment and whose loop took at most [`FASTER_BY`] of its time, the
/// fastest such; `None` when `first` stays.
pub(super) fn pick<'a>(first: &Probed, found: &'a [Probed]) -> Option<&'a Probed> {
    found
        .iter()
        .filter(|p| p.implementation == "cpython" && p.venv)
        .filter(|p| p.version == first.version && p.executable != first.executable)
        .filter(|p| p.loop_s <= first.loop_s * FASTER_BY)
        .min_by(|a, b| a.loop_s.total_cmp(&b.loop_s))
}

/// The files named one of `names` in PATH's absolute folders, in PATH order.
fn candidates(path_var: Option<&std::ffi::OsStr>, names: &[String]) -> Vec<PathBuf> {
    let dirs = path_var.map(std::env::split_paths).into_iter().flatten();
    dirs.filter(|d| d.is_absolute())
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .filter(|p| p.is_file())
        .collect()
}

/// What `python` says of itself, `None` when it does not answer within
/// [`PROBE_LIMIT`] (a pyenv shim for a version not selected exits non-zero; a broken
/// interpreter may hang).
fn probe(python: &Path) -> Option<Probed> {
    let mut cmd = Command::new(python);
    cmd.args(["-I", "-S", "-c", PROBE]);
    let answer = super::capture(cmd, PROBE_LIMIT).ok();
    let parsed = answer
        .as_ref()
        .and_then(|(_, stdout, _)| serde_json::from_str(stdout.lines().last()?).ok());
    if parsed.is_none() {
        let status = answer.map_or_else(|| "did not start".into(), |(s, _, _)| s);
        tracing::debug!(
            "setup: {} does not answer the probe ({status})",
            python.display()
        );
    }
    parsed
}

/// How long a candidate may take to answer: its start and 5 loops of about 20 ms.
const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn probed(path: &str, version: &str, loop_s: f64) -> Probed {
        Probed {
            implementation: "cpython".into(),
            version: version.into(),
            executable: PathBuf::from(path),
            venv: true,
            loop_s,
        }
    }

    #[test]
    fn a_clearly_faster_build_of_the_same_version_is_taken() {
        let first = probed("/pyenv/3.11.7/bin/python3.11", "3.11", 0.030);
        let found = [
            first.clone(),
            probed("/usr/bin/python3.11", "3.11", 0.022),
            probed("/opt/other/python3.11", "3.11", 0.025),
        ];
        assert_eq!(
            pick(&first, &found).unwrap().executable,
            Path::new("/usr/bin/python3.11")
        );
    }

    #[test]
    fn the_first_stays_unless_another_is_faster_by_a_tenth() {
        let first = probed("/a/python3", "3.11", 0.030);
        // 0.9 of its time is the boundary: taken at it, not above it.
        assert!(pick(&first, &[probed("/b/python3", "3.11", 0.027)]).is_some());
        assert!(pick(&first, &[probed("/b/python3", "3.11", 0.0271)]).is_none());
        assert!(pick(&first, std::slice::from_ref(&first)).is_none());
    }

    #[test]
    fn only_a_cpython_of_the_same_version_that_can_make_a_venv_is_taken() {
        let first = probed("/a/python3", "3.11", 0.030);
        let other_version = probed("/b/python3.12", "3.12", 0.010);
        let mut pypy = probed("/c/python3", "3.11", 0.001);
        pypy.implementation = "pypy".into();
        let mut no_venv = probed("/usr/bin/python3.11", "3.11", 0.010);
        no_venv.venv = false;
        assert!(pick(&first, &[other_version, pypy, no_venv]).is_none());
    }
}
