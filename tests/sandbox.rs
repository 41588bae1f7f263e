//! The bubblewrap sandbox against hostile scripts, and the limits with and without it.
//! `.ci/run` installs bubblewrap, so these run for real in CI.

mod common;

use std::io::Read;
use std::net::TcpListener;

use common::*;
use serde_json::Value;

fn data_dir(r: &Value) -> std::path::PathBuf {
    std::path::PathBuf::from(r["data_dir"].as_str().unwrap())
}

#[test]
fn a_hostile_script_is_contained_and_its_result_is_complete() {
    if !prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), "a hostile script") {
        return;
    }
    let t = Tree::outside_tmp();
    t.fixture("hostile.py", "model/jax/hostile.py");
    let home = t.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("secret.txt"), "the user's secret").unwrap();
    // Loopback only; the sandbox has its own network namespace, so nothing arrives.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let token = format!("{}", std::process::id());
    let out = t
        .cmd()
        .env("HOME", &home)
        .env("AWS_SECRET_ACCESS_KEY", "not-for-scripts")
        .args([
            "--sandbox",
            "on",
            "--env",
            &format!("TEST_PORT={port}"),
            "--env",
        ])
        .arg(format!("TEST_TOKEN={token}"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("hostile");
    assert_eq!(r["sandbox"]["kind"], "bwrap");
    assert_eq!(r["sandbox"]["network"], false);
    assert_eq!(r["sandbox"]["environment"], "allowlist");
    let report = read_json(&data_dir(&r).join("hostile.json"));
    for attack in [
        "write_outside_script_folder",
        "read_home_secret",
        "connect_loopback_listener",
    ] {
        assert!(
            report[attack].as_str().unwrap().starts_with("blocked"),
            "{attack}: {report}"
        );
    }
    assert_eq!(
        report["aws_key_visible"], false,
        "secrets stay out of the allowlist"
    );
    assert!(!t
        .root()
        .join("model")
        .join(format!("escaped-{token}.txt"))
        .exists());
    // Inside, /tmp is private: the write may succeed there, never on the host.
    let host_tmp = std::path::PathBuf::from(format!("/tmp/jax-runner-escape-{token}.txt"));
    assert!(!host_tmp.exists(), "the script's /tmp is private");
    let mut buf = [0u8; 64];
    let accepted = listener
        .accept()
        .map(|(mut s, _)| s.read(&mut buf).unwrap_or(0));
    assert!(accepted.is_err(), "the loopback listener got a connection");
    let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    assert!(log.contains("hostile done"), "the log is complete: {log}");
}

#[test]
fn unsandboxed_the_same_script_gets_out_which_is_why_the_sandbox_exists() {
    let t = Tree::outside_tmp();
    t.fixture("hostile.py", "model/jax/hostile.py");
    let token = format!("off-{}", std::process::id());
    let out = t.run(&["--sandbox", "off", "--env", &format!("TEST_TOKEN={token}")]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("hostile");
    assert_eq!(r["sandbox"]["kind"], "none");
    assert_eq!(r["sandbox"]["reason"], "--sandbox off");
    let escaped = t.root().join("model").join(format!("escaped-{token}.txt"));
    assert!(escaped.exists(), "without the sandbox the write lands");
    let _ = std::fs::remove_file(format!("/tmp/jax-runner-escape-{token}.txt"));
}

#[test]
fn memory_past_the_limit_is_killed_with_and_without_the_sandbox() {
    for sandbox in ["on", "off"] {
        let t = Tree::new();
        t.fixture("memory_grow.py", "m/jax/grow.py");
        let out = t.run(&[
            "--sandbox",
            sandbox,
            "--memory-limit",
            "1G",
            "--env",
            "GROW_LIMIT_MB=3000",
            "--retries",
            "0",
        ]);
        assert_eq!(code(&out), 1, "{sandbox}: {}", stderr(&out));
        let r = t.result("grow");
        assert_eq!(r["class"], "out_of_memory", "{sandbox}: {r}");
        assert!(r["matched_line"]
            .as_str()
            .unwrap()
            .contains("--memory-limit"));
        assert_eq!(r["sandbox"]["memory_limit_mb"], 1024.0);
        let peak = r["peak_memory_mb"].as_f64().unwrap();
        match r["sandbox"]["memory_limit_enforced_by"].as_str() {
            // The kernel holds the cgroup to the limit. The sampled tree RSS also counts
            // shared library pages charged elsewhere, hence the margin; far below the
            // 3000 MB the script asks for.
            Some("cgroup") => assert!(peak < 1280.0, "{sandbox}: peak {peak}"),
            // The watchdog kills within a sample of crossing it.
            Some("watchdog") => {
                assert!((1024.0..2500.0).contains(&peak), "{sandbox}: peak {peak}")
            }
            other => panic!("{sandbox}: enforced by {other:?}"),
        }
        let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
        assert!(
            log.contains("holding"),
            "{sandbox}: the log kept what was printed"
        );
    }
}

#[test]
fn a_fork_bomb_is_contained_by_max_procs() {
    let t = Tree::new();
    t.fixture("fork_bomb.py", "m/jax/bomb.py");
    let out = t.run(&["--sandbox", "on", "--max-procs", "32", "--timeout", "60s"]);
    let r = t.result("bomb");
    assert_eq!(r["sandbox"]["max_procs"], 32);
    match r["sandbox"]["max_procs_enforced_by"].as_str().unwrap() {
        "cgroup" => {
            assert_eq!(code(&out), 0, "{}", stderr(&out));
            assert!(
                r["attempts"][0]["refused_forks"].as_u64().unwrap() > 0,
                "{r}"
            );
            let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
            assert!(log.contains("fork bomb done"), "{log}");
        }
        _ => assert_eq!(
            r["class"], "killed_by_signal",
            "the watchdog stopped it: {r}"
        ),
    }
    assert!(processes_under(&t.root()).is_empty());
}

/// Without `--max-procs` a script still has a process limit, the default (64 a core, at
/// least 4,096), recorded in its result, and it counts threads as well as processes.
/// A script that starts threads until one is refused meets it: where a cgroup enforces
/// it, within the few tasks the sandbox's own processes take, with a reason that says
/// how to raise it, and the same script with a higher `--max-procs` gets past it;
/// where the watchdog does, the script is killed and its reason says by what.
#[test]
fn a_script_has_a_process_limit_by_default() {
    for sandbox in ["on", "off"] {
        for warm in ["on", "off"] {
            let case = format!("--sandbox {sandbox} --warm-start {warm}");
            let t = Tree::new();
            t.fixture("thread_bomb.py", "m/jax/bomb.py");
            let base = [
                "--sandbox",
                sandbox,
                "--warm-start",
                warm,
                "--timeout",
                "120s",
            ];
            let out = t.run(&base);
            assert_eq!(code(&out), 1, "{case}: {}", stderr(&out));
            let r = t.result("bomb");
            let limit = r["sandbox"]["max_procs"]
                .as_u64()
                .expect("a limit is recorded");
            let cores = std::thread::available_parallelism().unwrap().get() as u64;
            assert_eq!(limit, (64 * cores).max(4096), "{case}: {r}");
            let reason = r["reason"].as_str().unwrap();
            match r["sandbox"]["max_procs_enforced_by"].as_str() {
                Some("cgroup") => {
                    let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
                    let started: u64 = log
                        .lines()
                        .find_map(|l| l.strip_prefix("threads started: "))
                        .unwrap_or_else(|| panic!("{case}: {log}"))
                        .parse()
                        .unwrap();
                    // The main thread, and bwrap's own two processes where it runs.
                    assert!(
                        started < limit && started + 8 >= limit,
                        "{case}: {started} threads under a limit of {limit}"
                    );
                    assert!(
                        r["attempts"][0]["refused_forks"].as_u64().unwrap() > 0,
                        "{r}"
                    );
                    assert!(
                        reason.contains(&format!("past its limit of {limit}"))
                            && reason.contains("--max-procs N"),
                        "{case}: {reason}"
                    );
                    let higher = (limit + 64).to_string();
                    let ceiling = format!("THREAD_BOMB_MAX={}", limit + 16);
                    let t2 = Tree::new();
                    t2.fixture("thread_bomb.py", "m/jax/bomb.py");
                    let mut more = base.to_vec();
                    more.extend(["--max-procs", &higher, "--env", &ceiling]);
                    let out = t2.run(&more);
                    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
                }
                Some("watchdog") => {
                    assert_eq!(r["class"], "killed_by_signal", "{case}: {r}");
                    assert!(
                        reason.starts_with("killed by SIGKILL")
                            && reason.contains(&format!("past its limit of {limit}"))
                            && reason.contains("--max-procs N"),
                        "{case}: {reason}"
                    );
                    assert!(
                        (r["attempts"][0]["matched_line"]
                            .as_str()
                            .unwrap_or_default())
                        .contains("--max-procs watchdog"),
                        "{case}: {r}"
                    );
                }
                other => panic!("{case}: enforced by {other:?}: {r}"),
            }
            assert!(processes_under(&t.root()).is_empty(), "{case}");
        }
    }
}

#[test]
fn inside_the_sandbox_a_detached_grandchild_dies_with_the_namespace() {
    let t = Tree::new();
    t.fixture("grandchild.py", "m/jax/grandchild.py");
    let out = t.run(&["--sandbox", "on"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("grandchild");
    // The grandchild may still be dying with the namespace when the runner looks (then
    // it is listed, truthfully); bwrap's own init is never a leak of the script's.
    for leak in r["leaks"].as_array().unwrap() {
        assert!(
            !leak["command"].as_str().unwrap().contains("bwrap"),
            "{leak}"
        );
    }
    assert!(processes_mentioning("import time; time.sleep(600)").is_empty());
}

#[test]
fn env_and_env_pass_reach_sandboxed_scripts() {
    let t = Tree::new();
    t.fixture("print_env.py", "m/jax/print_env.py");
    let out = t
        .cmd()
        .env("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
        .args([
            "--sandbox",
            "on",
            "--env",
            "CUDA_VISIBLE_DEVICES=7",
            "--env-pass",
            "XLA_FLAGS",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let env = read_json(&data_dir(&t.result("print_env")).join("env.json"));
    assert_eq!(
        env["CUDA_VISIBLE_DEVICES"], "7",
        "--env wins over the runner's own value"
    );
    assert_eq!(env["cwd"], t.root().join("m/jax").to_str().unwrap());
}

/// A tree of one plain script run with `--sandbox MODE` where bwrap cannot be found.
fn one_script_without_bwrap(mode: &str) -> (Tree, std::process::Output) {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = t
        .cmd()
        .env("PATH", "/nonexistent")
        .args(["--sandbox", mode])
        .output()
        .unwrap();
    (t, out)
}

/// Without bwrap, `--sandbox on` still has the built-in layer (Landlock and the
/// seccomp filter), so it runs: as root with the sandbox uid and namespaces of its own
/// (it never hands a script the host's uid 0), as an ordinary user under the user's
/// own uid with no uid switch, told once before the run what bwrap would add and how
/// to install it. It exits 2 only where the seccomp filter alone would stand: an
/// ordinary user on a kernel without Landlock (`Sandboxing::holds_files` holds the
/// rule's boundaries; this machine's kernel has Landlock).
#[test]
fn sandbox_on_without_bwrap_runs_in_the_builtin_layer() {
    let (t, out) = one_script_without_bwrap("on");
    let root = rustix::process::geteuid().is_root();
    if !root && jax_runner::sandbox::landlock::abi().is_none() {
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("apt-get install bubblewrap"),
            "{}",
            stderr(&out)
        );
        return;
    }
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = t.result("ok_plain");
    let sandbox = &r["sandbox"];
    assert_eq!(sandbox["kind"], "builtin", "{r}");
    let layers: Vec<&str> = sandbox["layers"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(layers.iter().any(|l| l.starts_with("landlock-v")), "{r}");
    assert!(layers.contains(&"seccomp"), "{r}");
    assert!(!layers.contains(&"bwrap"), "{r}");
    // The uid switch is a root runner's only: a user's scripts keep the user's uid.
    assert_eq!(layers.contains(&"uid"), root, "{r}");
    if root {
        let uid = sandbox["uid"].as_u64().unwrap();
        assert!(uid != 0, "{r}");
    } else {
        // Without namespaces of its own a user's run is told what bwrap would add.
        assert!(
            stderr(&out).contains("apt-get install bubblewrap"),
            "what is missing is said, with the install command: {}",
            stderr(&out)
        );
    }
}

/// `--sandbox bwrap` insists: without bubblewrap the run is a usage error (exit 2)
/// that names the install command, and no script runs.
#[test]
fn sandbox_bwrap_without_bwrap_is_exit_2_and_runs_nothing() {
    let (t, out) = one_script_without_bwrap("bwrap");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("apt-get install bubblewrap"),
        "{}",
        stderr(&out)
    );
    assert!(
        !t.results_dir().join("ok_plain_results.json").exists(),
        "a script ran"
    );
}

/// The seccomp filter does not live on disk: with a cache folder nobody can write (its
/// path runs through a file, so not even root can), a sandboxed script still runs
/// under it. `setxattr` stands for the calls only the filter refuses: no other layer
/// holds a file's extended attributes. The run says what the folder costs (the
/// warm start's library, the telemetry shim), each with what to do, and not that
/// the filter is off.
#[test]
fn an_unwritable_cache_folder_leaves_the_filter_in_force() {
    let t = Tree::new();
    t.write(
        "m/jax/xattr.py",
        "import errno, os\n\
         path = os.path.join(os.environ['GNN_OUTPUT_DIR'], 'tagged')\n\
         open(path, 'w').close()\n\
         try:\n    os.setxattr(path, 'user.jax_runner_test', b'1')\n    print('setxattr: allowed')\n\
         except OSError as e:\n    print('setxattr:', errno.errorcode[e.errno])\n",
    );
    let blocker = tempfile::NamedTempFile::new().unwrap();
    let out = t
        .cmd()
        .env("JAX_RUNNER_CACHE_DIR", blocker.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stderr(&out);
    assert!(!said.contains("seccomp filter disabled"), "{said}");
    // What the folder does cost is said, each time with what to do about it.
    // (The harness turns the compilation cache off.)
    for what in ["warm start is off", "device telemetry disabled"] {
        let line = said.lines().find(|l| l.contains(what)).unwrap_or_default();
        assert!(
            line.contains("set JAX_RUNNER_CACHE_DIR to a folder you can write"),
            "{what}: {said}"
        );
    }
    let r = t.result("xattr");
    let layers = r["sandbox"]["layers"].as_array().unwrap();
    assert!(layers.iter().any(|l| l == "seccomp"), "{r}");
    let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    assert_eq!(stdout.trim(), "setxattr: EPERM", "{r}");
}

/// What a script can do to its sandbox as root (CI and containers run the runner as
/// root): nothing. With default options (warm start inside the sandbox), so the
/// sandbox users get is the one tested, and again started cold.
#[test]
fn no_capabilities_even_when_the_runner_is_root() {
    let case = "no capabilities under bwrap";
    if !prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), case) {
        return;
    }
    for warm in ["auto", "off"] {
        let t = Tree::outside_tmp();
        t.fixture("root_escape.py", "attacker/jax/root_escape.py");
        let victim = t.fixture("ok_plain.py", "victim/jax/victim.py");
        let before = std::fs::read(&victim).unwrap();
        let results = t.results_dir();
        let mut cmd = t.cmd();
        if warm == "off" {
            cmd.args(["--warm-start", "off"]);
        }
        let out = cmd
            .arg("--env")
            .arg(format!("TEST_RESULTS={}", results.display()))
            .arg("--env")
            .arg(format!("TEST_VICTIM={}", victim.display()))
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let r = t.result("root_escape");
        assert_eq!(
            r["sandbox"]["kind"], "bwrap",
            "the default run is sandboxed"
        );
        let attempt = &r["attempts"][0];
        if warm == "auto" {
            assert_eq!(attempt["start"], "warm", "warm inside the sandbox: {r}");
        } else {
            assert_eq!(attempt["start"], "cold");
            assert_eq!(attempt["cold_start_reason"], "--warm-start off", "{r}");
        }
        let report = read_json(&data_dir(&r).join("escape.json"));
        for attack in [
            "umount_home",
            "remount_root_rw",
            "new_mount_namespace",
            "new_user_namespace",
            "join_another_cgroup",
            "list_host_interfaces",
            "overwrite_results",
            "write_other_data_folder",
            "delete_logs",
            "rewrite_victim_source",
            "read_victim_source",
            "delete_victim_source",
            "rewrite_own_source",
            "read_run_log",
            "list_other_data_folders",
        ] {
            assert!(
                report[attack].as_str().unwrap().starts_with("blocked"),
                "{warm}: {attack}: {report}"
            );
        }
        // The script's own view and the runner's agree: no capability at all.
        assert_eq!(report["cap_eff"], "0000000000000000", "{report}");
        if let Some(caps) = r["sandbox"]["capabilities"].as_str() {
            assert_eq!(caps, "0000000000000000");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), before);
        assert!(!results.join("data/victim/planted.txt").exists());
        assert_eq!(t.result("victim")["status"], "succeeded");
        assert!(results.join("execution_log.txt").is_file());
    }
}

/// A spike between two samples: the kernel stops it where it can hold the attempt's
/// cgroup, and the result says which enforced the limit.
#[test]
fn a_memory_spike_is_stopped_and_the_result_says_by_whom() {
    let t = Tree::new();
    t.write(
        "m/jax/spike.py",
        "import jax\nb = bytearray(b'\\x01') * (1500 * 1024 * 1024)\nprint('survived', len(b))\n",
    );
    let out = t.run(&["--memory-limit", "400M", "--retries", "0"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = t.result("spike");
    assert_eq!(r["class"], "out_of_memory", "{r}");
    let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
    let by = r["sandbox"]["memory_limit_enforced_by"].as_str().unwrap();
    if by == "cgroup" {
        assert!(!log.contains("survived"), "the kernel stopped the spike");
        assert!(
            r["matched_line"].as_str().unwrap().contains("kernel"),
            "{r}"
        );
    } else {
        assert_eq!(by, "watchdog");
    }
}
