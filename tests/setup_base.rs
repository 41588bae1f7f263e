//! `jax-runner setup`'s base interpreter: the fastest build on PATH of the first
//! `python3`'s version, by a tenth at least, else that first `python3`; and the first
//! again when the faster one cannot make the environment. The interpreters here are
//! shell scripts that answer the probe with what a test gives them and record every
//! `-m venv` asked of them (then fail it, so nothing is installed).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A temporary PATH of folders of fake interpreters, and the record of every
/// `-m venv` asked of them.
struct Fakes {
    tmp: tempfile::TempDir,
}

impl Fakes {
    fn new() -> Fakes {
        Fakes {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn record(&self) -> PathBuf {
        self.tmp.path().join("record")
    }

    /// A fake interpreter at `dir/name`: its probe answer says `version` and
    /// `loop_s`, and it names itself as the executable; `-m venv` appends its path to
    /// the record and fails.
    fn fake(&self, dir: &str, name: &str, version: &str, loop_s: f64) -> String {
        let path = self.dir(dir).join(name);
        let body = format!(
            "#!/bin/sh\n\
             case \"$*\" in\n\
             *\"-m venv\"*) echo '{path}' >> '{record}'; exit 1;;\n\
             *-c*) echo '{{\"implementation\": \"cpython\", \"version\": \"{version}\", \
             \"executable\": \"{path}\", \"venv\": true, \"loop_s\": {loop_s}}}';;\n\
             esac\n",
            path = path.display(),
            record = self.record().display(),
        );
        write_executable(&path, &body);
        path.display().to_string()
    }

    /// Runs `jax-runner setup` with PATH the folders `dirs` and an empty cache;
    /// returns the interpreters asked to make the environment, in order.
    fn tried(&self, dirs: &[&str]) -> Vec<String> {
        let path = std::env::join_paths(dirs.iter().map(|d| self.dir(d))).unwrap();
        let out = assert_cmd::Command::cargo_bin("jax-runner")
            .unwrap()
            .args(["setup", "--flavor", "cpu"])
            .env("PATH", path)
            .env("JAX_RUNNER_CACHE_DIR", self.tmp.path().join("cache"))
            .env_remove("VIRTUAL_ENV")
            .env_remove("JAX_RUNNER_PYTHON")
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "the fakes cannot make an environment"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("failed to create the virtual environment"),
            "{stderr}"
        );
        let record = std::fs::read_to_string(self.record()).unwrap_or_default();
        record.lines().map(String::from).collect()
    }
}

fn write_executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_build_faster_by_a_tenth_makes_the_environment_and_the_first_python3_is_next() {
    let p = Fakes::new();
    let first = p.fake("a", "python3", "3.11", 0.030);
    let fast = p.fake("b", "python3.11", "3.11", 0.027);
    assert_eq!(p.tried(&["a", "b"]), [fast, first]);
}

#[test]
fn the_first_python3_stays_against_a_build_less_than_a_tenth_faster() {
    let p = Fakes::new();
    let first = p.fake("a", "python3", "3.11", 0.030);
    p.fake("b", "python3.11", "3.11", 0.0272);
    assert_eq!(p.tried(&["a", "b"]), [first]);
}

#[test]
fn a_faster_interpreter_of_another_version_is_never_taken() {
    let p = Fakes::new();
    let first = p.fake("a", "python3", "3.11", 0.030);
    // A `python3` later on PATH that is another version, and a `python3.12`, which
    // is not even asked.
    p.fake("b", "python3", "3.12", 0.010);
    p.fake("c", "python3.12", "3.11", 0.010);
    assert_eq!(p.tried(&["a", "b", "c"]), [first]);
}

#[test]
fn a_candidate_that_never_answers_is_passed_over() {
    let p = Fakes::new();
    let first = p.fake("a", "python3", "3.11", 0.030);
    write_executable(
        &p.dir("b").join("python3.11"),
        "#!/bin/sh\nexec /bin/sleep 600\n",
    );
    let started = std::time::Instant::now();
    assert_eq!(p.tried(&["a", "b"]), [first]);
    // Its probe's limit, not its sleep.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}
