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
