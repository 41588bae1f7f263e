//! Warm start against cold start: every fixture, both ways, must end the same.

mod common;

use common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

const FIXTURES: &[&str] = &[
    "ok_jax.py",
    "ok_plain.py",
    "fail_exception.py",
    "syntax_error.py",
    "missing_module.py",
    "signal_death.py",
    "memory_error.py",
    "hang.py",
    "ignore_sigterm.py",
    "flaky.py",
    "print_env.py",
    "reads_sibling.py",
    "switches_to_cpu.py",
    "gpu_env_error.py",
    "slow_ok.py",
    "output_flood.py",
    "grandchild.py",
    "exit_effects.py",
];

/// Fixtures whose standard error differs between any two runs (PIDs, timings).
const STDERR_VARIES: &[&str] = &["grandchild", "output_flood", "hang", "ignore_sigterm"];

/// What must not depend on how the interpreter started.
fn behaviour(t: &Tree, id: &str, sandbox: &str) -> Value {
    let r = t.result(id);
    // Sandboxed, a detached grandchild dies with the script's PID namespace; whether
    // the runner still sees it dying is a race (see the sandbox tests), cold or warm.
    let leaks = if id == "grandchild" && sandbox == "on" {
        Value::from("(ended with the namespace)")
    } else {
        Value::from(r["leaks"].as_array().unwrap().len())
    };
    let mut stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap_or_default();
    if id == "grandchild" {
        stdout = "(prints a fresh PID each run)".into();
    }
    // Tracebacks read as under `python script.py`: no runner frames.
    let stderr = std::fs::read_to_string(r["stderr_log"].as_str().unwrap()).unwrap_or_default();
    let stderr = if STDERR_VARIES.contains(&id) {
        "(varies from run to run)".into()
    } else {
        thread_ids_blanked(&stderr)
    };
    serde_json::json!({
        "stderr": stderr,
        "status": r["status"],
        "class": r["class"],
        "return_code": r["return_code"],
        "signal": r["signal_name"],
        "exception": r["exception"],
        "attempts": r["attempts"].as_array().unwrap().len(),
        "device_used": r["device_used"],
        "stdout": stdout,
        "leaks": leaks,
    })
}

/// `stderr` with the thread addresses of faulthandler's stack dumps blanked
/// (`Current thread 0x00007f…`): they differ from one process to the next, cold or
/// warm; the frames below them must not.
fn thread_ids_blanked(stderr: &str) -> String {
    stderr
        .lines()
        .map(|l| {
            match l
                .split_once("thread 0x")
                .or_else(|| l.split_once("Thread 0x"))
            {
                Some((head, rest)) if l.ends_with("(most recent call first):") => {
                    let tail = rest.split_once(' ').map_or("", |(_, t)| t);
                    format!("{head}thread 0x… {tail}")
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Unsandboxed and inside the sandbox: the zygote differs, the script must not see it.
#[test]
fn every_fixture_ends_the_same_warm_and_cold() {
    for sandbox in ["off", "on"] {
        fixtures_end_the_same(sandbox);
    }
}

fn fixtures_end_the_same(sandbox: &str) {
    let t = Tree::new();
    for f in FIXTURES {
        t.fixture(f, &format!("m/jax/{f}"));
    }
    t.fixture("sibling_data.json", "m/jax/sibling_data.json");
    let ids: Vec<String> = FIXTURES
        .iter()
        .map(|f| f.trim_end_matches(".py").to_string())
        .collect();
    let common_args = [
        "--sandbox",
        sandbox,
        "--timeout",
        // Long enough for a cold start on a loaded 2-core machine; hang.py and
        // ignore_sigterm.py still end by it.
        "10s",
        "--grace",
        "1s",
        "--retry-on",
        "script_error",
        "--retry-delay",
        "0s",
        "--env",
        "FLOOD_MB=5",
        "--env",
        "SLOW_SECONDS=0.5",
    ];
    let run = |mode: &str| {
        let out = t
            .cmd()
            .args(common_args)
            .args(["--warm-start", mode])
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{sandbox} {mode}: {}", stderr(&out));
        ids.iter()
            .map(|id| (id.clone(), behaviour(&t, id, sandbox)))
            .collect::<Vec<_>>()
    };
    let cold = run("off");
    for id in &ids {
        assert_eq!(
            t.result(id)["attempts"][0]["start"],
            "cold",
            "{sandbox} {id}"
        );
    }
    let warm = run("on");
    for id in &ids {
        let first = &t.result(id)["attempts"][0];
        assert_eq!(first["start"], "warm", "{sandbox} {id}: {first}");
    }
    for ((id, c), (_, w)) in cold.iter().zip(&warm) {
        assert_eq!(c, w, "{sandbox}: {id} differs between cold and warm start");
    }
    // The retried flaky script really ran twice, and its second attempt succeeded.
    assert_eq!(
        warm.iter().find(|(id, _)| id == "flaky").unwrap().1["status"],
        "succeeded"
    );
}

#[test]
fn jax_settings_from_the_environment_take_effect_in_warm_scripts() {
    let t = Tree::new();
    t.write(
        "m/jax/x64.py",
        "import jax, jax.numpy as jnp\nprint(jnp.ones(2).dtype, jax.config.jax_enable_x64)\n",
    );
    let out = t.run(&[
        "--sandbox",
        "off",
        "--warm-start",
        "on",
        "--env",
        "JAX_ENABLE_X64=1",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("x64");
    assert_eq!(r["attempts"][0]["start"], "warm");
    let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    assert_eq!(
        stdout.trim(),
        "float64 True",
        "JAX_ENABLE_X64 was applied after the fork"
    );
}

#[test]
fn what_warm_start_cannot_honour_starts_cold_and_says_why() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    use std::os::unix::ffi::OsStrExt;
    let odd = t
        .dir
        .path()
        .join("m/jax")
        .join(std::ffi::OsStr::from_bytes(b"odd\xffname.py"));
    std::fs::copy(repo().join("fixtures/ok_jax.py"), &odd).unwrap();
    // Inside the sandbox as outside it.
    for sandbox in ["on", "off"] {
        let out = t.run(&["--sandbox", sandbox, "--warm-start", "on"]);
        assert_eq!(code(&out), 0, "{sandbox}: {}", stderr(&out));
        let r = t.result("odd_name");
        assert_eq!(r["attempts"][0]["start"], "cold", "{sandbox}: {r}");
        assert!(
            r["attempts"][0]["cold_start_reason"]
                .as_str()
                .unwrap()
                .contains("not UTF-8"),
            "{sandbox}: {r}"
        );
        assert_eq!(t.result("ok_plain")["attempts"][0]["start"], "warm");
    }
    let out = t.run(&["--sandbox", "on", "--warm-start", "off"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        t.result("ok_plain")["attempts"][0]["cold_start_reason"],
        "--warm-start off"
    );
}

/// Live samples are the script's memory, warm in every sandbox: the forked script's
/// tree, not the zygote's plumbing (a namespace init is left out, the script never).
/// A steady script's last samples sit within 10% of its final peak.
#[test]
fn live_samples_measure_the_warm_script_in_every_sandbox() {
    let t = Tree::new();
    t.write(
        "m/jax/steady.py",
        "import time\nimport numpy as np\na = np.ones(200 * 1024 * 1024 // 8)\na += 1\n\
         time.sleep(3)\nprint(a[0])\n",
    );
    // A root runner's sandbox user must pass through every folder on the way to the
    // interpreter when no view of its own bridges a closed one (`/root`, 0700).
    let closed = rustix::process::geteuid().is_root()
        && python()
            .ancestors()
            .skip(1)
            .any(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0));
    for sandbox in ["auto", "landlock", "off"] {
        let events = t.dir.path().join(format!("events-{sandbox}.ndjson"));
        let out = t.run(&["--sandbox", sandbox, "--events", events.to_str().unwrap()]);
        if sandbox == "landlock" && closed {
            assert_eq!(code(&out), 2, "{}", stderr(&out));
            assert!(stderr(&out).contains("cannot reach the interpreter's installation"));
            assert!(stderr(&out).contains("chmod o+x"), "{}", stderr(&out));
            continue;
        }
        assert_eq!(code(&out), 0, "{sandbox}: {}", stderr(&out));
        let r = t.result("steady");
        assert_eq!(r["attempts"][0]["start"], "warm", "{sandbox}: {r}");
        let peak = r["peak_memory_mb"].as_f64().unwrap();
        assert!(peak > 200.0, "{sandbox}: the peak misses the array: {peak}");
        let samples: Vec<f64> = std::fs::read_to_string(&events)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == "sample")
            .map(|e| e["rss_mb"].as_f64().unwrap())
            .collect();
        let last = *samples
            .last()
            .unwrap_or_else(|| panic!("{sandbox}: no samples"));
        assert!(
            (last - peak).abs() <= 0.1 * peak,
            "{sandbox}: live {last:.1} MiB against a peak of {peak:.1} MiB ({samples:?})"
        );
    }
}

/// After [`THIS_RUNS_ZYGOTES_PY`]: finds this run's zygotes (the run's, and the slot's
/// that forked it) and changes what they run with: nice 19, SCHED_IDLE, one CPU, and `RLIMIT_NOFILE`
/// lowered to 64 (the soft limit, or with `LOWER_HARD` the hard one too). Then leaves
/// a mark at `$ATTACKED`. Padded so that, with no history, it is the largest script
/// and runs first (longest expected first, by size).
const ATTACKER: &str = r#"import json, resource
zygotes = this_runs_zygotes()
nofile = resource.RLIMIT_NOFILE
for pid in zygotes:
    os.setpriority(os.PRIO_PROCESS, pid, 19)
    os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})
    hard = 64 if os.environ.get("LOWER_HARD") else resource.prlimit(pid, nofile)[1]
    resource.prlimit(pid, nofile, (64, hard))
open(os.environ["ATTACKED"], "w").close()
print(json.dumps({"zygotes": zygotes, "forked_by_one": os.getppid() in zygotes}))
"#;

/// What the script's process runs with, and whether the attacker ran before it.
const PROBE: &str = r#"import json, os, resource
print(json.dumps({
    "after_attack": os.path.exists(os.environ["ATTACKED"]),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "policy": os.sched_getscheduler(0),
    "cpus": sorted(os.sched_getaffinity(0)),
    "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
}))
"#;

fn stdout_json(r: &Value) -> Value {
    let path = r["stdout_log"].as_str().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

/// Writes the attacker (first by size) and the probe into `t`; returns the mark's path.
fn attacker_then_probe(t: &Tree) -> String {
    t.write(
        "m/jax/attacker.py",
        &format!("{THIS_RUNS_ZYGOTES_PY}{ATTACKER}{}\n", "#".repeat(4096)),
    );
    t.write("m/jax/probe.py", PROBE);
    t.dir.path().join("attacked").to_str().unwrap().to_string()
}

/// Issue 30, item 4: a script that reaches the zygote (nothing stops it unsandboxed)
/// changes nothing for the scripts after it: each warm child restores the run's nice
/// value, policy, affinity and limits, which a cold start of the same script shows;
/// what it cannot restore (an ordinary user's nice value) starts the script cold.
#[test]
fn a_script_that_changes_the_zygote_changes_nothing_for_the_next() {
    let t = Tree::new();
    let mark = attacker_then_probe(&t);
    let env = format!("ATTACKED={mark}");
    let common = ["--sandbox", "off", "--jobs", "1", "--env", env.as_str()];
    let out = t.run(&[&common[..], &["--warm-start", "off", "-k", "probe"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let cold = stdout_json(&t.result("probe"));
    assert_eq!(cold["after_attack"], false, "{cold}");
    // The attack would show: none of these is the runner's own.
    assert_ne!(cold["nice"], 19, "{cold}");
    assert_ne!(cold["policy"], 5, "SCHED_IDLE: {cold}");
    assert_ne!(cold["nofile"][0], 64, "{cold}");

    let out = t.run(&[&common[..], &["--warm-start", "on"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let attacker = t.result("attacker");
    assert_eq!(attacker["attempts"][0]["start"], "warm", "{attacker}");
    let seen = stdout_json(&attacker);
    // It reached the zygote that forks the next script: its slot's, which forked it,
    // or without slot zygotes the run's, which forks every script.
    assert!(
        seen["zygotes"].as_array().is_some_and(|z| !z.is_empty()),
        "{seen}"
    );
    if pids_cgroups() {
        assert_eq!(seen["forked_by_one"], true, "{seen}");
    }
    let probe = t.result("probe");
    // Root's child restores every setting and starts warm. An ordinary user's cannot
    // lower a nice value the attacker raised: it refuses, and the script starts cold
    // from the runner, saying why.
    let attempt = &probe["attempts"][0];
    if rustix::process::geteuid().is_root() || attempt["start"] != "cold" {
        assert_eq!(attempt["start"], "warm", "{probe}");
    } else {
        let why = attempt["cold_start_reason"].as_str().unwrap_or_default();
        assert!(why.contains("cannot restore the nice value"), "{probe}");
    }
    let mut warm = stdout_json(&probe);
    assert_eq!(warm["after_attack"], true, "the probe ran first: {warm}");
    warm["after_attack"] = false.into();
    assert_eq!(
        warm, cold,
        "the warm script started from the attacked zygote"
    );
}

/// A hard limit the child cannot raise back (an ordinary user's) refuses the warm
/// start: the script starts cold, says why, and runs with the run's own limits.
#[test]
fn a_limit_the_child_cannot_restore_starts_the_script_cold() {
    let account = user::Account::user();
    let t = account.tree();
    let mark = attacker_then_probe(&t);
    account.give(t.dir.path());
    let env = format!("ATTACKED={mark}");
    let run = |warm: &str, only: &[&str]| {
        let out = account
            .runner(&t)
            .args(["--sandbox", "off", "--jobs", "1", "--env", env.as_str()])
            .args(["--env", "LOWER_HARD=1", "--compilation-cache", "off"])
            .args(["--warm-start", warm])
            .args(only)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    };
    run("off", &["-k", "probe"]);
    let cold = stdout_json(&t.result("probe"));
    run("on", &[]);
    assert_eq!(t.result("attacker")["attempts"][0]["start"], "warm");
    let probe = t.result("probe");
    let first = &probe["attempts"][0];
    assert_eq!(first["start"], "cold", "{probe}");
    let reason = first["cold_start_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("RLIMIT_NOFILE"), "{reason}");
    let mut after = stdout_json(&probe);
    assert_eq!(after["after_attack"], true, "{after}");
    after["after_attack"] = false.into();
    assert_eq!(after, cold);
}

/// The binary needs nothing beside it: copied alone into an empty folder, it still
/// starts sandboxed scripts warm, with every layer of the sandbox, because it carries
/// the confinement library the zygote confines each script with and writes it into
/// its cache folder.
#[test]
fn a_binary_copied_alone_still_starts_sandboxed_scripts_warm() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let alone = tempfile::tempdir().unwrap();
    let bin = alone.path().join("jax-runner");
    std::fs::copy(assert_cmd::cargo::cargo_bin("jax-runner"), &bin).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&bin)
        .arg("--output-dir")
        .arg(t.dir.path())
        .arg("--python")
        .arg(python())
        .args(["--compilation-cache", "off", "--device", "cpu"])
        .env("JAX_RUNNER_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("start cold"), "{}", stderr(&out));
    let r = t.result("ok_plain");
    assert_eq!(r["attempts"][0]["start"], "warm", "{r}");
    assert!(
        !r["sandbox"]["layers"].as_array().unwrap().is_empty(),
        "{r}"
    );
    let written: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("libjax_runner_confine-") && n.ends_with(".so"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(std::fs::read_dir(alone.path()).unwrap().count() == 1);
}

/// Prints, for a script that lowers LOWERINGS computations of its own: whether the
/// zygote made the main thread's shared MLIR context ahead, whether every lowering
/// went into that one, how many lowerings the context now in use holds (-1: the
/// zygote shares none), whether a thread's lowering got a context of its own, and
/// what had the zygote make it (the runner's announcement while it imported, or its
/// first request; None: nothing).
const SHARE_PROBE: &str = r#"
import threading
import jax
from jax._src.interpreters import mlir
made = getattr(mlir.make_ir_context, "__globals__", {})
shared = made.get("IR_SHARED")
ahead = None if shared is None else getattr(shared, "context", None)
for k in range(LOWERINGS):
    jax.jit(lambda x, k=k: x * 2 + k)(3.0).block_until_ready()
mine = None if shared is None else shared.context
theirs = []
def other():
    jax.jit(lambda x: x - 1)(2.0).block_until_ready()
    theirs.append(getattr(shared, "context", None))
worker = threading.Thread(target=other)
worker.start()
worker.join()
print(ahead is not None, ahead is not None and mine is ahead,
      -1 if shared is None else shared.lowerings,
      theirs[0] is not None and theirs[0] is not mine, made.get("IR_MADE_BY"))
"#;

/// Each probe's printed words, by script id, each started warm.
fn share_words(t: &Tree, ids: &[&str], what: &str) -> Vec<String> {
    ids.iter()
        .map(|id| {
            let r = t.result(id);
            assert_eq!(r["attempts"][0]["start"], "warm", "{what} {id}: {r}");
            let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
            stdout.trim().to_string()
        })
        .collect()
}

/// Issue 34: a warm script's lowerings share one MLIR context per thread, in every
/// sandbox mode: the main thread's is made by the zygote (once, before its first fork,
/// on the runner's word while it imported) for a run of more scripts than slots, and
/// each script's first lowering makes it otherwise; the 65th lowering gets a fresh one
/// (`IR_SHARE_LIMIT`), and another thread never builds into the main thread's. The
/// exactness tests (`exact.rs`) hold the results and the cache's keys to a cold run's.
#[test]
fn a_warm_scripts_lowerings_share_a_context_per_thread() {
    let ids = ["lowers1", "lowers5", "lowers65"];
    for sandbox in ["off", "auto"] {
        let t = Tree::new();
        for id in ids {
            let k = id.trim_start_matches("lowers");
            t.write(
                &format!("m/jax/{id}.py"),
                &SHARE_PROBE.replace("LOWERINGS", k),
            );
        }
        // Each run's log says whether its zygote made the context ahead.
        let logged = || {
            let log = std::fs::read_to_string(t.results_dir().join("execution_log.txt")).unwrap();
            let (_, rest) = log
                .split_once("the zygote makes ")
                .unwrap_or_else(|| panic!("{sandbox}: the log does not say: {log}"));
            rest.split(' ').next().unwrap().to_string()
        };
        let run = |jobs: &str| {
            let out = t.run(&["--sandbox", sandbox, "--warm-start", "on", "--jobs", jobs]);
            assert_eq!(code(&out), 0, "{sandbox} {jobs}: {}", stderr(&out));
        };
        // Three scripts one at a time: made ahead, every lowering into it up to the
        // limit, by the run's zygote on the runner's word or, where the runner gives
        // its slots homes of their own (a pids cgroup it may make), by the slot's
        // zygote as it began. Three at a time: each starts at once and makes its own
        // at its first.
        let maker = match jax_runner::runner::limits::slot_homes_possible() {
            true => "slot",
            false => "announcement",
        };
        for (jobs, made, expected) in [
            (
                "1",
                "the",
                [
                    "True True 1 True MAKER",
                    "True True 5 True MAKER",
                    "True False 1 True MAKER",
                ],
            ),
            (
                "3",
                "no",
                [
                    "False False 1 True None",
                    "False False 5 True None",
                    "False False 1 True None",
                ],
            ),
        ] {
            run(jobs);
            assert_eq!(logged(), made, "{sandbox} {jobs}");
            let expected = expected.map(|e| e.replace("MAKER", maker));
            assert_eq!(share_words(&t, &ids, sandbox), expected, "{sandbox} {jobs}");
        }
    }
}

/// Prints, from a script's first lines: whether jax's MLIR builtin dialect module was
/// imported before it, how many patterns jax's frame filter holds compiled, whether
/// the run's zygote had imported the mhlo dialect's module with jax (its `PRELOADED`,
/// taken before it forked any slot; False where no zygote shares contexts), and, after
/// the script lowers a computation and registers a path of its own with that filter,
/// whether its own file still counts as the user's and the registered one no longer.
const FIRST_LOWERING_PROBE: &str = r#"
import os, sys
before = "jaxlib.mlir.dialects.builtin" in sys.modules
from jax._src import source_info_util as info
compiled = info._exclude_path_regex.cache_info().currsize
from jax._src.interpreters import mlir
zygote = getattr(mlir.make_ir_context, "__globals__", {})
mhlo = "jaxlib.mlir.dialects.mhlo" in zygote.get("PRELOADED", ())
import jax
jax.jit(lambda x: x * 2 + 1)(3.0).block_until_ready()
theirs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendored") + os.sep
info.register_exclusion(theirs)
print(before, compiled, mhlo, info.is_user_filename(os.path.abspath(__file__)),
      info.is_user_filename(theirs + "lib.py"))
"#;

/// What script `id` printed (trimmed), once its record says it started as
/// `--warm-start warm` asked (`on`: warm; `off`: cold).
fn printed_after_start(t: &Tree, id: &str, warm: &str, what: &str) -> String {
    let r = t.result(id);
    let start = if warm == "on" { "warm" } else { "cold" };
    assert_eq!(r["attempts"][0]["start"], start, "{what}: {r}");
    let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    stdout.trim().to_string()
}

/// Issue 34: what every script's first lowering did for itself (import the builtin
/// dialect's module, compile the frame filter's patterns) a warm script finds done by
/// the zygote, in every sandbox mode, and the first MLIR context's import (mhlo's)
/// done once by the run's zygote, not by each slot's; a cold one does it itself.
/// Either way the filter still tells the script's own file from a path it registers
/// afterwards.
#[test]
fn a_warm_script_finds_its_first_lowerings_work_done() {
    for (sandbox, warm, expected) in [
        ("off", "on", "True 1 True True False"),
        ("auto", "on", "True 1 True True False"),
        ("off", "off", "False 0 False True False"),
    ] {
        let t = Tree::new();
        t.write("m/jax/first.py", FIRST_LOWERING_PROBE);
        let out = t.run(&["--sandbox", sandbox, "--warm-start", warm]);
        assert_eq!(code(&out), 0, "{sandbox} {warm}: {}", stderr(&out));
        let stdout = printed_after_start(&t, "first", warm, &format!("{sandbox} {warm}"));
        assert_eq!(stdout, expected, "{sandbox} {warm}");
    }
}

/// A script whose source never names jax (it builds the name): whether jax was
/// imported before its first line, whether the zygote made the shared MLIR context
/// ahead (-1: the zygote shares none), and a computation, so the script does take jax
/// up itself.
const LEAN_PROBE: &str = r#"
import sys
name = "j" + "ax"
preloaded = name in sys.modules
mlir = __import__(name + "._src.interpreters.mlir", fromlist=["mlir"])
shared = getattr(mlir.make_ir_context, "__globals__", {}).get("IR_SHARED")
ahead = -1 if shared is None else getattr(shared, "context", None) is not None
jnp = __import__(name + ".numpy", fromlist=["numpy"])
print(preloaded, ahead, int(jnp.add(2, 3)))
"#;

/// Issue 34: when no script of the run names jax, a lean zygote (no preload, no
/// contexts made ahead) starts them warm, in every sandbox mode: a script that takes
/// jax up anyway imports it itself, as a cold start would, and its record says so.
/// The same script beside one that names jax gets the zygote that imported it.
#[test]
fn a_run_whose_scripts_never_name_jax_gets_a_lean_zygote() {
    for sandbox in ["off", "auto"] {
        for (named, expected) in [(false, "False -1 5"), (true, "True True 5")] {
            let t = Tree::new();
            t.write("m/jax/unnamed.py", LEAN_PROBE);
            if named {
                t.write("m/jax/names.py", "import jax\n");
            }
            // One at a time: the context made ahead repays its wait (`app/ahead.rs`).
            let out = t.run(&["--sandbox", sandbox, "--warm-start", "on", "--jobs", "1"]);
            assert_eq!(code(&out), 0, "{sandbox} {named}: {}", stderr(&out));
            let r = t.result("unnamed");
            assert_eq!(r["attempts"][0]["start"], "warm", "{sandbox} {named}: {r}");
            assert_eq!(r["jax"]["jax_imported"], true, "{sandbox} {named}: {r}");
            let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
            assert_eq!(stdout.trim(), expected, "{sandbox} {named}");
        }
    }
}

/// Prints whether the interpreter's arena allocator is jax-runner's keeper of
/// frame-stack chunks (found by the library its function lies in), and how many
/// freed chunks the keeper holds after a recursion ~30 chunks deep returned (-1: no
/// keeper).
const KEEPER_PROBE: &str = r#"
import ctypes, sys
class Arena(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]
class Found(ctypes.Structure):
    _fields_ = [("file", ctypes.c_char_p), ("base", ctypes.c_void_p),
                ("symbol", ctypes.c_char_p), ("address", ctypes.c_void_p)]
now = Arena()
ctypes.pythonapi.PyObject_GetArenaAllocator(ctypes.byref(now))
found = Found()
ctypes.CDLL(None).dladdr(ctypes.c_void_p(now.alloc), ctypes.byref(found))
path = (found.file or b"").decode()
ours = "libjax_runner_confine" in path
def down(n):
    return 0 if n == 0 else 1 + down(n - 1)
sys.setrecursionlimit(20000)
assert down(5000) == 5000
print(ours, ctypes.CDLL(path).jax_runner_kept_frame_chunks() if ours else -1)
"#;

/// What the keeper probe prints, run as `account` (bwrap on `PATH` or not) with each
/// sandbox and start: the keeper in every mode a warm script runs in, the
/// interpreter's own allocator for a cold one.
fn a_warm_script_keeps_chunks_as(account: common::user::Account, bwrap: bool) {
    for (sandbox, warm, expected) in [
        ("off", "on", "True 8"),
        ("auto", "on", "True 8"),
        ("off", "off", "False -1"),
    ] {
        let what = format!(
            "{} bwrap={bwrap} --sandbox {sandbox} --warm-start {warm}",
            account.who.name()
        );
        let tree = account.tree();
        tree.write("m/jax/keeper.py", KEEPER_PROBE);
        account.give(&tree.root());
        let mut cmd = account.runner(&tree);
        if !bwrap {
            cmd.env("PATH", "/nonexistent");
        }
        let out = cmd
            .args(["--sandbox", sandbox, "--warm-start", warm])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{what}: {}", stderr(&out));
        let stdout = printed_after_start(&tree, "keeper", warm, &what);
        assert_eq!(stdout, expected, "{what}");
    }
}

/// Issue 34: a warm script runs with jax-runner's keeper of CPython's frame-stack
/// chunks as its interpreter's arena allocator, in every sandbox mode, so a call on a
/// chunk's edge reuses a freed chunk instead of mapping and unmapping one each time;
/// it keeps at most eight (`arena.rs`, whose unit tests hold the rest). A cold script
/// runs on the interpreter's own allocator. As root and as an ordinary user, with
/// bwrap and without (the library comes from the user's own cache folder, and inside
/// the sandbox from its view). The exactness tests (`exact.rs`) hold every
/// simulation value to a sequential run's.
#[test]
fn as_root_a_warm_script_keeps_its_freed_frame_chunks() {
    for bwrap in [true, false] {
        if let Some(root) = common::user::Account::root("the keeper, as root") {
            a_warm_script_keeps_chunks_as(root, bwrap);
        }
    }
}

#[test]
fn as_user_a_warm_script_keeps_its_freed_frame_chunks() {
    for bwrap in [true, false] {
        a_warm_script_keeps_chunks_as(common::user::Account::user(), bwrap);
    }
}
