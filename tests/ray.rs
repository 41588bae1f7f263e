//! `--backend ray` against a real Ray head that the test starts in a network namespace
//! of its own (loopback only, nothing listens outside), stopped by its PID.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

const RAY: &str = "2.60.0";

/// A virtual environment with Ray and the pinned jax, cached across runs.
fn ray_venv() -> PathBuf {
    let dir = jax_runner::paths::cache_dir().join(format!("test-ray-venv-{RAY}"));
    let python = dir.join("bin/python");
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let _lock = jax_runner::lock::FileLock::acquire(&dir.with_extension("lock")).unwrap();
    if dir.join("bin/ray").is_file() {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(Command::new("python3")
        .args(["-m", "venv"])
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    let ok = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .arg(format!("ray[default]=={RAY}"))
        .args(["jax==0.10.2", "jaxlib==0.10.2"])
        .status()
        .unwrap();
    assert!(ok.success(), "pip install ray failed");
    python
}

/// Runs `body` (bash) in a fresh network namespace with a Ray head listening on
/// 127.0.0.1:8265 inside it; the head is stopped by its process group at the end.
fn with_ray_head(venv_python: &std::path::Path, body: &str) -> std::process::Output {
    assert!(
        unsafe { libc::geteuid() } == 0,
        "the Ray test needs root for its own network namespace (unshare -n); CI runs as root"
    );
    let bin = venv_python.parent().unwrap().display().to_string();
    let script = format!(
        r#"set -u
ip link set lo up
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 PATH={bin}:$PATH
setsid {bin}/ray start --head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1 --num-cpus 2 --disable-usage-stats --block >/dev/null 2>&1 &
RAYPID=$!
trap 'kill -TERM -- -$RAYPID 2>/dev/null; sleep 3; kill -KILL -- -$RAYPID 2>/dev/null' EXIT
for i in $(seq 90); do {bin}/python -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8265/api/version", timeout=2)' 2>/dev/null && break; sleep 1; done
{body}
"#
    );
    Command::new("timeout")
        .args(["600", "unshare", "-n", "--fork", "bash", "-c", &script])
        .output()
        .unwrap()
}

#[test]
fn the_sample_runs_on_a_ray_cluster_like_it_runs_here() {
    let venv = ray_venv();
    let t = Tree::new();
    // The sample pipeline output, plus a script that fails.
    for model in ["pomdp_solver", "general_model", "combined_model"] {
        let dest = t
            .dir
            .path()
            .join(format!("gnn_rendered_simulators/jax/{model}.py"));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(
            repo().join(format!("output/gnn_rendered_simulators/jax/{model}.py")),
            dest,
        )
        .unwrap();
    }
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    t.fixture("fail_exception.py", "m/jax/fail.py");
    let bin = assert_cmd::cargo::cargo_bin("jax-runner");
    let ray_results = t.root().join("ray-results");
    let body = format!(
        "{bin} --output-dir {tree} --results-dir {res} --backend ray --ray-address http://127.0.0.1:8265 --python {py} --compilation-cache off -q; echo ray_rc=$?\n\
         {bin} --output-dir {tree} --results-dir {res}-gpu --backend ray --ray-address http://127.0.0.1:8265 --python {py} --device gpu -q; echo gpu_rc=$?",
        bin = bin.display(),
        tree = t.root().display(),
        res = ray_results.display(),
        py = venv.display(),
    );
    let out = with_ray_head(&venv, &body);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("ray_rc=1"),
        "one script fails on the cluster too: {text}"
    );
    assert!(
        text.contains("gpu_rc=2") && text.contains("has no GPU"),
        "a GPU run on a GPU-less cluster is refused at once: {text}"
    );

    let local = t.run(&["--python", venv.to_str().unwrap()]);
    assert_eq!(code(&local), 1);
    for id in [
        "pomdp_solver",
        "general_model",
        "combined_model",
        "ok_jax",
        "fail",
    ] {
        let remote = read_json(&ray_results.join(format!("{id}_results.json")));
        let here = t.result(id);
        for key in ["status", "class", "return_code", "success"] {
            assert_eq!(
                remote[key], here[key],
                "{id}: {key} differs between Ray and local"
            );
        }
        let job = &remote["attempts"][0]["ray"];
        assert!(
            job["job_id"].as_str().unwrap().starts_with("jax-runner-"),
            "{job}"
        );
        assert!(job["status"] == "SUCCEEDED" || job["status"] == "FAILED");
    }
    let log = std::fs::read_to_string(
        read_json(&ray_results.join("ok_jax_results.json"))["stdout_log"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(
        log.contains("result: 14.0"),
        "the job's log came back: {log}"
    );
}
