//! Issue 34: a worker slot's zygote is placed in the slot's cgroup before its first
//! script, on the run's critical path. Where the cgroup is v1 it moves itself in,
//! through the `tasks` files the runner opened and handed it (a thread that moves
//! itself waits for no RCU grace period; the runner's move of it waits for one, 8 to
//! 13 ms); elsewhere the runner moves it. The boundary: whichever did it, each script
//! starts in the slot's cgroup, and no script holds a descriptor of a cgroup file (the
//! slot's zygote closes the files it was sent, and each script closes what it
//! inherited above its standard streams before its first line).

mod common;

use common::*;

/// Prints the script's pids cgroup (v1's `pids` line, or v2's single line), then every
/// descriptor it holds open on a file under a cgroup file system.
const PROBE: &str = r#"
import os
for line in open("/proc/self/cgroup"):
    parts = line.strip().split(":", 2)
    if "pids" in parts[1].split(",") or parts[1] == "":
        print(parts[2])
        break
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if "cgroup" in target:
        held.append(target)
print(sorted(held))
"#;

/// Whether this machine's pids controller is cgroup v1 (a hierarchy of its own, with
/// `tasks` files).
fn pids_v1() -> bool {
    std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .any(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "pids"))
        })
}

#[test]
fn a_slots_zygote_moves_itself_where_it_can_and_no_script_keeps_the_files() {
    if !pids_cgroups() {
        eprintln!("skipped: no pids cgroups for this user here, so no slot zygotes");
        return;
    }
    let by = if pids_v1() { "itself" } else { "the runner" };
    for sandbox in ["off", "auto"] {
        let t = Tree::new();
        for n in 1..=4 {
            t.write(&format!("m/jax/p{n}.py"), PROBE);
        }
        let out = t.run(&["--sandbox", sandbox, "--jobs", "2"]);
        assert_eq!(code(&out), 0, "{sandbox}: {}", stderr(&out));
        let log = std::fs::read_to_string(t.results_dir().join("execution_log.txt")).unwrap();
        let moves: Vec<&str> = (log.lines())
            .filter(|l| l.contains("slot zygote") && l.contains(": moved by "))
            .collect();
        assert_eq!(moves.len(), 2, "{sandbox}: one line a slot: {log}");
        for line in &moves {
            assert!(
                line.ends_with(&format!("moved by {by}")),
                "{sandbox}: {line}"
            );
        }
        for n in 1..=4 {
            let id = format!("p{n}");
            let r = t.result(&id);
            assert_eq!(r["attempts"][0]["start"], "warm", "{sandbox}: {r}");
            let slot = r["attempts"][0]["slot"].as_u64().unwrap();
            let stdout = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(
                lines[0].ends_with(&format!("-slot{slot}")),
                "{sandbox} {id}: started outside its slot's cgroup: {stdout}"
            );
            assert_eq!(
                lines[1], "[]",
                "{sandbox} {id}: holds cgroup files: {stdout}"
            );
        }
    }
}
