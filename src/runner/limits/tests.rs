use super::*;

/// A process of its own to place, killed and reaped on drop.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper() -> Sleeper {
    Sleeper(
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap(),
    )
}

/// A slot's cgroup this test may make (root, a pids controller), else `None`.
fn slot_cgroup(what: &str) -> Option<AttemptCgroup> {
    let name = format!("test-{}-{what}", std::process::id());
    let made = slot_homes_possible()
        .then(|| AttemptCgroup::for_slot(&name, None))
        .flatten();
    if made.is_none() {
        eprintln!("skipped: no pids cgroup for this user here");
    }
    made
}

/// A slot's zygote that says it moved itself but is not listed is moved by the runner;
/// one that is listed is left where it is. Either way it is the cgroup's resident, no
/// attempt's process.
#[test]
fn the_runner_moves_a_slots_zygote_that_did_not_move_itself() {
    let Some(cg) = slot_cgroup("settle") else {
        return;
    };
    let p = sleeper();
    let pid = p.0.id() as i32;
    assert!(!cg.lists(pid));
    assert!(cg.settle_moved(pid).unwrap(), "the runner moved it");
    assert!(cg.lists(pid));
    assert!(cg.has_resident());
    assert!(!cg.members().contains(&pid), "the resident is no member");
    assert!(!cg.settle_moved(pid).unwrap(), "already there");
    drop(p);
}

/// Where the cgroup is v1, the files handed to a slot's zygote move the thread that
/// writes `0` to them, and only it: a process that writes moves itself, and the
/// runner finds it listed.
#[test]
fn a_process_moves_itself_through_the_tasks_files() {
    let Some(cg) = slot_cgroup("self") else {
        return;
    };
    let files = cg.self_move_files();
    let v1 = cg.dirs.iter().all(|d| d.join("tasks").exists());
    assert_eq!(files.is_empty(), !v1, "{:?}", cg.dirs);
    if !v1 {
        eprintln!("skipped: cgroup v2 has no tasks files; the runner moves the zygote");
        return;
    }
    use std::os::fd::AsRawFd;
    // A child that writes 0 to each file (inherited across fork and exec by number),
    // then waits to be killed.
    let fds: Vec<String> = files.iter().map(|f| f.as_raw_fd().to_string()).collect();
    let script = "for fd in $FDS; do printf 0 >&$fd || exit 1; done; exec sleep 30";
    for f in &files {
        rustix::io::fcntl_setfd(f, rustix::io::FdFlags::empty()).unwrap();
    }
    let child = std::process::Command::new("sh")
        .args(["-c", script])
        .env("FDS", fds.join(" "))
        .spawn()
        .unwrap();
    let p = Sleeper(child);
    let pid = p.0.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cg.lists(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(cg.lists(pid), "the process did not move itself");
    assert!(!cg.settle_moved(pid).unwrap(), "nothing left to move");
    drop(p);
}
