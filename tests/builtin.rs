//! The sandbox's built-in layer (issue 24): Landlock and seccomp on every script, with
//! bwrap on top where it exists, tested through the binary with default options, as
//! root and as an ordinary user, warm and cold, with bwrap hidden from PATH and with
//! it. A script attacks the tree, the other script of its run, the runner and the host
//! (`fixtures/builtin_escape.py`), the issue-23 catalogue runs with bwrap hidden
//! (`fixtures/hostile_root.py`), and the README's first command on the committed
//! sample runs sandboxed on a machine without bwrap.
//!
//! Layer names may still change slightly: a Landlock layer is any `landlock-v…`.

mod common;

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::catalogue::{self, Traps};
use common::user::*;
use common::*;
use serde_json::Value;

/// How a case runs.
#[derive(Debug, Clone, Copy)]
struct How {
    warm: bool,
    /// bwrap on PATH (both layers apply) or hidden from it (`PATH=/nonexistent`: the
    /// built-in layer, and a root runner's own namespaces). The runner finds bwrap
    /// only through PATH; `--python` is given, so nothing else needs it.
    bwrap: bool,
    /// `--sandbox landlock`: the built-in layer alone, whatever else the machine has.
    layer_alone: bool,
    /// The runner (an ordinary user's) in a user namespace whose
    /// `user.max_user_namespaces` is 0: a machine without user namespaces (many
    /// clusters, Ubuntu 24.04 desktops), where bwrap is on PATH but cannot work.
    no_userns: bool,
}

const WARM: How = How {
    warm: true,
    bwrap: false,
    layer_alone: false,
    no_userns: false,
};
const COLD: How = How {
    warm: false,
    ..WARM
};
const WARM_BWRAP: How = How {
    bwrap: true,
    ..WARM
};
const COLD_BWRAP: How = How {
    bwrap: true,
    ..COLD
};
/// bwrap on PATH, on a machine that has no user namespaces for it.
const NO_USERNS: How = How {
    no_userns: true,
    ..WARM_BWRAP
};

/// bwrap stays on PATH: the layer alone is asked for, whatever else there is.
const LAYER_ALONE: How = How {
    layer_alone: true,
    ..WARM_BWRAP
};

impl How {
    fn describe(self, account: &Account) -> String {
        format!(
            "as {}, {}, {}",
            account.who.name(),
            if self.warm { "warm" } else { "cold" },
            match (self.layer_alone, self.bwrap, self.no_userns) {
                (true, _, _) => "--sandbox landlock",
                (false, _, true) => "no user namespaces",
                (false, true, false) => "bwrap on PATH",
                (false, false, false) => "bwrap hidden",
            }
        )
    }

    /// Whether bwrap works here when the case needs it: a case with bwrap on PATH fails
    /// without it, unless `JAX_RUNNER_TEST_SKIP=bwrap` (then `false`).
    fn bwrap_here(self, case: &str) -> bool {
        !self.bwrap
            || self.layer_alone
            || self.no_userns
            || prereq::require(prereq::Prereq::Bwrap, prereq::bwrap(), case)
    }

    /// Runs `cmd` (an ordinary user's runner) as the case asks. With no user
    /// namespaces: see [`Account::spawn_without_user_namespaces`].
    fn output(self, account: &Account, mut cmd: Command, inherited: &Inherited) -> Output {
        if !self.no_userns {
            inherited.hand_to(&mut cmd);
            return cmd.output().expect("the runner starts");
        }
        account
            .spawn_without_user_namespaces(&cmd, |outer| inherited.hand_to(outer))
            .wait_with_output()
            .expect("the runner ends")
    }

    /// Default options but for these.
    fn apply(self, cmd: &mut Command) {
        if !self.warm {
            cmd.args(["--warm-start", "off"]);
        }
        if !self.bwrap {
            cmd.env("PATH", "/nonexistent");
        }
        if self.layer_alone {
            cmd.args(["--sandbox", "landlock"]);
        }
    }
}

/// A mark no other run shares: in the runner's argv (so a script can find the runner),
/// in the victim's process name, and in every file the attacker tries to create.
fn new_mark() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    // The first 12 characters (the victim's process name) differ between the cases
    // of one test binary by the counter, between binaries by the pid.
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{:06x}{:02x}{:08x}", std::process::id(), n % 256, nanos)
}

/// The layers the results list, checked against the case: sandboxed at all, Landlock
/// always, seccomp always, bwrap where it is on PATH, and a root runner's scripts as
/// the sandbox user (in its own namespaces when bwrap is hidden); and the start the
/// case asked for.
fn check_how_it_ran(r: &Value, how: How, account: &Account, failures: &mut Vec<String>) {
    check_layers(r, how, account, failures);
    // Whether the layer alone starts warm is the implementation's choice.
    if how.layer_alone {
        return;
    }
    let start = &r["attempts"][0]["start"];
    let expected = if how.warm { "warm" } else { "cold" };
    if start != expected {
        failures.push(format!(
            "{} started {start}, not {expected}: {}",
            r["id"], r["attempts"][0]["cold_start_reason"]
        ));
    }
}

/// See [`check_how_it_ran`].
fn check_layers(r: &Value, how: How, account: &Account, failures: &mut Vec<String>) {
    let id = &r["id"];
    let sandbox = &r["sandbox"];
    let layers: Vec<&str> = sandbox["layers"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if layers.is_empty() {
        failures.push(format!("{id} ran unsandboxed: {sandbox}"));
        return;
    }
    if !layers.iter().any(|l| l.starts_with("landlock-v")) {
        failures.push(format!("{id} ran without a Landlock layer: {sandbox}"));
    }
    let mut want = vec!["seccomp"];
    if how.bwrap && !how.layer_alone && !how.no_userns {
        want.push("bwrap");
    }
    if account.is_root() {
        want.push("uid");
        if !how.bwrap && !how.layer_alone {
            want.push("namespaces");
        }
        if !sandbox["uid"].as_u64().is_some_and(|u| u != 0) {
            failures.push(format!("{id} ran as the host's root: {sandbox}"));
        }
    }
    let unwanted: &[&str] = if how.layer_alone || how.no_userns {
        &["bwrap", "namespaces"]
    } else {
        &[]
    };
    for layer in want {
        if !layers.contains(&layer) {
            failures.push(format!("{id} ran without the {layer} layer: {sandbox}"));
        }
    }
    for layer in unwanted {
        if layers.contains(layer) {
            failures.push(format!(
                "{id}: {} gave {layer}: {sandbox}",
                how.describe(account)
            ));
        }
    }
}

/// The run is whole: exit 0 (the runner was neither stopped nor killed), a result for
/// each of `ids`, each a success, and the metrics counting them all.
fn complete_results(tree: &Tree, out: &Output, ids: &[&str], case: &str) -> Vec<Value> {
    assert_eq!(code(out), 0, "{case}: {}", stderr(out));
    let totals = &tree.metrics()["totals"];
    assert_eq!(totals["total_scripts"], ids.len(), "{case}: {totals}");
    ids.iter()
        .map(|id| {
            let r = tree.result(id);
            assert_eq!(
                r["status"], "succeeded",
                "{case}: {id}: {}",
                r["stderr_tail"]
            );
            r
        })
        .collect()
}

/// Makes the tree the account's; for `--sandbox landlock` as root also one the
/// sandbox user may read: without a mount namespace no fresh folder opens the 0700
/// tree to it.
fn give_tree(account: &Account, tree: &Tree, how: How) {
    account.give(&tree.root());
    if how.layer_alone {
        set_mode(&tree.root(), 0o755);
    }
}

fn data_dir(r: &Value) -> PathBuf {
    PathBuf::from(r["data_dir"].as_str().unwrap())
}

// --- one script against the tree, another script, the runner and the host ---------

/// What `builtin_escape.py` must find refused, judged from its own report: targets a
/// private `/tmp`, `$HOME` or network namespace cannot stand in for.
const BLOCKED: &[&str] = &[
    "write_tree_root",
    "append_other_script_source",
    "write_other_script_data",
    "write_results_folder",
    "append_other_script_results",
    "append_run_metrics",
    "write_other_tree_cache",
    "write_host_tmp_folder",
    "write_host_var_tmp_folder",
    "write_var_tmp_top",
    "read_other_script_data",
    "read_real_home_secret",
    "connect_loopback_tcp",
    "signal_runner",
    "ptrace_runner",
    "signal_other_script",
    "ptrace_other_script",
    "signal_runner_children",
    "ptrace_runner_children",
];

/// What the script must still be able to do: write a temporary folder and a `$HOME`
/// of its own. (Its own tree's compilation cache, writable by design, and a TCP
/// listener of its own are recorded, not judged.) `write_tmp_top`, `write_real_home`
/// and `sendto_loopback_udp` land in a private `/tmp`, `$HOME` or network namespace
/// where there is one, so they are judged from the host ([`Targets::what_got_through`]).
const ALLOWED: &[&str] = &["write_own_temp_folder", "write_own_home"];

/// What the test sets up on the host for one escape case, and checks after it.
struct Targets {
    mark: String,
    tcp: TcpListener,
    udp: UdpSocket,
    /// World-writable folders (1777, as `/tmp` itself) in the host's `/tmp` and
    /// `/var/tmp`: only the sandbox keeps a script out.
    host_tmp: tempfile::TempDir,
    host_var_tmp: tempfile::TempDir,
    /// Another tree's folder in the account's compilation cache (0777).
    other_cache: PathBuf,
    home: PathBuf,
    home_secret: String,
}

fn world_writable_folder(parent: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("jr-drop-")
        .tempdir_in(parent)
        .unwrap();
    set_mode(dir.path(), 0o1777);
    dir
}

impl Targets {
    fn new(account: &Account) -> Targets {
        let mark = new_mark();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let other_cache = account
            .cache_dir()
            .join("jax-compilation-cache-sandboxed")
            .join(format!("tree-{mark}"));
        std::fs::create_dir_all(&other_cache).unwrap();
        let home_secret = format!("the runner's secret {mark}");
        std::fs::write(account.home().join("secret.txt"), &home_secret).unwrap();
        account.give(&account.cache_dir());
        account.give(&account.home());
        set_mode(&other_cache, 0o777);
        Targets {
            mark,
            tcp,
            udp,
            host_tmp: world_writable_folder("/tmp"),
            host_var_tmp: world_writable_folder("/var/tmp"),
            other_cache,
            home: account.home(),
            home_secret,
        }
    }

    /// `--env` values for both runs: the mark (which puts it in the runner's argv)
    /// and the victim's secret.
    fn base_env(&self) -> Vec<String> {
        vec![
            format!("JR_RUNNER_MARK={}", self.mark),
            format!("VICTIM_SECRET=the victim's secret {}", self.mark),
        ]
    }

    /// `--env` values for the attack run: where to aim.
    fn attack_env(&self, tree: &Tree, victim: &Victim) -> Vec<String> {
        let mut env = self.base_env();
        let paths: [(&str, &Path); 8] = [
            ("TEST_TREE", &tree.root()),
            ("TEST_VICTIM_SOURCE", &victim.source),
            ("TEST_VICTIM_DATA", &victim.data),
            ("TEST_VICTIM_RESULTS", &victim.results),
            ("TEST_RUN_METRICS", &victim.metrics),
            ("TEST_REAL_HOME", &self.home),
            ("TEST_OTHER_CACHE", &self.other_cache),
            ("TEST_HOST_TMP", self.host_tmp.path()),
        ];
        for (name, path) in paths {
            env.push(format!("{name}={}", path.display()));
        }
        env.extend([
            format!("TEST_HOST_VAR_TMP={}", self.host_var_tmp.path().display()),
            format!("TEST_TCP_PORT={}", self.tcp.local_addr().unwrap().port()),
            format!("TEST_UDP_PORT={}", self.udp.local_addr().unwrap().port()),
            // At most: the test ends both waits as soon as it can (see `relay`).
            "VICTIM_LINGER=20".into(),
            "TEST_FIND_S=10".into(),
        ]);
        env
    }

    fn escaped(&self, name: &str) -> bool {
        name.starts_with(&format!("escaped-{}", self.mark))
    }

    /// Files the attacker created, seen from the host: in the tree (its own scratch
    /// aside, wherever the runner keeps it), in the runner's `$HOME` (a script's own
    /// `$HOME` is never that one), another tree's cache, the host's world-writable
    /// folders, and at the top of `/tmp` and `/var/tmp`.
    fn files_that_got_out(&self, tree: &Tree, own_data: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let own = ["own_temp", "own_home", "own_cache"];
        let walk = walkdir::WalkDir::new(tree.root())
            .into_iter()
            .filter_entry(|e| e.path() != own_data);
        for entry in walk.flatten() {
            let name = entry.file_name().to_string_lossy();
            if self.escaped(&name) && !own.iter().any(|o| name.ends_with(o)) {
                found.push(format!("{} was created", entry.path().display()));
            }
        }
        let flat: [&Path; 6] = [
            &self.home,
            &self.other_cache,
            self.host_tmp.path(),
            self.host_var_tmp.path(),
            Path::new("/tmp"),
            Path::new("/var/tmp"),
        ];
        for dir in flat {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                if self.escaped(&entry.file_name().to_string_lossy()) {
                    found.push(format!("{} was created", entry.path().display()));
                }
            }
        }
        found
    }

    /// What reached the host, seen from the host.
    fn what_got_through(&self, tree: &Tree, victim: &Victim, own_data: &Path) -> Vec<String> {
        let mut found = self.files_that_got_out(tree, own_data);
        match self.tcp.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => found.push(format!("the TCP listener accepted: {other:?}")),
        }
        let mut buf = [0u8; 256];
        match self.udp.recv_from(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => found.push(format!("the UDP socket received: {other:?}")),
        }
        if std::fs::read(&victim.source).unwrap() != victim.source_bytes {
            found.push("the other script's source changed".into());
        }
        let secret = std::fs::read_to_string(self.home.join("secret.txt")).unwrap();
        if secret != self.home_secret {
            found.push(format!("the runner's $HOME secret changed: {secret:?}"));
        }
        let stamp = format!("escaped-{}", self.mark);
        for file in [&victim.results, &victim.metrics] {
            if std::fs::read_to_string(file).is_ok_and(|t| t.contains(&stamp)) {
                found.push(format!("{} holds the attacker's line", file.display()));
            }
        }
        found
    }
}

impl Drop for Targets {
    /// A write that got out at the top of `/tmp` or `/var/tmp` is not left behind.
    fn drop(&mut self) {
        for dir in ["/tmp", "/var/tmp"] {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if self.escaped(&entry.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}

/// The other script, as its first run (alone in the tree) left it.
struct Victim {
    source: PathBuf,
    source_bytes: Vec<u8>,
    data: PathBuf,
    results: PathBuf,
    metrics: PathBuf,
}

/// The first run: the victim alone writes its secret; its results and the run's
/// metrics are there for the attack run to find.
fn first_run(account: &Account, tree: &Tree, targets: &Targets, how: How, case: &str) -> Victim {
    let source = tree.fixture("builtin_victim.py", "victim/jax/builtin_victim.py");
    give_tree(account, tree, how);
    let mut cmd = account.runner(tree);
    how.apply(&mut cmd);
    for value in targets.base_env() {
        cmd.arg("--env").arg(value);
    }
    let out = cmd.output().expect("the runner starts");
    let r = complete_results(
        tree,
        &out,
        &["builtin_victim"],
        &format!("{case}, first run"),
    )
    .remove(0);
    let data = data_dir(&r);
    let secret = std::fs::read_to_string(data.join("secret.txt")).unwrap();
    assert!(
        secret.contains(&targets.mark),
        "{case}: the victim wrote {secret:?}"
    );
    Victim {
        source_bytes: std::fs::read(&source).unwrap(),
        source: tree.root().join("victim/jax/builtin_victim.py"),
        data,
        results: tree.results_dir().join("builtin_victim_results.json"),
        metrics: tree.results_dir().join("performance_metrics.json"),
    }
}

/// The attacks the report says got through, against [`BLOCKED`] and [`ALLOWED`].
fn check_escape_report(report: &Value, failures: &mut Vec<String>) {
    for &attack in BLOCKED {
        match report[attack].as_str() {
            Some(outcome) if outcome.starts_with("blocked") => {}
            outcome => failures.push(format!("{attack}: {outcome:?}")),
        }
    }
    for &attack in ALLOWED {
        match report[attack].as_str() {
            Some(outcome) if outcome.starts_with("allowed") => {}
            outcome => failures.push(format!("{attack} (a script needs it): {outcome:?}")),
        }
    }
}

/// Polls `f` every 20 ms until it answers, the runner has exited (`done`), or a
/// minute has passed.
fn poll<T>(done: &AtomicBool, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if done.load(Ordering::Acquire) || Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The data folder a script named on its first line of output (`out_dir PATH`).
fn out_dir_in(log: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("out_dir "))?;
    Some(PathBuf::from(line))
}

/// PIDs of live processes whose `/proc/PID/comm` is `comm`.
fn processes_named(comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|c| c.trim() == comm) {
            found.push(pid);
        }
    }
    found
}

/// The test's part while the attack run goes: once both scripts have said where
/// their data folders are, it tells the attacker the victim's pid as the host sees
/// it (`victim.pid`: the attacker needs no `/proc` to try it), and tells the victim
/// when the attacker's report is written (`attack.done`), so the victim lives exactly
/// as long as the attack. Says what it could not do.
fn relay(tree: &Tree, mark: &str, done: &AtomicBool) -> Result<(), String> {
    let logs = tree.results_dir().join("logs");
    let attacker = poll(done, || out_dir_in(&logs.join("builtin_escape.stdout.log")))
        .ok_or("the attacker never named its data folder")?;
    let victim = poll(done, || out_dir_in(&logs.join("builtin_victim.stdout.log")))
        .ok_or("the victim never named its data folder")?;
    let comm = format!("jrv{}", &mark[..12]);
    let pid = poll(done, || processes_named(&comm).first().copied())
        .ok_or("the victim never showed on the host")?;
    let tmp = attacker.join("victim.pid.tmp");
    std::fs::write(&tmp, pid.to_string())
        .and_then(|()| std::fs::rename(&tmp, attacker.join("victim.pid")))
        .map_err(|e| format!("cannot tell the attacker the victim's pid: {e}"))?;
    poll(done, || {
        attacker.join("builtin_escape.json").exists().then_some(())
    })
    .ok_or("the attacker never wrote its report")?;
    std::fs::write(victim.join("attack.done"), "")
        .map_err(|e| format!("cannot tell the victim the attack is over: {e}"))
}

/// One case: the victim's first run, then the attack run beside it (two slots, so
/// both run at once, the test relaying between them), then the results, the
/// attacker's report and the host.
///
/// As the ordinary user, the script's user may write or read every target, so only
/// the sandbox keeps it out. As root, the sandbox user owns the other
/// script's data folder and the test's world-writable folders let it in; the tree,
/// the results and `$HOME` are root's.
fn escape_case(account: Account, how: How) {
    let case = how.describe(&account);
    if !how.bwrap_here(&case) {
        return;
    }
    let targets = Targets::new(&account);
    let tree = account.tree();
    let victim = first_run(&account, &tree, &targets, how, &case);
    tree.fixture("builtin_escape.py", "attacker/jax/builtin_escape.py");
    give_tree(&account, &tree, how);
    let mut cmd = account.runner_told_its_pid(&tree, "JR_RUNNER_PID");
    how.apply(&mut cmd);
    cmd.args(["--jobs", "2"]);
    for value in targets.attack_env(&tree, &victim) {
        cmd.arg("--env").arg(value);
    }
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the runner starts");
    let done = AtomicBool::new(false);
    let (out, relayed) = std::thread::scope(|s| {
        let relay = s.spawn(|| relay(&tree, &targets.mark, &done));
        let out = child.wait_with_output().expect("the runner ends");
        done.store(true, Ordering::Release);
        (out, relay.join().unwrap())
    });
    eprintln!("{case}: the attack run took {:.1?}", started.elapsed());
    let ids = ["builtin_escape", "builtin_victim"];
    let results = complete_results(&tree, &out, &ids, &case);
    relayed.unwrap_or_else(|e| {
        panic!(
            "{case}: the test's relay: {e}; the attacker {} ({}), its stderr: {}",
            results[0]["status"], results[0]["class"], results[0]["stderr_tail"]
        )
    });
    let own_data = data_dir(&results[0]);
    let report = read_json(&own_data.join("builtin_escape.json"));
    let mut failures = Vec::new();
    for r in &results {
        check_how_it_ran(r, how, &account, &mut failures);
    }
    check_escape_report(&report, &mut failures);
    failures.extend(targets.what_got_through(&tree, &victim, &own_data));
    assert!(
        failures.is_empty(),
        "{case}: {} check(s) failed:\n  {}\nthe attacker saw {}\nits report: {report}",
        failures.len(),
        failures.join("\n  "),
        report["seen"],
    );
}

#[test]
fn as_root_warm_without_bwrap_a_script_stays_in_its_own_folders() {
    if let Some(root) = Account::root("escape as root, warm, bwrap hidden") {
        escape_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_a_script_stays_in_its_own_folders() {
    if let Some(root) = Account::root("escape as root, cold, bwrap hidden") {
        escape_case(root, COLD);
    }
}

#[test]
fn as_user_warm_without_bwrap_a_script_stays_in_its_own_folders() {
    escape_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_script_stays_in_its_own_folders() {
    escape_case(Account::user(), COLD);
}

#[test]
fn as_root_warm_with_bwrap_both_layers_apply() {
    if let Some(root) = Account::root("escape as root, warm, bwrap on PATH") {
        escape_case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_cold_with_bwrap_both_layers_apply() {
    if let Some(root) = Account::root("escape as root, cold, bwrap on PATH") {
        escape_case(root, COLD_BWRAP);
    }
}

#[test]
fn as_user_warm_with_bwrap_both_layers_apply() {
    escape_case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_user_cold_with_bwrap_both_layers_apply() {
    escape_case(Account::user(), COLD_BWRAP);
}

/// `--sandbox landlock` as root: the built-in layer and the sandbox user, no
/// namespaces. The tree must be one the sandbox user may read without them.
#[test]
fn as_root_the_built_in_layer_alone_keeps_a_script_in_its_own_folders() {
    if let Some(root) = Account::root("escape as root, --sandbox landlock") {
        escape_case(root, LAYER_ALONE);
    }
}

// --- the issue-23 catalogue with bwrap hidden -----------------------------------------

/// `fixtures/hostile_root.py` beside an ordinary script (`tree_victim.py`, which needs
/// its own source, a sibling file, jax and its data folder), every attack blocked and
/// nothing on the host touched.
///
/// Every attack of the catalogue is one the built-in layer holds without bwrap, so
/// all are asserted blocked: the host's knobs (`core_pattern`, `printk_ratelimit`,
/// `sysrq-trigger`) and root's files by the script's uid (an ordinary user's, or the
/// sandbox user's); setuid and setgid bits, namespaces (`clone`, `clone3`, `unshare`),
/// mounts and unix sockets (file or abstract) by the seccomp filter, the abstract
/// socket also by Landlock's scoping (ABI 6); inherited descriptors by the runner
/// closing them. What only bwrap or namespaces give is not in the catalogue: hiding
/// the host's processes (`/proc`) and its world-readable files from the script.
fn catalogue_case(account: Account, how: How) {
    let case = format!("catalogue {}", how.describe(&account));
    if !how.bwrap_here(&case) {
        return;
    }
    let traps = Traps::new(&account);
    let tree = account.tree_in(traps.project());
    tree.fixture("hostile_root.py", "attacker/jax/hostile_root.py");
    tree.fixture("tree_victim.py", "victim/jax/tree_victim.py");
    tree.fixture("sibling_data.json", "victim/jax/sibling_data.json");
    give_tree(&account, &tree, how);
    let mut cmd = account.runner(&tree);
    how.apply(&mut cmd);
    for value in traps.env() {
        cmd.arg("--env").arg(value);
    }
    let out = how.output(&account, cmd, &traps.inherited);
    let results = complete_results(&tree, &out, &["hostile_root", "tree_victim"], &case);
    let report = read_json(&data_dir(&results[0]).join("hostile_root.json"));
    let mut failures = Vec::new();
    for r in &results {
        check_how_it_ran(r, how, &account, &mut failures);
    }
    catalogue::check_attacks(&report, &mut failures);
    failures.extend(traps.what_got_through());
    for entry in walkdir::WalkDir::new(tree.results_dir())
        .into_iter()
        .flatten()
    {
        let mode = entry.metadata().map(|m| m.mode()).unwrap_or(0);
        if entry.file_type().is_file() && mode & 0o6000 != 0 {
            failures.push(format!("{} has mode {mode:o}", entry.path().display()));
        }
    }
    let written = read_json(&data_dir(&results[1]).join("simulation_results.json"));
    if written["sibling"] != 42 || written["success"] != true {
        failures.push(format!("the ordinary script wrote {written}"));
    }
    assert!(
        failures.is_empty(),
        "{case}: {} check(s) failed:\n  {}\nthe script ran as uid_map {:?}, ids {}",
        failures.len(),
        failures.join("\n  "),
        report["uid_map"],
        report["ids"],
    );
}

#[test]
fn as_user_warm_without_bwrap_the_catalogue_is_blocked() {
    catalogue_case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_the_catalogue_is_blocked() {
    catalogue_case(Account::user(), COLD);
}

/// A machine without user namespaces: bwrap is on PATH but cannot make its sandbox,
/// so the built-in layer holds the catalogue alone, warm and cold.
#[test]
fn as_user_warm_without_user_namespaces_the_catalogue_is_blocked() {
    if prereq::require(
        prereq::Prereq::Root,
        prereq::root(),
        "no user namespaces, warm",
    ) {
        catalogue_case(Account::user(), NO_USERNS);
    }
}

#[test]
fn as_user_cold_without_user_namespaces_the_catalogue_is_blocked() {
    if prereq::require(
        prereq::Prereq::Root,
        prereq::root(),
        "no user namespaces, cold",
    ) {
        let how = How {
            warm: false,
            ..NO_USERNS
        };
        catalogue_case(Account::user(), how);
    }
}

#[test]
fn as_root_warm_without_bwrap_the_catalogue_is_blocked() {
    if let Some(root) = Account::root("catalogue as root, warm, bwrap hidden") {
        catalogue_case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_the_catalogue_is_blocked() {
    if let Some(root) = Account::root("catalogue as root, cold, bwrap hidden") {
        catalogue_case(root, COLD);
    }
}

#[test]
fn as_root_the_built_in_layer_alone_blocks_the_catalogue() {
    if let Some(root) = Account::root("catalogue as root, --sandbox landlock") {
        catalogue_case(root, LAYER_ALONE);
    }
}

// --- a fresh machine's first command -----------------------------------------------

/// The README's first command, `cargo run --release -- --output-dir output`, on a
/// machine without bwrap: the committed sample copied to a new tree, default options
/// (the account's fresh cache folder, so a cold compilation cache and a first probe),
/// `--python` given and `--device cpu`.
fn first_command_case(account: Account) {
    let case = format!("the first command as {}", account.who.name());
    let tree = account.tree();
    let sample = repo().join("output/gnn_rendered_simulators");
    for entry in walkdir::WalkDir::new(&sample) {
        let entry = entry.unwrap();
        let dest = tree
            .root()
            .join("gnn_rendered_simulators")
            .join(entry.path().strip_prefix(&sample).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
    account.give(&tree.root());
    let mut cmd = account.runner(&tree);
    WARM.apply(&mut cmd);
    let out = cmd.output().expect("the runner starts");
    let ids = ["pomdp_solver", "general_model", "combined_model"];
    let results = complete_results(&tree, &out, &ids, &case);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(said.contains("3 of 3 succeeded"), "{case}: {said}");
    let mut failures = Vec::new();
    for r in &results {
        check_how_it_ran(r, WARM, &account, &mut failures);
    }
    // The run's record and its summary line say it was sandboxed, by what, and warm;
    // the Landlock layer is the one every machine now has.
    let metrics = read_json(&tree.results_dir().join("performance_metrics.json"));
    let layers = metrics["run"]["sandbox_layers"].to_string().to_lowercase();
    if !layers.contains("landlock") {
        failures.push(format!("the run was not sandboxed by Landlock: {layers}"));
    }
    let summary = said
        .lines()
        .find(|l| l.contains("Summary ["))
        .unwrap_or_default();
    if !(summary.contains("; sandboxed (") && summary.contains("landlock-v")) {
        failures.push(format!("the summary line does not say how: {summary}"));
    }
    if !summary.contains("3 of 3 started warm") {
        failures.push(format!("the summary line does not say warm: {summary}"));
    }
    // The summary line, with the report's path, and no failure among the lines.
    let report = tree.results_dir().join("report.html");
    if !said.contains(&format!("; report: {}", report.display())) {
        failures.push("the summary line does not name report.html".into());
    }
    if said.contains("FAIL [") || said.contains("warning: failed") {
        failures.push("a script failed".into());
    }
    assert!(
        failures.is_empty(),
        "{case}: {} check(s) failed:\n  {}\nthe run said:\n{said}",
        failures.len(),
        failures.join("\n  "),
    );
}

#[test]
fn as_user_without_bwrap_the_first_command_runs_sandboxed() {
    first_command_case(Account::user());
}

#[test]
fn as_root_without_bwrap_the_first_command_runs_sandboxed() {
    if let Some(root) = Account::root("the first command as root, bwrap hidden") {
        first_command_case(root);
    }
}
