//! Issue 34: each worker slot has a zygote of its own living in the slot's cgroup, so a
//! warm script is forked where it is counted, with no move between cgroups per script.
//! The boundary: every warm script of a slot is in that slot's cgroup from its first
//! line, the slot's zygote is neither a leftover nor part of any script's budget, and
//! `--max-procs` gives a warm script exactly what it gives a cold one.

mod common;

use common::*;

/// Prints the script's pids cgroup (v1's `pids` line, or v2's single line), then
/// lives long enough for the runner to sample it.
const CGROUP: &str = r#"
import time
time.sleep(0.5)
for line in open("/proc/self/cgroup"):
    parts = line.strip().split(":", 2)
    if "pids" in parts[1].split(",") or parts[1] == "":
        print(parts[2])
        break
"#;

/// Forks children that wait until the script ends, until a fork is refused or
/// `want` succeeded; prints how many succeeded.
const FORKS: &str = r#"
import os, sys, time
want = int(os.environ["WANT"])
r, w = os.pipe()
made = 0
for _ in range(want):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    made += 1
print(made)
sys.stdout.flush()
os.close(w)
for _ in range(made):
    os.wait()
"#;

fn stdout_of(t: &Tree, id: &str) -> String {
    let r = t.result(id);
    std::fs::read_to_string(r["stdout_log"].as_str().unwrap())
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn warm_scripts_of_a_slot_start_in_its_cgroup_and_it_is_no_leftover() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here");
        return;
    }
    for sandbox in ["off", "auto"] {
        let t = Tree::new();
        for n in 1..=3 {
            t.write(&format!("m/jax/c{n}.py"), CGROUP);
        }
        let out = t.run(&["--sandbox", sandbox, "--jobs", "1"]);
        assert_eq!(code(&out), 0, "{sandbox}: {}", stderr(&out));
        let paths: Vec<String> = (1..=3)
            .map(|n| {
                let id = format!("c{n}");
                let r = t.result(&id);
                assert_eq!(r["attempts"][0]["start"], "warm", "{sandbox}: {r}");
                assert_eq!(r["leaks"].as_array().map(Vec::len), Some(0), "{r}");
                // The runner watched the script's own process (the PID it was given
                // is the host's, not the slot's PID namespace's).
                assert_eq!(r["memory_source"], "pss", "{sandbox}: {r}");
                let cpu = r["attempts"][0]["cpu_system_s"].as_f64().unwrap();
                assert!(cpu < 5.0, "{sandbox}: {r}");
                stdout_of(&t, &id)
            })
            .collect();
        // One slot, one cgroup for all three: none was moved into one of its own.
        assert!(
            paths
                .iter()
                .all(|p| p == &paths[0] && p.ends_with("-slot0")),
            "{sandbox}: {paths:?}"
        );
        // The slot's cgroup goes with the run.
        let name = paths[0].rsplit('/').next().unwrap().to_string();
        let left = std::fs::read_dir("/sys/fs/cgroup/pids")
            .or_else(|_| std::fs::read_dir("/sys/fs/cgroup"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy() == name);
        assert!(!left, "{sandbox}: {name} is still there");
    }
}

#[test]
fn max_procs_gives_a_warm_script_what_it_gives_a_cold_one() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here");
        return;
    }
    let t = Tree::new();
    t.write("m/jax/forks.py", FORKS);
    let mut made = Vec::new();
    for warm in ["off", "on"] {
        let out = t.run(&[
            "--sandbox",
            "off",
            "--max-procs",
            "4",
            "--env",
            "WANT=10",
            "--warm-start",
            warm,
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let r = t.result("forks");
        let start = if warm == "on" { "warm" } else { "cold" };
        assert_eq!(r["attempts"][0]["start"], start, "{r}");
        assert_eq!(r["sandbox"]["max_procs_enforced_by"], "cgroup", "{r}");
        assert!(r["attempts"][0]["refused_forks"].as_u64() > Some(0), "{r}");
        made.push(stdout_of(&t, "forks"));
    }
    // The script and three children: four processes, the slot's zygote not counted.
    assert_eq!(made, ["3", "3"]);
}

/// Prints the PID of the process that forked it (its slot's zygote), then kills it
/// (nothing stops that unsandboxed), which ends the script too: it dies with its
/// parent, as it would with the runner. A parent that is no zygote (the runner, were
/// the script started cold) is left alone. First by size, so it runs first.
const KILLS_ITS_PARENT: &str = r#"
import os, signal, sys, time
parent = os.getppid()
with open("/proc/%d/cmdline" % parent, "rb") as fh:
    zygote = fh.read().split(b"\0")[1:2] == [b"-c"]
print(parent, zygote)
sys.stdout.flush()
if zygote:
    os.kill(parent, signal.SIGKILL)
time.sleep(30)
"#;

/// Prints the PID of the process that forked it.
const PARENT: &str = "import os\nprint(os.getppid())\n";

#[test]
fn a_script_that_kills_its_slots_zygote_costs_the_next_one_nothing() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here, so no slot zygotes");
        return;
    }
    let t = Tree::new();
    t.write(
        "m/jax/a_killer.py",
        &format!("{KILLS_ITS_PARENT}{}\n", "#".repeat(4096)),
    );
    t.write("m/jax/b_next.py", PARENT);
    let out = t.run(&["--sandbox", "off", "--jobs", "1", "--retries", "0"]);
    let killer = t.result("a_killer");
    assert_eq!(killer["attempts"][0]["start"], "warm", "{killer}");
    assert_eq!(killer["signal_name"], "SIGKILL", "{killer}");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let next = t.result("b_next");
    assert_eq!(next["status"], "succeeded", "{next}");
    assert_eq!(next["attempts"][0]["start"], "warm", "{next}");
    // The killer ran once, forked by a zygote; a new slot zygote forked the second
    // script, well before the killer's sleep.
    let (killed, parent) = (stdout_of(&t, "a_killer"), stdout_of(&t, "b_next"));
    assert_eq!(killed.lines().count(), 1, "{killed}");
    let (killed, zygote) = killed.split_once(' ').unwrap();
    assert_eq!(zygote, "True", "its parent was no zygote");
    assert_ne!(killed, parent);
    assert!(killer["execution_time_s"].as_f64() < Some(20.0), "{killer}");
}

/// After [`THIS_RUNS_ZYGOTES_PY`]: prints a line, then kills every zygote of its run
/// (the run's and its slot's; nothing stops that unsandboxed), which may end it too
/// (it dies with its parent).
const KILLS_EVERY_ZYGOTE: &str = r#"
import signal, sys
print("ran")
sys.stdout.flush()
for pid in this_runs_zygotes():
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"#;

/// The class behind the killer above: a warm script never starts before the runner
/// has its PID. Were it to, a zygote it killed would leave the runner with no answer,
/// and the runner would start the script a second time, cold. From a slot's zygote,
/// and from the run's (an attempt with a memory limit), on a loaded machine alike.
#[test]
fn a_warm_script_never_starts_before_the_runner_has_its_pid() {
    for limit in [None, Some("2G")] {
        for round in 0..4 {
            let t = Tree::new();
            t.write(
                "m/jax/kills.py",
                &format!("{THIS_RUNS_ZYGOTES_PY}{KILLS_EVERY_ZYGOTE}"),
            );
            let mut args = vec!["--sandbox", "off", "--jobs", "1", "--retries", "0"];
            if let Some(l) = limit {
                args.extend(["--memory-limit", l]);
            }
            let out = t.run(&args);
            let r = t.result("kills");
            let case = format!("{limit:?}, round {round}: {}", stderr(&out));
            assert_eq!(r["attempts"][0]["start"], "warm", "{case}: {r}");
            assert_eq!(stdout_of(&t, "kills"), "ran", "{case}");
        }
    }
}

/// Signals PID 1 of its PID namespace (its slot's zygote, sandboxed) with every signal
/// Python would handle or die of, and prints what each did and that zygote's start
/// time.
const SIGNALS_ITS_INIT: &str = r#"
import os, signal
done = []
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1):
    try:
        os.kill(1, sig)
        done.append("sent")
    except OSError as exc:
        done.append(exc.strerror)
with open("/proc/1/stat") as fh:
    started = fh.read().rsplit(")", 1)[1].split()[19]
print(started, ",".join(done))
"#;

/// A sandboxed script cannot stop its slot's zygote, the init of its PID namespace:
/// whether a layer refuses the signals (Landlock's scope) or they reach it, the next
/// script of the slot starts warm from the same zygote.
#[test]
fn a_sandboxed_script_cannot_stop_its_slots_zygote() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here, so no slot zygotes");
        return;
    }
    let t = Tree::new();
    t.write(
        "m/jax/a_signals.py",
        &format!("{SIGNALS_ITS_INIT}{}\n", "#".repeat(4096)),
    );
    t.write("m/jax/b_after.py", &format!("{SIGNALS_ITS_INIT}\n"));
    let out = t.run(&["--sandbox", "auto", "--jobs", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut started = Vec::new();
    for id in ["a_signals", "b_after"] {
        let r = t.result(id);
        assert_eq!(r["attempts"][0]["start"], "warm", "{r}");
        let line = stdout_of(&t, id);
        started.push(line.split(' ').next().unwrap().to_string());
    }
    assert_eq!(started[0], started[1], "the slot's zygote was made again");
}

/// A script of a slot starts as a fork of the zygote, holding its 150 MiB of pages:
/// the runner does not count those as the script's. Whether the script is sampled
/// (proportional sizes) or ends before its first sample (the kernel's peak less what
/// it held at its fork), a script that adds nothing records far less than the zygote
/// holds; one that fills 300 MiB and stays for the samples records at least that.
#[test]
fn a_warm_script_counts_what_it_added_not_the_zygotes_pages() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here");
        return;
    }
    for sandbox in ["off", "auto"] {
        let t = Tree::new();
        t.write("m/jax/a_nothing.py", "print(1)\n");
        t.write(
            "m/jax/b_fills.py",
            "import time\nb = b'x' * (300 << 20)\ntime.sleep(0.5)\nprint(len(b))\n",
        );
        let out = t.run(&["--sandbox", sandbox, "--jobs", "1"]);
        assert_eq!(code(&out), 0, "{sandbox}: {}", stderr(&out));
        let nothing = t.result("a_nothing");
        let fills = t.result("b_fills");
        for r in [&nothing, &fills] {
            assert_eq!(r["attempts"][0]["start"], "warm", "{sandbox}: {r}");
            let source = r["memory_source"].as_str().unwrap();
            assert!(["pss", "rss"].contains(&source), "{sandbox}: {r}");
        }
        let mb = |r: &serde_json::Value| r["peak_memory_mb"].as_f64().unwrap();
        assert!(mb(&nothing) < 80.0, "{sandbox}: {nothing}");
        assert!(mb(&fills) >= 295.0, "{sandbox}: {fills}");
    }
}

/// Says whether anything of an earlier script shares this slot (a process of the
/// slot's PID namespace but this one and its init, or an answer on the loopback port
/// the scripts use: UDP, which Landlock's network rules leave open), then leaves an
/// echo server that escapes the runner's sweep: out of its group and session, the
/// token wiped from the environment block the sweep reads (`/proc/<pid>/environ` is
/// that block, at the addresses `stat` gives).
const LEAVES_A_LISTENER: &str = r#"
import os, socket, sys, time
me = os.getpid()
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.settimeout(0.5)
try:
    probe.sendto(b"anyone", ("127.0.0.1", 47431))
    probe.recv(16)
    heard = "heard"
except OSError:
    heard = "silent"
probe.close()
print(len(others), heard)
sys.stdout.flush()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import ctypes
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
        ctypes.memset(start, 0, end - start)
        srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        srv.bind(("127.0.0.1", 47431))
        print("listening", file=sys.stderr, flush=True)
        for fd in (0, 1, 2):
            os.close(fd)
        while True:
            data, peer = srv.recvfrom(16)
            srv.sendto(data, peer)
    os._exit(0)
os.wait()
time.sleep(0.3)
"#;

/// The boundary between the scripts of one slot: however a script's leftover hides
/// from the runner's sweep, no process of it is alive when the slot's next script
/// starts, so nothing it left can listen, signal or watch (the slot's zygote clears
/// its PID namespace before each fork; the network namespace is the slot's).
#[test]
fn nothing_a_script_leaves_lives_on_into_the_next_script_of_its_slot() {
    let t = Tree::new();
    t.write("m/jax/a_first.py", LEAVES_A_LISTENER);
    t.write("m/jax/b_second.py", &format!("{LEAVES_A_LISTENER}\n# b\n"));
    let out = t.run(&["--sandbox", "auto", "--jobs", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let in_view = t.metrics()["run"]["sandbox_layers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x == "namespaces" || x == "bwrap"));
    if !in_view {
        eprintln!(
            "skipped: no view here ({})",
            t.metrics()["run"]["sandbox_layers"]
        );
        return;
    }
    for id in ["a_first", "b_second"] {
        let r = t.result(id);
        assert_eq!(r["attempts"][0]["start"], "warm", "{r}");
        assert_eq!(stdout_of(&t, id), "0 silent", "{id}: {r}");
    }
}

/// What a slot's first script leaves in every place it may write. The runner starts
/// the larger of two new scripts first (its guess at the longer), hence the padding.
const LEAVES_MARKS: &str = r#"
# padding: the runner starts the larger of two scripts without history first, and
# this one must run first. padding padding padding padding padding padding padding
# padding padding padding padding padding padding padding padding padding padding
# padding padding padding padding padding padding padding padding padding padding
# padding padding padding padding padding padding padding padding padding padding
# padding padding padding padding padding padding padding padding padding padding
# padding padding padding padding padding padding padding padding padding padding
import os
for folder in ["/tmp", "/dev/shm", os.path.expanduser("~"), os.environ["JAX_OUTPUT_DIR"]]:
    with open(os.path.join(folder, "mark-of-the-first"), "w") as fh:
        fh.write(folder)
print("left")
"#;

/// Looks for what the first script left and at its folders (named by the test):
/// nothing may show. Its own folder and data folder must.
const LOOKS_FOR_MARKS: &str = r#"
import os
here = os.path.dirname(os.path.abspath(__file__))
data = os.environ["JAX_OUTPUT_DIR"]
folder, first_data = os.environ["FIRST_FOLDER"], os.environ["FIRST_DATA"]
seen = []
for place in ["/tmp", "/dev/shm", os.path.expanduser("~"), first_data, data]:
    if os.path.exists(os.path.join(place, "mark-of-the-first")):
        seen.append(place)
for path in [folder, first_data]:
    if os.path.exists(path) and os.listdir(path):
        seen.append(path)
own = os.path.exists(os.path.join(here, "b_second.py"))
with open(os.path.join(data, "mine"), "w") as fh:
    fh.write("written")
print("own" if own else "no own folder", "saw:" + ",".join(seen))
print(os.getpid())
"#;

/// Both scripts of one slot, in turn, as `account`: the second sees nothing of the
/// first's scratch, `$HOME`, folder or data folder, and its own folders as ever. The
/// slot's zygote makes the run's part of the view once; each script's own part
/// (fresh scratch, the tree and the outputs covered, its folders bound back) is made
/// again on a copy of it, so this is the boundary between a slot's scripts.
/// `bwrap`: bwrap on `PATH` (else the runner's own namespaces, a root runner's).
fn a_slots_scripts_share_no_folder(account: common::user::Account, bwrap: bool) {
    let tree = account.tree();
    tree.write("m/jax/a_first.py", LEAVES_MARKS);
    tree.write("n/jax/b_second.py", LOOKS_FOR_MARKS);
    account.give(&tree.root());
    let first_data = tree.results_dir().join("data/a_first");
    let mut cmd = account.runner(&tree);
    if !bwrap {
        cmd.env("PATH", "/nonexistent");
    }
    let out = cmd
        .args(["--jobs", "1"])
        .arg("--env")
        .arg(format!(
            "FIRST_FOLDER={}",
            tree.root().join("m/jax").display()
        ))
        .arg("--env")
        .arg(format!("FIRST_DATA={}", first_data.display()))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let layers = tree.metrics()["run"]["sandbox_layers"].clone();
    if !layers
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x == "namespaces" || x == "bwrap"))
    {
        eprintln!("skipped: no view here ({layers})");
        return;
    }
    let (a, b) = (tree.result("a_first"), tree.result("b_second"));
    for r in [&a, &b] {
        assert_eq!(r["attempts"][0]["start"], "warm", "{r}");
    }
    assert_eq!(
        a["attempts"][0]["slot"], b["attempts"][0]["slot"],
        "one slot"
    );
    assert_eq!(stdout_of(&tree, "a_first"), "left");
    let started = |r: &serde_json::Value| r["started_at"].as_str().unwrap().to_string();
    assert!(started(&a) < started(&b), "the first script ran first");
    // The first's marks are where it left them, seen from the host.
    assert!(first_data.join("mark-of-the-first").exists());
    let second = stdout_of(&tree, "b_second");
    let (saw, pid) = second.split_once('\n').expect("two lines");
    assert_eq!(saw, "own saw:");
    // Forked by the slot's zygote, PID 1 of the slot's namespace, after the first
    // script: not the init of a namespace of its own (a start from the run's zygote,
    // or a cold one, where every script is PID 1 or 2). Slots need pids cgroups,
    // which only a root runner makes here.
    let pid: u32 = pid.trim().parse().unwrap();
    if account.is_root() && pids_cgroups() {
        assert!(
            pid > 2,
            "the second script is PID {pid}: not forked in its slot"
        );
    }
    let data = tree.results_dir().join("data/b_second");
    assert_eq!(
        std::fs::read_to_string(data.join("mine")).unwrap(),
        "written"
    );
}

#[test]
fn as_root_with_bwrap_a_slots_scripts_share_no_folder() {
    if let Some(root) = common::user::Account::root("a slot's scripts, as root, bwrap") {
        a_slots_scripts_share_no_folder(root, true);
    }
}

#[test]
fn as_root_without_bwrap_a_slots_scripts_share_no_folder() {
    if let Some(root) = common::user::Account::root("a slot's scripts, as root, no bwrap") {
        a_slots_scripts_share_no_folder(root, false);
    }
}

#[test]
fn as_user_with_bwrap_a_slots_scripts_share_no_folder() {
    a_slots_scripts_share_no_folder(common::user::Account::user(), true);
}

/// Finds the run's zygote (the runner's Python child outside every slot's cgroup; the
/// runner is the parent of this script's slot's zygote), then waits up to 10 s for it
/// to have no child that has ended unreaped; prints whether it found the zygote and
/// the zombies left.
const MIDDLES: &str = r#"
import os, time
def stat(pid):
    with open("/proc/%d/stat" % pid) as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return rest[0], int(rest[1])
slot = os.getppid()
runner = stat(slot)[1]
def children(of):
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                state, ppid = stat(int(name))
            except OSError:
                continue
            if ppid == of:
                yield int(name), state
zygote = None
for pid, _ in children(runner):
    try:
        comm = open("/proc/%d/comm" % pid).read().strip()
        cgroup = open("/proc/%d/cgroup" % pid).read()
    except OSError:
        continue
    if pid != slot and comm.startswith("python") and "-slot" not in cgroup:
        zygote = pid
deadline = time.monotonic() + 10
while True:
    # The state as listed: a child read twice may be reaped in between.
    zombies = [pid for pid, state in children(zygote) if state == "Z"] if zygote else []
    if not zombies or time.monotonic() > deadline:
        break
    time.sleep(0.05)
print(zygote is not None, zombies)
"#;

/// A run's slots are made side by side: the run's zygote answers a slot's request
/// once it has forked the middle process that makes the slot's zygote, and goes on to
/// the next. It still reaps each middle process as it ends, not at some later request
/// that may never come: while the scripts run, the run's zygote has no child left
/// unreaped. Unsandboxed, where the script sees the host's processes.
#[test]
fn the_runs_zygote_reaps_each_slots_middle_process() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here");
        return;
    }
    let t = Tree::new();
    for n in 1..=4 {
        t.write(&format!("m/jax/z{n}.py"), MIDDLES);
    }
    let out = t.run(&["--sandbox", "off", "--jobs", "2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for n in 1..=4 {
        let id = format!("z{n}");
        assert_eq!(t.result(&id)["attempts"][0]["start"], "warm", "{id}");
        assert_eq!(stdout_of(&t, &id), "True []", "{id}");
    }
}
