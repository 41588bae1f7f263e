//! Shared helpers for the test files: the managed interpreter, fixture trees, reading
//! what a run wrote, what the integration tier needs from the machine (`prereq`),
//! committed files checked as snapshots (`snapshot`), and a one-node Slurm cluster
//! (`slurm`). Both tiers compile it; only the integration tier (`--features
//! integration`) calls [`python`] and starts a cluster.
#![allow(dead_code)]

pub mod watched;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use assert_cmd::Command;
use serde_json::Value;

pub mod catalogue;
pub mod modes;
pub mod netns;
pub mod prereq;
pub mod slurm;
pub mod slurm_node;
pub mod slurm_run;
pub mod snapshot;
pub mod user;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The interpreter runs use, provisioned once per test binary through `jax-runner
/// setup` (which locks, so parallel test binaries share one environment).
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::cargo_bin("jax-runner")
            .unwrap()
            .args(["setup", "-q"])
            .output()
            .expect("jax-runner setup runs");
        assert!(
            out.status.success(),
            "jax-runner setup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// A temporary pipeline output tree.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Tree {
        Tree {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A tree outside `/tmp` (in cargo's target folder), as a real pipeline output
    /// is: inside the sandbox `/tmp` is a private tmpfs, which changes what a write
    /// next to the script does.
    pub fn outside_tmp() -> Tree {
        let mut base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if base.starts_with("/tmp") {
            // A checkout under /tmp: /var/tmp is a real folder, which the sandbox hides
            // like any other but for the script's own folders.
            base = PathBuf::from("/var/tmp");
        }
        Tree {
            dir: tempfile::tempdir_in(base).unwrap(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// Copies `fixtures/<fixture>` to `<rel>` in the tree.
    pub fn fixture(&self, fixture: &str, rel: &str) -> PathBuf {
        let dest = self.dir.path().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(repo().join("fixtures").join(fixture), &dest).unwrap();
        dest
    }

    pub fn write(&self, rel: &str, body: &str) -> PathBuf {
        let dest = self.dir.path().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(&dest, body).unwrap();
        dest
    }

    pub fn results_dir(&self) -> PathBuf {
        self.root().join("execution_results/jax")
    }

    /// `jax-runner --output-dir <tree> --python <managed> --compilation-cache off ARGS`.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::cargo_bin("jax-runner").unwrap();
        cmd.arg("--output-dir")
            .arg(self.dir.path())
            .arg("--python")
            .arg(python())
            .args(["--compilation-cache", "off", "--device", "cpu"])
            .env_remove("JAX_PLATFORM_NAME")
            .timeout(std::time::Duration::from_secs(300));
        cmd
    }

    /// Starts the runner in the background (CPU, cache off, quiet) for tests that
    /// signal or race it.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
            .arg("--output-dir")
            .arg(self.dir.path())
            .arg("--python")
            .arg(python())
            .args(["--device", "cpu", "--compilation-cache", "off", "-q"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    pub fn result(&self, id: &str) -> Value {
        read_json(&self.results_dir().join(format!("{id}_results.json")))
    }

    pub fn metrics(&self) -> Value {
        read_json(&self.results_dir().join("performance_metrics.json"))
    }
}

/// The validator of a committed JSON Schema (`schemas/<name>.schema.json`).
pub fn validator(name: &str) -> jsonschema::Validator {
    let schema = jax_runner::schema::schema(name).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// Fails with every schema error of `doc`.
pub fn assert_valid(v: &jsonschema::Validator, doc: &Value, what: &str) {
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match its schema: {errors:?}"
    );
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The ids of a document's `scripts` (the metrics', or `list --json`'s), sorted.
pub fn script_ids(doc: &Value) -> Vec<String> {
    let mut ids: Vec<String> = doc["scripts"]
        .as_array()
        .unwrap_or_else(|| panic!("no scripts in {doc}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// A GNN step-11 tree under `tree` with one model: `11_render_output/m/jax/M_jax.py`
/// (a copy of `fixtures/FIXTURE`) and a render manifest listing it by absolute path.
/// Returns the render folder.
pub fn one_model_tree(tree: &Path, fixture: &str) -> PathBuf {
    let render = tree.join("11_render_output");
    let script = render.join("m/jax/M_jax.py");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("fixtures").join(fixture), &script).unwrap();
    let manifest = serde_json::json!({"file_results": {"in/m.md": {"framework_results": {
        "jax": {"success": true, "output_files": [script]}}}}});
    std::fs::write(
        render.join("render_processing_summary.json"),
        manifest.to_string(),
    )
    .unwrap();
    render
}

/// `jax-runner ARGS`'s standard output, at clap's width off a terminal (100 columns),
/// without the variables whose values help would show; the command must succeed.
pub fn help_text(args: &[&str]) -> String {
    let out = Command::cargo_bin("jax-runner")
        .unwrap()
        .args(args)
        .env("COLUMNS", "100")
        .env_remove("RAY_ADDRESS")
        .env_remove("JAX_RUNNER_RAY_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// PIDs of live processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // Every thread's: once the main thread alone has exited, the process's own
        // entry reads empty while it runs on in the others.
        let Ok(tasks) = std::fs::read_dir(entry.path().join("task")) else {
            continue;
        };
        let mentions = tasks.flatten().any(|t| {
            std::fs::read(t.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        });
        if mentions {
            found.push(pid);
        }
    }
    found
}

/// PIDs of the processes working in `dir`: a script's, however it was started (a
/// warm-started one carries the zygote's command line, not the script's path).
pub fn processes_in(dir: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir) {
            found.push(pid);
        }
    }
    found
}

/// PIDs of the processes that name anything under `root` on their command line or
/// work in a folder under it: every script of a run there, warm or cold.
pub fn processes_under(root: &Path) -> Vec<u32> {
    let mut found = processes_mentioning(root.to_str().unwrap());
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(root)) {
            found.push(pid);
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}

/// A virtual environment without pip or jax; returns its interpreter.
pub fn bare_venv(dir: &Path) -> PathBuf {
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(made.success(), "python3 -m venv failed");
    dir.join("bin/python")
}

/// Waits (up to a minute) until a log file has output: the script is running.
pub fn wait_for_output(log: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(log).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never got output",
            log.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Waits (up to a minute) until `log` holds a line containing `needle`: the runner got
/// that far.
pub fn wait_for_line(log: &Path, needle: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(log).is_ok_and(|text| text.contains(needle)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never said {needle:?}",
            log.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Python a test script starts with to reach the zygotes of its own run, never
/// another run's (tests run side by side): `runner`, the nearest ancestor that is
/// jax-runner, and `this_runs_zygotes()`, the processes running `python -` that are
/// the runner's children (the run's zygote, a slot's) or its zygote's.
pub const THIS_RUNS_ZYGOTES_PY: &str = r#"import os

def ppid(pid):
    with open("/proc/%d/stat" % pid) as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])

def argv(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as fh:
        return fh.read().split(b"\0")[:-1]

runner = os.getppid()
while not argv(runner)[0].endswith(b"jax-runner"):
    runner = ppid(runner)

def this_runs_zygotes():
    found = []
    for name in os.listdir("/proc"):
        try:
            pid = int(name)
            ours = ppid(pid) == runner or ppid(ppid(pid)) == runner
            if pid != os.getpid() and ours and argv(pid)[1:2] == [b"-c"]:
                found.append(pid)
        except (OSError, IndexError, ValueError):
            pass
    return found
"#;

/// Whether this host lets the runner make pids cgroups (root, a pids controller): then
/// each worker slot has a zygote of its own, in its cgroup, which forks its scripts;
/// without, the run's zygote forks each script as a grandchild.
pub fn pids_cgroups() -> bool {
    let root = rustix::process::geteuid().is_root();
    let v1 = std::path::Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists();
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
    root && (v1 || v2)
}

/// A pipeline tree copied, without its results (`execution_results/`): the committed
/// sample, for a test to run on.
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        if rel.starts_with("execution_results") {
            continue;
        }
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
