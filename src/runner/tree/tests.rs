//! The tree sampler's tests: a rise's steadiness, a tree's processes and memory.

use super::*;
use std::process::Command;

/// A rise counts from its third sample; a fall counts at once.
#[test]
fn a_rise_counts_once_three_samples_show_it() {
    let held = |rss| Held { rss, scratch: 0 };
    let mut before = std::collections::VecDeque::new();
    assert_eq!(steady(&before, held(500)), held(500));
    let mut kept = Vec::new();
    for sample in [100, 900, 900, 100, 400, 450, 500, 300] {
        kept.push(steady(&before, held(sample)).rss);
        if before.len() == STEADY - 1 {
            before.pop_front();
        }
        before.push_back(held(sample));
    }
    assert_eq!(kept, [100, 100, 100, 100, 100, 100, 400, 300]);
}

#[test]
fn finds_grandchildren_and_sums_their_memory() {
    let mut child = Command::new("sh")
        .args(["-c", "sleep 5 & sleep 5 & wait"])
        .spawn()
        .unwrap();
    // Until the shell has started both sleeps, however loaded the machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut pids = tree_pids(child.id());
    while pids.len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        pids = tree_pids(child.id());
    }
    assert_eq!(pids.len(), 3, "{pids:?}");
    let mut sampler = TreeSampler::default();
    let held = sampler.sample(child.id());
    assert!(held.rss > 0 && held.scratch == 0 && sampler.peak == held);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A process whose main thread alone has exited holds its memory in the thread
/// that lives on: it is counted, not read as a zombie's nothing.
#[test]
fn a_process_whose_main_thread_exited_is_counted() {
    let block = "block = bytearray(b'\\x01') * (256 << 20)";
    let mut child = crate::runner::sys::spawn_headless(block, "");
    let pid = child.id();
    let held = TreeSampler::default().sample(pid);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(held.rss >= 256 << 20, "{held:?}");
}

/// The watchdog counts what a pids cgroup counts: every thread of every process.
#[test]
fn a_tree_counts_its_threads_as_tasks() {
    let threads = "import threading, time\n\
        for _ in range(7): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n\
        time.sleep(30)\n";
    let mut child = Command::new("python3")
        .args(["-c", threads])
        .spawn()
        .unwrap();
    let tasks = |pid: u32| std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tasks(child.id()) < 8 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut sampler = TreeSampler::default();
    sampler.observe(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!((sampler.last_count, sampler.last_tasks), (1, 8));
}

/// The script's reading at its exit raises the peak up to what the kernel showed of
/// the tree's resident size plus the peak it reports for the script, and no higher:
/// a report past that is not a proportional size.
#[test]
fn an_exit_reading_counts_up_to_the_kernels_resident_sizes() {
    // This test's own process: resident whatever the machine does (a child just
    // spawned may be read between its fork and its exec, with nothing resident).
    let mut sampler = TreeSampler::default();
    sampler.observe(std::process::id());
    let seen = sampler.resident_high;
    assert!(seen > 0, "a live process has pages resident");
    assert!(!sampler.measured);
    sampler.count_exit(seen + (1 << 20) + 1, 1 << 20);
    assert_eq!((sampler.measured, sampler.peak.total()), (false, 0));
    sampler.count_exit(seen + (1 << 20), 1 << 20);
    assert!(sampler.measured);
    assert_eq!(sampler.peak.total(), seen + (1 << 20));
    assert_eq!(sampler.peak_source, MemorySource::Pss);
    // Below the peak it changes nothing.
    sampler.count_exit(seen, 1 << 20);
    assert_eq!(sampler.peak.total(), seen + (1 << 20));
}

/// A lone process that python3 runs: each line on its stdin is a statement it runs,
/// answered by a line on its stdout once done.
fn obedient_python() -> std::process::Child {
    let program = "import sys\n\
        for line in sys.stdin:\n\
        \x20   exec(line)\n\
        \x20   print('done', flush=True)\n";
    Command::new("python3")
        .args(["-c", program])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Has the child run `statement` and waits for its answer.
fn tell(child: &mut std::process::Child, statement: &str) {
    use std::io::{BufRead, Write};
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "{statement}").unwrap();
    stdin.flush().unwrap();
    let mut answer = String::new();
    let stdout = child.stdout.as_mut().unwrap();
    std::io::BufReader::new(stdout)
        .read_line(&mut answer)
        .unwrap();
    assert_eq!(answer.trim(), "done");
}

/// Between proportional reads a lone process's figure is the last read plus the
/// anonymous pages it added since: a 64 MiB block shows at the next sample, to the
/// page, with no walk of its page tables (the next read is held off); 64 MiB of a
/// file it maps and reads (file pages, which count a share) do not.
#[test]
fn between_reads_the_anonymous_pages_a_process_adds_count_without_a_walk() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pages");
    std::fs::write(&file, vec![1u8; 64 << 20]).unwrap();
    let mut child = obedient_python();
    tell(&mut child, "import mmap");
    let mut sampler = TreeSampler::default();
    let first = sampler.sample(child.id());
    sampler.pace.hold_for(std::time::Duration::from_secs(3600));
    let read_at = sampler.anonymous_at_read;
    tell(&mut child, "block = bytearray(b'\\x01') * (64 << 20)");
    let grown = sampler.sample(child.id());
    let resident_before_file = sampler.last_resident;
    let mapped = format!(
        "f = open({:?}, 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); \
         s = sum(m[i] for i in range(0, len(m), 4096))",
        file.display().to_string()
    );
    tell(&mut child, &mapped);
    let after_file = sampler.sample(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        sampler.anonymous_at_read, read_at,
        "no read was due: no walk"
    );
    let added = grown.rss.saturating_sub(first.rss);
    assert!(
        (64 * MIB..72 * MIB).contains(&added),
        "{first:?} then {grown:?}"
    );
    let by_file = after_file.rss.saturating_sub(grown.rss);
    assert!(by_file < 8 * MIB, "{grown:?} then {after_file:?}");
    let file_resident = sampler.last_resident.saturating_sub(resident_before_file);
    assert!(
        file_resident >= 56 * MIB,
        "the file's pages are resident: {file_resident}"
    );
}

/// Whatever a lone process does between a walk and the runner's next look at it, the
/// figure between walks follows its anonymous pages from what the walk itself
/// counted: a 64 MiB block held at the walk, let go and taken again right after it
/// (the runner's thread put off the CPU there, a block being filled over and over),
/// is counted once. A build that took the reference count from `statm` after the
/// walk counted the block twice where the process let it go in between: 38 MiB over
/// in a CI run of `tests/memory.rs`'s churn case.
#[test]
fn a_block_let_go_and_taken_again_right_after_a_walk_counts_once() {
    const MIB: u64 = 1 << 20;
    let child = std::sync::Arc::new(std::sync::Mutex::new(obedient_python()));
    let pid = child.lock().unwrap().id();
    tell(
        &mut child.lock().unwrap(),
        "block = bytearray(b'\\x01') * (64 << 20)",
    );
    let mut sampler = TreeSampler::default();
    let in_hook = child.clone();
    sampler.after_walk = Some(Box::new(move || {
        let statement = "del block; part = bytearray(b'\\x01') * (16 << 20)";
        tell(&mut in_hook.lock().unwrap(), statement);
    }));
    let walked = sampler.sample(pid);
    sampler.after_walk = None;
    sampler.pace.hold_for(std::time::Duration::from_secs(3600));
    let read_at = sampler.anonymous_at_read;
    let statement = "del part; block = bytearray(b'\\x01') * (64 << 20)";
    tell(&mut child.lock().unwrap(), statement);
    let between = sampler.sample(pid);
    let mut child = child.lock().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(sampler.anonymous_at_read, read_at, "no walk between");
    // It holds what it held at the walk (a block of the same size), so the figure is
    // the walk's, give or take the interpreter's own small allocations; not the file
    // pages' share, which moves as other processes map the same libraries and end.
    assert!(
        between.rss.abs_diff(walked.rss) < 4 * MIB,
        "walked {:.1} MiB, between walks {:.1} MiB",
        walked.rss as f64 / MIB as f64,
        between.rss as f64 / MIB as f64
    );
}
