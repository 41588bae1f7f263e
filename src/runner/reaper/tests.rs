//! The reaper's own tests (ending a helper's tree).

use super::*;
use std::time::Duration;

/// A helper's tree (a parent and the child it waits for, as bwrap and the
/// zygote it runs) ends whole: when `end_tree` returns, the child has exited too,
/// not only the process it was given.
// `end_tree` reaps the child, which clippy cannot see.
#[test]
#[allow(clippy::zombie_processes)]
fn ending_a_tree_ends_the_process_below_too() {
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
    // Should the test fail, what it started does not outlive it.
    struct Guard(u32);
    impl Drop for Guard {
        fn drop(&mut self) {
            if !sys::ended(self.0) {
                sys::kill_pid(self.0 as i32, libc::SIGKILL);
            }
        }
    }
    let _guard = Guard(below);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !children_of(&root.id().to_string()).contains(&below) {
        assert!(std::time::Instant::now() < deadline, "no child seen");
        std::thread::sleep(Duration::from_millis(10));
    }
    end_tree(root.id());
    assert!(sys::ended(below), "the process below outlived its parent");
    // The parent was this test's child: reaped, not left a zombie.
    assert!(!own_children().contains(&root.id()));
}
