//! `--backend ray` against a real Ray head that the test starts in a network namespace
//! of its own (loopback only, nothing listens outside), stopped by its PID, and in a
//! mount namespace where the results folder is out of its sight (no shared file system).

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
/// 127.0.0.1:8265 inside it. The head runs in a mount namespace of its own where
/// `hidden` is an empty tmpfs: what jax-runner writes there is out of the cluster's
/// sight, as on a cluster without a shared file system. `gpu_worker` (a bash function
/// the body may call) adds a node that declares one GPU it does not have. `state` holds
/// the nodes' own folder (`--temp-dir`) and their logs. Every node is stopped by its
/// process group at the end.
fn with_ray_head(
    venv_python: &std::path::Path,
    hidden: &std::path::Path,
    state: &std::path::Path,
    body: &str,
) -> std::process::Output {
    assert!(
        unsafe { libc::geteuid() } == 0,
        "the Ray test needs root for its own network and mount namespaces (unshare -n -m); CI runs as root"
    );
    let bin = venv_python.parent().unwrap().display().to_string();
    let hidden = hidden.display();
    let state = state.display();
    let script = format!(
        r#"set -u
ip link set lo up
# The second node's fixed ports (below) above the range the kernel picks a connection's
# own port from: no connection made before it starts can hold one of them.
echo 32768 52000 > /proc/sys/net/ipv4/ip_local_port_range
export RAY_USAGE_STATS_ENABLED=0 PATH={bin}:$PATH
PGIDS=""
trap 'for p in $PGIDS; do kill -TERM -- -$p 2>/dev/null; done; sleep 3; for p in $PGIDS; do kill -KILL -- -$p 2>/dev/null; done' EXIT
NODES=0
node() {{
  NODES=$((NODES + 1))
  setsid unshare -m --propagation private bash -c "mount -t tmpfs tmpfs {hidden} && exec {bin}/ray start $* --num-cpus 2 --disable-usage-stats --block" >{state}/node$NODES.log 2>&1 &
  PGIDS="$PGIDS $!"
}}
gpu_worker() {{
  # One IP for two nodes: the second's own ports must differ from the head's.
  node --address 127.0.0.1:6379 --node-ip-address 127.0.0.1 --num-gpus 1 --dashboard-agent-listen-port 52466 --dashboard-agent-grpc-port 52467 --runtime-env-agent-port 52468 --metrics-export-port 52469 --node-manager-port 52470 --object-manager-port 52471
  for i in $(seq 90); do {bin}/python -c 'import json, sys, urllib.request; n = json.load(urllib.request.urlopen("http://127.0.0.1:8265/api/v0/nodes?detail=1", timeout=2)); sys.exit(0 if sum(x["resources_total"].get("GPU", 0) for x in n["data"]["result"]["result"] if x["state"] == "ALIVE") else 1)' 2>/dev/null && break; sleep 1; done
  # A node listed ALIVE may not yet set up a job's runtime environment: one GPU job that
  # ends well says it can.
  for i in $(seq 10); do timeout 120 {bin}/ray job submit --address http://127.0.0.1:8265 --entrypoint-num-gpus 1 -- python -c pass >/dev/null 2>&1 && break; sleep 1; done
}}
# A folder of its own: `ray start --head` refuses to start when the default one names a
# cluster whose GCS process runs, and another test's head in another namespace would.
node --head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1 --temp-dir {state}/ray
# A loaded machine can take a while: the head's own log says why it never came up.
for i in $(seq 180); do {bin}/python -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8265/api/version", timeout=2)' 2>/dev/null && break; sleep 1; done
[ "$i" = 180 ] && {{ echo "the head did not answer:"; grep -v '^ ' {state}/node1.log | tail -20; }}
{body}
"#
    );
    Command::new("timeout")
        .args([
            "600", "unshare", "-n", "-m", "--fork", "bash", "-c", &script,
        ])
        .output()
        .unwrap()
}

/// Copies `fixture` into `tree` at `rel`.
fn place(tree: &std::path::Path, fixture: &str, rel: &str) {
    let dest = tree.join(rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("fixtures").join(fixture), dest).unwrap();
}

/// Result keys that differ between any two runs, or between here and a cluster by
/// nature (where things ran, when, for how long, with which sandbox).
const VARYING: &[&str] = &[
    "run_id",
    "started_at",
    "finished_at",
    "execution_time_s",
    "cpu_user_s",
    "cpu_system_s",
    "peak_memory_mb",
    // `pss` where a sample was taken, `rss` (the kernel's resident peak) for a script
    // that ended before the first: which depends on timing, here as there.
    "memory_source",
    "time_breakdown",
    // Seconds per device (what `--device auto` learns from) are times too.
    "device_times",
    "stdout_log",
    "stderr_log",
    // The sample scripts print their data folder and their run time; a traceback names
    // the script's path, which is another one on the cluster (the tails are compared
    // with paths cut to file names).
    "stdout_bytes",
    "stderr_bytes",
    "stderr_tail",
    "data_dir",
    "sandbox",
    "attempts",
    "jax",
];

/// Compares a Ray result with a local one key by key, times and places aside.
fn same_as_local(id: &str, remote: &serde_json::Value, here: &serde_json::Value) {
    let keys = here.as_object().unwrap();
    assert_eq!(
        remote.as_object().unwrap().len(),
        keys.len(),
        "{id}: the same keys"
    );
    for (key, value) in keys {
        if !VARYING.contains(&key.as_str()) {
            assert_eq!(
                &remote[key], value,
                "{id}: {key} differs between Ray and local"
            );
        }
    }
    assert_eq!(
        file_names(&remote["stderr_tail"]),
        file_names(&here["stderr_tail"]),
        "{id}: stderr_tail differs between Ray and local"
    );
    for key in [
        "jax_imported",
        "backend",
        "devices",
        "device_kinds",
        "compilations",
        "uncaught_exception",
    ] {
        assert_eq!(
            remote["jax"][key], here["jax"][key],
            "{id}: jax.{key} differs between Ray and local"
        );
    }
    let (ra, ha) = (&remote["attempts"], &here["attempts"]);
    assert_eq!(ra.as_array().unwrap().len(), ha.as_array().unwrap().len());
    for (r, h) in ra.as_array().unwrap().iter().zip(ha.as_array().unwrap()) {
        for key in [
            "number",
            "device",
            "status",
            "class",
            "return_code",
            "signal",
            "matched_line",
            "exception",
        ] {
            assert_eq!(
                r[key], h[key],
                "{id}: attempts[].{key} differs between Ray and local"
            );
        }
    }
}

/// Lines with each traceback's `File "/some/folder/name.py"` cut to `File "name.py"`.
fn file_names(lines: &serde_json::Value) -> Vec<String> {
    let cut = |line: &str| -> String {
        let Some(at) = line.find("File \"") else {
            return line.to_string();
        };
        let (head, rest) = line.split_at(at + 6);
        let end = rest.find('"').unwrap_or(rest.len());
        let name = rest[..end].rsplit('/').next().unwrap_or_default();
        format!("{head}{name}{}", &rest[end..])
    };
    lines
        .as_array()
        .unwrap()
        .iter()
        .map(|l| cut(l.as_str().unwrap()))
        .collect()
}

#[test]
fn ray_runs_bring_back_what_local_runs_record() {
    let venv = ray_venv();
    let t = Tree::new();
    // The sample pipeline output, plus a script that fails and one that writes data.
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
    t.fixture("writes_data.py", "m/jax/writes_data.py");
    // Two small trees of their own: one data folder too big to return, one GPU job.
    let small = tempfile::tempdir().unwrap();
    let small = small.path();
    place(small, "writes_data.py", "big/jax/writes_data.py");
    place(small, "gpu_env_error.py", "gpu/jax/gpu_env_error.py");
    place(small, "thread_bomb.py", "bomb/jax/bomb.py");
    place(small, "ray_supervisor_dies.py", "lost/jax/lost.py");
    let hidden = t.root().join("hidden");
    std::fs::create_dir_all(&hidden).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("jax-runner");
    let ray = format!(
        "{} --backend ray --ray-address http://127.0.0.1:8265 --python {} --compilation-cache off -q",
        bin.display(),
        venv.display()
    );
    let body = format!(
        "{ray} --output-dir {tree} --results-dir {hidden}/res --device cpu; echo ray_rc=$?\n\
         {ray} --output-dir {small}/big --results-dir {hidden}/big --ray-max-return 16K; echo big_rc=$?\n\
         {ray} --output-dir {small}/big --results-dir {small}/shared; echo shared_rc=$?\n\
         {ray} --output-dir {small}/gpu --results-dir {small}/refused --device gpu; echo refused_rc=$?\n\
         {ray} --output-dir {small}/lost --results-dir {hidden}/lost --device cpu --env JAX_RUNNER_TEST_PIDFILE={small}/lost.pid; echo lost_rc=$?\n\
         {ray} --output-dir {small}/bomb --results-dir {hidden}/bomb --device cpu --max-procs 64; echo bomb_rc=$?\n\
         gpu_worker\n\
         {ray} --output-dir {small}/gpu --results-dir {hidden}/gpu --device gpu; echo gpu_rc=$?",
        tree = t.root().display(),
        hidden = hidden.display(),
        small = small.display(),
    );
    // The nodes' folder and logs, outside the tree the local run reads.
    let state = tempfile::tempdir().unwrap();
    let out = with_ray_head(&venv, &hidden, state.path(), &body);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    for expected in [
        "ray_rc=1",
        "big_rc=0",
        "shared_rc=0",
        "refused_rc=2",
        "gpu_rc=0",
        "bomb_rc=1",
        "lost_rc=0",
    ] {
        if !text.contains(expected) {
            panic!("{expected}: {text}\n{}", what_ran(&hidden, state.path()));
        }
    }
    assert!(
        text.contains("has no GPU"),
        "a GPU run on a GPU-less cluster is refused at once: {text}"
    );
    compare_with_local(&t, &venv, &hidden.join("res"));
    oversized_folder_stays(&hidden.join("big"));
    shared_folder_is_not_copied(&small.join("shared"));
    gpu_failure_falls_back(&hidden.join("gpu"));
    held_to_the_process_limit(&hidden.join("bomb"));
    a_lost_job_is_retried_and_leaves_nothing(&hidden.join("lost"), &small.join("lost.pid"));
}

/// A job the cluster lost under its script (its supervisor killed) is retried, as a
/// Slurm job whose node failed is, and its first attempt says what Ray said; nothing of
/// the script outlives the job.
fn a_lost_job_is_retried_and_leaves_nothing(results: &std::path::Path, pidfile: &std::path::Path) {
    let r = read_json(&results.join("lost_results.json"));
    assert_eq!(r["status"], "succeeded", "{r}");
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{r}");
    let first = &attempts[0];
    assert_eq!(first["class"], "killed_by_signal", "{r}");
    assert_eq!(first["signal"], libc::SIGKILL, "{r}");
    assert_eq!(
        first["ray"]["error_type"], "JOB_SUPERVISOR_ACTOR_DIED",
        "{r}"
    );
    let line = first["matched_line"].as_str().unwrap_or_default();
    assert!(
        line.starts_with("Ray job ") && line.contains("(JOB_SUPERVISOR_ACTOR_DIED)"),
        "{line}"
    );
    assert_eq!(attempts[1]["status"], "succeeded", "{r}");
    // The child the first attempt left: its PID, and the command only it runs.
    let pid = std::fs::read_to_string(pidfile).expect("the first attempt ran");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    let alive = String::from_utf8_lossy(&cmdline).contains("time.sleep(600)");
    if alive {
        unsafe { libc::kill(pid.trim().parse().unwrap(), libc::SIGKILL) };
    }
    assert!(!alive, "the first attempt's child outlived its job");
}

/// What each run under `hidden` recorded, and the errors in the cluster's own logs: a
/// run that ended otherwise than expected says why.
fn what_ran(hidden: &std::path::Path, state: &std::path::Path) -> String {
    let mut out = String::new();
    for run in std::fs::read_dir(hidden).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            if !path.to_string_lossy().ends_with("_results.json") {
                continue;
            }
            let Ok(r) = serde_json::from_str::<serde_json::Value>(
                &std::fs::read_to_string(&path).unwrap_or_default(),
            ) else {
                continue;
            };
            out += &format!("{}: {} {}\n", path.display(), r["status"], r["reason"]);
            for a in r["attempts"].as_array().into_iter().flatten() {
                out += &format!(
                    "  attempt {} {} {} {} {}\n",
                    a["number"],
                    a["class"],
                    a["matched_line"],
                    a["ray"]["error_type"],
                    a["ray"]["message"]
                );
            }
        }
    }
    let logs = state.join("ray/session_latest/logs");
    for file in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(file.path()).unwrap_or_default();
        let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
        for line in &errors[errors.len().saturating_sub(10)..] {
            out += &format!("{}: {line}\n", file.file_name().to_string_lossy());
        }
    }
    out
}

/// Each result key by key with a local run's; the wrapper's figures and telemetry
/// there; the data folder back and the streams apart.
fn compare_with_local(t: &Tree, venv: &std::path::Path, ray_results: &std::path::Path) {
    let local = t.run(&["--python", venv.to_str().unwrap()]);
    assert_eq!(code(&local), 1);
    for id in [
        "pomdp_solver",
        "general_model",
        "combined_model",
        "ok_jax",
        "fail",
        "writes_data",
    ] {
        let remote = read_json(&ray_results.join(format!("{id}_results.json")));
        let here = t.result(id);
        same_as_local(id, &remote, &here);
        // A Ray job is held to the same process limit, by the wrapper's watchdog.
        assert!(here["sandbox"]["max_procs"].is_u64(), "{id}: {here}");
        assert_eq!(
            remote["sandbox"]["max_procs"], here["sandbox"]["max_procs"],
            "{id}: {remote}"
        );
        assert_eq!(
            remote["sandbox"]["max_procs_enforced_by"], "watchdog",
            "{id}: {remote}"
        );
        let attempt = &remote["attempts"][0];
        let job = &attempt["ray"];
        assert!(
            job["job_id"].as_str().unwrap().starts_with("jax-runner-"),
            "{job}"
        );
        assert_eq!(job["reported"], true, "{id}: the wrapper reported: {job}");
        assert_eq!(job["shared_filesystem"], false, "{id}: {job}");
        // Telemetry and the wrapper's figures, as a local run has them.
        assert_eq!(remote["device_mismatch"], false, "{id}");
        assert_eq!(remote["jax"]["jax_imported"], true, "{id}");
        if id != "fail" {
            assert_eq!(remote["device_used"], "cpu", "{id}");
            assert!(remote["jax"]["compilations"].as_u64().unwrap() > 0, "{id}");
        }
        assert!(
            attempt["cpu_user_s"].as_f64().unwrap() > 0.0,
            "{id}: {attempt}"
        );
        assert!(
            attempt["peak_memory_mb"].as_f64().unwrap() > 10.0,
            "{id}: {attempt}"
        );
    }
    // The data came back where a local run writes it.
    let data = ray_results.join("data/writes_data");
    let result = read_json(&ray_results.join("writes_data_results.json"));
    let job = &result["attempts"][0]["ray"];
    assert_eq!(job["data_returned"], true, "{job}");
    assert_eq!(job["data_files"], 3, "{job}");
    let here = read_json(&t.results_dir().join("writes_data_results.json"));
    let here = std::path::Path::new(here["data_dir"].as_str().unwrap());
    for file in ["simulation_results.json", "simulation_data/trace.csv"] {
        assert_eq!(
            std::fs::read(data.join(file)).unwrap(),
            std::fs::read(here.join(file)).unwrap(),
            "{file}: the same bytes as the local run wrote"
        );
    }
    assert_eq!(
        std::fs::metadata(data.join("simulation_data/state.bin"))
            .unwrap()
            .len(),
        64 * 1024
    );
    // stdout and stderr apart.
    let out = std::fs::read_to_string(result["stdout_log"].as_str().unwrap()).unwrap();
    let err = std::fs::read_to_string(result["stderr_log"].as_str().unwrap()).unwrap();
    assert_eq!(out, "result: 10.0\n");
    assert_eq!(err, "warning: only on stderr\n");
}

/// Over --ray-max-return: nothing copied, and the result says where the files are.
fn oversized_folder_stays(results: &std::path::Path) {
    let big = read_json(&results.join("writes_data_results.json"));
    let job = &big["attempts"][0]["ray"];
    assert_eq!(big["status"], "succeeded");
    assert_eq!(job["data_returned"], false, "{job}");
    assert!(job["data_bytes"].as_u64().unwrap() > 64 * 1024, "{job}");
    assert!(
        job["data_note"]
            .as_str()
            .unwrap()
            .contains("--ray-max-return"),
        "{job}"
    );
    let left_at = job["data_left_at"].as_str().unwrap();
    assert!(left_at.contains(":/"), "node:path: {left_at}");
    assert_eq!(
        big["data_files"],
        serde_json::json!([]),
        "nothing was copied"
    );
}

/// A shared file system: the script wrote into the folder itself, nothing copied.
fn shared_folder_is_not_copied(results: &std::path::Path) {
    let shared = read_json(&results.join("writes_data_results.json"));
    let job = &shared["attempts"][0]["ray"];
    assert_eq!(job["shared_filesystem"], true, "{job}");
    assert_eq!(job["data_returned"], false, "{job}");
    assert_eq!(
        job["data_files"], 3,
        "the runner's marker is not counted: {job}"
    );
    assert_eq!(
        shared["data_files"].as_array().unwrap().len(),
        3,
        "{shared}"
    );
}

/// The GPU failed on its node: resubmitted without a GPU, on the CPU, and said so.
fn gpu_failure_falls_back(results: &std::path::Path) {
    let gpu = read_json(&results.join("gpu_env_error_results.json"));
    assert_eq!(gpu["status"], "succeeded", "{gpu}");
    assert_eq!(gpu["fallback"]["from"], "gpu", "{gpu}");
    assert_eq!(gpu["fallback"]["to"], "cpu", "{gpu}");
    assert_eq!(gpu["device_used"], "cpu", "{gpu}");
    let attempts = gpu["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{gpu}");
    assert_eq!(attempts[0]["device"], "gpu");
    assert_eq!(attempts[0]["class"], "gpu_environment");
    assert_eq!(attempts[1]["device"], "cpu");
    assert_ne!(attempts[0]["ray"]["job_id"], attempts[1]["ray"]["job_id"]);
}

/// Past `--max-procs`, the wrapper's watchdog kills the job's script, and its result
/// says so as a local watchdog's does.
fn held_to_the_process_limit(results: &std::path::Path) {
    let r = read_json(&results.join("bomb_results.json"));
    assert_eq!(r["class"], "killed_by_signal", "{r}");
    assert_eq!(r["sandbox"]["max_procs"], 64, "{r}");
    assert_eq!(r["sandbox"]["max_procs_enforced_by"], "watchdog", "{r}");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("killed by SIGKILL")
            && reason.contains("past its limit of 64")
            && reason.contains("--max-procs N"),
        "{reason}"
    );
}
