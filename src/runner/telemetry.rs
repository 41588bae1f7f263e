//! The telemetry shim: a `sitecustomize.py` embedded in the binary, written once to
//! the cache folder and put first on the child's `PYTHONPATH`. It reports what jax
//! really used, because `JAX_PLATFORMS=cuda,cpu` falls back to the CPU without a word
//! and scripts can change platforms themselves.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::environment::Environment;
use crate::model::JaxTelemetry;

pub(crate) const SHIM: &str = include_str!("telemetry/sitecustomize.py");

/// Writes the shim into `<cache>/telemetry-shim/<hash>/` (once per shim version) and
/// returns that folder.
pub fn install(cache_dir: &Path) -> std::io::Result<PathBuf> {
    let digest = Sha256::digest(SHIM.as_bytes());
    let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let dir = cache_dir.join("telemetry-shim").join(hash);
    let file = dir.join("sitecustomize.py");
    if std::fs::read_to_string(&file).is_ok_and(|s| s == SHIM) {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".sitecustomize.{}.tmp", std::process::id()));
    std::fs::write(&tmp, SHIM)?;
    std::fs::rename(&tmp, &file)?;
    Ok(dir)
}

/// Compiles the shim once for `python` (into its `__pycache__`), so that no start
/// compiles it: where `PYTHONDONTWRITEBYTECODE` is set, or a script may not write the
/// shim's folder (every sandboxed one), Python would compile its 13 KB again in every
/// cold start (3.6 ms, measured with `-X importtime`). A marker per interpreter and
/// version says it was done; a failure costs only that time.
pub fn compile_for(shim_dir: &Path, python: &Path, version: &str) {
    let key = Sha256::digest(format!("{}\0{version}", python.display()).as_bytes());
    let key: String = key[..6].iter().map(|b| format!("{b:02x}")).collect();
    let marker = shim_dir.join(format!(".compiled-{key}"));
    if marker.exists() {
        return;
    }
    // py_compile writes the file whatever PYTHONDONTWRITEBYTECODE says; `-I` keeps
    // the user's site and environment out of it.
    let compiled = std::process::Command::new(python)
        .args(["-I", "-c", COMPILE])
        .arg(shim_dir.join("sitecustomize.py"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if compiled {
        let _ = std::fs::write(&marker, b"");
    }
}

const COMPILE: &str = "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)";

/// `PYTHONPATH` with the shim folder first and the parent's entries after it.
pub fn python_path(shim_dir: &Path, parent: &Environment) -> OsString {
    let mut paths = vec![shim_dir.to_path_buf()];
    if let Some(existing) = parent.var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&existing).filter(|p| !p.as_os_str().is_empty()));
    }
    std::env::join_paths(paths).unwrap_or_else(|_| shim_dir.as_os_str().to_owned())
}

/// The largest telemetry file read. The shim writes a few hundred bytes (a few KiB
/// with many devices); anything bigger is not the shim's.
pub const MAX_TELEMETRY_BYTES: u64 = 1 << 20;

/// jax's report on an attempt as the runner took it, and what was wrong with the file
/// when it could not be trusted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Telemetry {
    /// The report, when the file was there and whole.
    pub report: Option<JaxTelemetry>,
    /// Why the file was not read, for the script's `problems`
    /// (`telemetry: not a regular file (fifo)`).
    pub problem: Option<String>,
    /// The script's own proportional set size as it exited, bytes (`exit_pss_kb`):
    /// the end of its memory that the runner's paced reads may have left unread
    /// (`pace.rs`). Not part of the record's `jax` object: the runner weighs it into
    /// `peak_memory_mb`.
    pub exit_pss_bytes: Option<u64>,
}

impl From<Option<JaxTelemetry>> for Telemetry {
    fn from(report: Option<JaxTelemetry>) -> Telemetry {
        Telemetry {
            report,
            ..Telemetry::default()
        }
    }
}

/// The shim's report: jax's figures, and beside them the script's memory at its exit.
#[derive(serde::Deserialize)]
struct Report {
    #[serde(flatten)]
    jax: JaxTelemetry,
    exit_pss_kb: Option<u64>,
}

/// Reads and removes an attempt's telemetry file. The script could have replaced it
/// (a FIFO, a link to `/dev/zero`, a huge sparse file): it is read only when it is a
/// regular file of at most [`MAX_TELEMETRY_BYTES`], never followed, never waited on.
/// Absent, with no problem, when the process died before Python's exit handlers ran.
pub fn take(path: &Path) -> Telemetry {
    let read = crate::confined::read_in(path, MAX_TELEMETRY_BYTES);
    // Whatever is there goes (a link itself, not what it points to).
    let _ = std::fs::remove_file(path);
    let problem = |why: String| Telemetry {
        problem: Some(format!("telemetry: {why}")),
        ..Telemetry::default()
    };
    match read {
        Ok(bytes) => match serde_json::from_slice::<Report>(&bytes) {
            Ok(report) => Telemetry {
                report: Some(report.jax),
                problem: None,
                exit_pss_bytes: report.exit_pss_kb.map(|kb| kb.saturating_mul(1024)),
            },
            Err(e) => problem(format!("not the shim's report ({e})")),
        },
        Err(e) if e.is_not_found() => Telemetry::default(),
        Err(e) => problem(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim is compiled once per interpreter, into its `__pycache__`.
    #[test]
    fn the_shim_is_compiled_once_for_an_interpreter() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = install(tmp.path()).unwrap();
        let python = Path::new("python3");
        compile_for(&dir, python, "3");
        let compiled = |d: &Path| {
            std::fs::read_dir(d.join("__pycache__")).map_or(0, |e| {
                e.flatten()
                    .filter(|f| {
                        f.file_name()
                            .to_string_lossy()
                            .starts_with("sitecustomize.")
                    })
                    .count()
            })
        };
        assert_eq!(compiled(&dir), 1, "no compiled shim in {dir:?}");
        // Done once: a second call finds the marker and runs nothing.
        std::fs::remove_dir_all(dir.join("__pycache__")).unwrap();
        compile_for(&dir, python, "3");
        assert_eq!(compiled(&dir), 0);
        compile_for(&dir, python, "3.1");
        assert_eq!(compiled(&dir), 1);
    }

    #[test]
    fn install_is_idempotent_and_python_path_puts_the_shim_first() {
        let tmp = tempfile::tempdir().unwrap();
        let a = install(tmp.path()).unwrap();
        let b = install(tmp.path()).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            std::fs::read_to_string(a.join("sitecustomize.py")).unwrap(),
            SHIM
        );
        let parent = crate::environment::Environment::from_pairs([("PYTHONPATH", "/p")]);
        let pp = python_path(&a, &parent);
        assert!(pp.to_string_lossy().ends_with(":/p"), "{pp:?}");
        assert!(pp.to_string_lossy().starts_with(a.to_str().unwrap()));
    }

    #[test]
    fn take_reads_only_a_small_regular_file_and_says_why_not() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".jax-runner-telemetry.1.json");
        assert_eq!(take(&path), Telemetry::default());
        std::fs::write(&path, r#"{"jax_imported": true, "backend": "cpu"}"#).unwrap();
        let t = take(&path);
        assert_eq!(t.report.unwrap().backend.as_deref(), Some("cpu"));
        assert_eq!(t.exit_pss_bytes, None);
        assert!(!path.exists(), "taken files are removed");
        std::fs::write(&path, r#"{"jax_imported": false, "exit_pss_kb": 2048}"#).unwrap();
        assert_eq!(take(&path).exit_pss_bytes, Some(2 << 20));
        rustix::fs::mkfifoat(rustix::fs::CWD, &path, rustix::fs::Mode::from(0o644)).unwrap();
        let t = take(&path);
        assert_eq!(
            t.problem.as_deref(),
            Some("telemetry: not a regular file (fifo)")
        );
        assert!(!path.exists(), "a FIFO is removed too");
        std::fs::write(&path, "garbage").unwrap();
        let t = take(&path);
        assert!(t
            .problem
            .unwrap()
            .starts_with("telemetry: not the shim's report"));
    }

    /// The shim reads its memory at its exit only past the runner's tick: the two
    /// name the same interval.
    #[test]
    fn the_shims_tick_is_the_samplers() {
        let tick = crate::runner::child::SAMPLE_EVERY.as_secs_f64();
        assert!(
            SHIM.contains(&format!("\n_JR_TICK_S = {tick}\n")),
            "the shim's _JR_TICK_S is not {tick}"
        );
    }

    #[test]
    fn backend_names_map_to_platforms() {
        use crate::model::Platform;
        let mut t = JaxTelemetry::default();
        assert_eq!(t.platform(), None);
        t.backend = Some("cuda".into());
        assert_eq!(t.platform(), Some(Platform::Gpu));
        t.backend = Some("cpu".into());
        assert_eq!(t.platform(), Some(Platform::Cpu));
    }
}
