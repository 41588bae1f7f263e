//! The reaper's own tests (ending a helper's tree).

use super::*;
use std::time::Duration;

/// Should a test fail, what it started does not outlive it.
struct Guard(u32);
impl Drop for Guard {
    fn drop(&mut self) {
        if !sys::ended(self.0) {
            sys::kill_pid(self.0 as i32, libc::SIGKILL);
        }
    }
}

/// A helper's tree: a parent and the child it waits for, as bwrap and the zygote it
/// runs; the parent, and the child's PID once the parent lists it.
fn helper_tree() -> (std::process::Child, u32, Guard) {
    let mut root = std::process::Command::new("sh")
        .args(["-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!; wait"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(root.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let below: u32 = line.trim().parse().unwrap();
    let guard = Guard(below);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !children_of(&root.id().to_string()).contains(&below) {
        assert!(std::time::Instant::now() < deadline, "no child seen");
        std::thread::sleep(Duration::from_millis(10));
    }
    (root, below, guard)
}

/// A helper's tree ends whole: when `end_tree` returns, the child has exited too, not
/// only the process it was given.
// `end_tree` reaps the child, which clippy cannot see.
#[test]
#[allow(clippy::zombie_processes)]
fn ending_a_tree_ends_the_process_below_too() {
    let (root, below, _guard) = helper_tree();
    end_tree(root.id());
    assert!(sys::ended(below), "the process below outlived its parent");
    // The parent was this test's child: reaped, not left a zombie.
    assert!(!own_children().contains(&root.id()));
}

/// Two helpers ended as the run's end ends its zygotes: both trees killed first
/// (`kill_tree` returns without waiting), then each waited for. Each tree's child is
/// signalled by `kill_tree` itself, before any wait, and `end_tree` still leaves
/// nothing of either, reaped.
#[test]
#[allow(clippy::zombie_processes)]
fn trees_killed_first_are_ended_whole_by_their_waits() {
    let trees = [helper_tree(), helper_tree()];
    for (root, _, _) in &trees {
        let killed: Vec<u32> = kill_tree(root.id()).iter().map(|v| v.pid).collect();
        assert_eq!(killed.len(), 2, "{killed:?}");
    }
    // Killed, not waited for: each child ends of the signal kill_tree sent.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !trees.iter().all(|(_, below, _)| sys::ended(*below)) {
        assert!(
            std::time::Instant::now() < deadline,
            "a child outlived kill_tree"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for (root, below, _) in &trees {
        end_tree(root.id());
        assert!(sys::ended(*below));
        assert!(
            !own_children().contains(&root.id()),
            "{} not reaped",
            root.id()
        );
    }
}

/// The sweep reads the runner's own children only where the attempt's orphans may have
/// come to it (`adopted`): a leftover among them is left alone when not, killed,
/// reaped and named when so.
#[test]
#[allow(clippy::zombie_processes)]
fn the_sweep_looks_among_its_own_children_only_when_told_they_may_be_the_scripts() {
    let token = format!(
        "adopted-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    );
    let child = std::process::Command::new("sleep")
        .arg("600")
        .env(TOKEN_VAR, &token)
        .spawn()
        .unwrap();
    let pid = child.id();
    let _guard = Guard(pid);
    // Its environment is readable once it has exec'd sleep.
    let entry = format!("{TOKEN_VAR}={token}").into_bytes();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !environ_has(pid, &entry) {
        assert!(std::time::Instant::now() < deadline, "no token seen");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(sweep(&token, &[], false, None).is_empty());
    assert!(
        !sys::ended(pid),
        "a child the sweep was not to look at was killed"
    );
    let leaks = sweep(&token, &[], true, None);
    assert_eq!(leaks.iter().map(|l| l.pid).collect::<Vec<_>>(), vec![pid]);
    assert!(sys::ended(pid));
    assert!(!own_children().contains(&pid), "{pid} not reaped");
}
