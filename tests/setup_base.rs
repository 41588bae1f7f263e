//! `jax-runner setup`'s base interpreter: the fastest build on PATH of the first
//! `python3`'s version, by a tenth at least, else that first `python3`; and the first
//! again when the faster one cannot make the environment. The interpreters here are
//! shell scripts that answer the probe with what a test gives them and record every
//! `-m venv` asked of them (then fail it, so nothing is installed).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fake interpreter at `dir/name`: its probe answer says `version` and `loop_s`,
/// and it names itself as the executable; `-m venv` appends `dir/name` to `record`.
fn fake(dir: &Path, name: &str, version: &str, loop_s: f64, record: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    let body = format!(
        "#!/bin/sh\n\
         case \"$*\" in\n\
         *\"-m venv\"*) echo '{path}' >> '{record}'; exit 1;;\n\
         *-c*) echo '{{\"implementation\": \"cpython\", \"version\": \"{version}\", \
         \"executable\": \"{path}\", \"venv\": true, \"loop_s\": {loop_s}}}';;\n\
         esac\n",
        path = path.display(),
        record = record.display(),
    );
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs `jax-runner setup` with PATH of `dirs` and an empty cache; returns the
/// interpreters asked to make the environment, in order.
fn bases_tried(tmp: &Path, dirs: &[&Path], record: &Path) -> Vec<String> {
    let path = std::env::join_paths(dirs).unwrap();
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["setup", "--flavor", "cpu"])
        .env("PATH", path)
        .env("JAX_RUNNER_CACHE_DIR", tmp.join("cache"))
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
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_build_faster_by_a_tenth_makes_the_environment_and_the_first_python3_is_next() {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let first = fake(&a, "python3", "3.11", 0.030, &record);
    let fast = fake(&b, "python3.11", "3.11", 0.027, &record);
    assert_eq!(
        bases_tried(tmp.path(), &[&a, &b], &record),
        [fast.display().to_string(), first.display().to_string()]
    );
}

#[test]
fn the_first_python3_stays_against_a_build_less_than_a_tenth_faster() {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let first = fake(&a, "python3", "3.11", 0.030, &record);
    fake(&b, "python3.11", "3.11", 0.0272, &record);
    assert_eq!(
        bases_tried(tmp.path(), &[&a, &b], &record),
        [first.display().to_string()]
    );
}

#[test]
fn a_faster_interpreter_of_another_version_is_never_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let first = fake(&a, "python3", "3.11", 0.030, &record);
    // A `python3` later on PATH that is another version, and a `python3.12`, which
    // is not even asked.
    fake(&b, "python3", "3.12", 0.010, &record);
    fake(&c, "python3.12", "3.11", 0.010, &record);
    assert_eq!(
        bases_tried(tmp.path(), &[&a, &b, &c], &record),
        [first.display().to_string()]
    );
}

#[test]
fn a_candidate_that_never_answers_is_passed_over() {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let first = fake(&a, "python3", "3.11", 0.030, &record);
    std::fs::create_dir_all(&b).unwrap();
    let hung = b.join("python3.11");
    std::fs::write(&hung, "#!/bin/sh\nexec /bin/sleep 600\n").unwrap();
    std::fs::set_permissions(&hung, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        bases_tried(tmp.path(), &[&a, &b], &record),
        [first.display().to_string()]
    );
    // Its probe's limit, not its sleep.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}
