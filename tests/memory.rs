//! Memory as the kernel counts it (issue 31): a script whose twenty forked children
//! share one large block records about the block, not twenty-one of it, in every mode
//! (as the ordinary test user and as root; warm and cold; bwrap, bwrap hidden, no
//! user namespaces), and the `--memory-limit` watchdog does not kill it for memory it
//! does not hold. The fixture reads the kernel's own figure for its tree (its
//! processes' proportional set sizes, summed, once they all hold the block) and the
//! recorded peak must lie within 20% of it.
//!
//! A script's proportional sizes are read only where a read can find something
//! (`src/runner/pace.rs`), and the script reads its own as it exits: a block taken
//! seconds in still makes the peak, so do one taken in the script's last act and a
//! warm script's copies of the zygote's pages, and the watchdog still stops a script
//! that passes its limit late.

mod common;

use common::modes::*;
use common::user::*;
use common::*;
use serde_json::Value;

/// The block the fixture's children share, MiB.
const BLOCK_MB: f64 = 1024.0;

/// Runs `fixture` as `how` says with `args` added, where this host can: the tree
/// (its files go with it), the runner's output and the script's result, whose start
/// (warm or cold) is checked.
fn launch(
    account: &Account,
    how: How,
    fixture: &str,
    args: &[&str],
    case: &str,
) -> Option<(Tree, std::process::Output, Value)> {
    if !root_here(how, case) || !bwrap_here(how, case) {
        return None;
    }
    let (tree, mut cmd) = setup(account, how, fixture);
    cmd.args(args);
    let out = output(account, how, cmd);
    let r = tree.result(fixture.trim_end_matches(".py"));
    check_start(&r, how, account, case);
    Some((tree, out, r))
}

/// What the script wrote of itself in its data folder.
fn kernel_figures(r: &Value) -> Value {
    read_json(&std::path::Path::new(r["data_dir"].as_str().unwrap()).join("kernel.json"))
}

/// Runs `fixture` as `how` says with `args` added, which must exit 0; the result and
/// what the fixture read of the kernel.
fn run_fixture(
    account: &Account,
    how: How,
    fixture: &str,
    args: &[&str],
    case: &str,
) -> Option<(Value, Value)> {
    let (_tree, out, r) = launch(account, how, fixture, args, case)?;
    assert_eq!(code(&out), 0, "{case}: {}", stderr(&out));
    let kernel = kernel_figures(&r);
    Some((r, kernel))
}

/// Runs `shared_block.py` as `how` says with `args` added; the result and what the
/// fixture read of the kernel.
fn run(account: &Account, how: How, args: &[&str], case: &str) -> Option<(Value, Value)> {
    let (r, kernel) = run_fixture(account, how, "shared_block.py", args, case)?;
    assert_eq!(r["status"], "succeeded", "{case}: {}", r["stderr_tail"]);
    assert_eq!(kernel["children_failed"], 0, "{case}: {kernel}");
    assert_eq!(kernel["block_mb"], BLOCK_MB, "{case}");
    Some((r, kernel))
}

/// The recorded peak is the kernel's figure give or take 20%, and says what it is.
fn check_peak(r: &Value, kernel: &Value, sources: &[&str], case: &str) {
    let peak = r["peak_memory_mb"].as_f64().unwrap();
    let pss = kernel["pss_mb"].as_f64().unwrap();
    let source = r["memory_source"].as_str().unwrap_or("none");
    assert!(
        sources.contains(&source),
        "{case}: the figure is {source}, expected one of {sources:?}"
    );
    assert!(
        (peak - pss).abs() <= 0.2 * pss,
        "{case}: recorded {peak:.0} MiB against the kernel's {pss:.0} MiB \
         (resident sizes summed: {} MiB)",
        kernel["rss_mb"]
    );
    assert!(peak < 2.0 * BLOCK_MB, "{case}: {peak:.0} MiB");
    assert_eq!(r["attempts"][0]["memory_source"], source, "{case}");
}

fn case(account: Account, how: How) {
    let case = format!("shared block {}", describe(&account, how));
    if let Some((r, kernel)) = run(&account, how, &[], &case) {
        check_peak(&r, &kernel, &["pss"], &case);
    }
}

#[test]
fn as_user_warm_without_bwrap_a_shared_block_counts_once() {
    case(Account::user(), WARM);
}

#[test]
fn as_user_cold_without_bwrap_a_shared_block_counts_once() {
    case(Account::user(), COLD);
}

#[test]
fn as_user_warm_with_bwrap_a_shared_block_counts_once() {
    case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_user_warm_without_user_namespaces_a_shared_block_counts_once() {
    case(Account::user(), WARM_NO_USERNS);
}

#[test]
fn as_root_warm_with_bwrap_a_shared_block_counts_once() {
    if let Some(root) = Account::root("shared block as root, warm, bwrap on PATH") {
        case(root, WARM_BWRAP);
    }
}

#[test]
fn as_root_warm_without_bwrap_a_shared_block_counts_once() {
    if let Some(root) = Account::root("shared block as root, warm, bwrap hidden") {
        case(root, WARM);
    }
}

#[test]
fn as_root_cold_without_bwrap_a_shared_block_counts_once() {
    if let Some(root) = Account::root("shared block as root, cold, bwrap hidden") {
        case(root, COLD);
    }
}

/// Under `--memory-limit` above the block: the kernel's cgroup where the host gives
/// one (root), else the watchdog; either way the script is not killed for the
/// twenty-one blocks its processes' resident sizes add up to.
fn limit_case(account: Account, how: How) {
    let case = format!(
        "shared block under --memory-limit 2G {}",
        describe(&account, how)
    );
    if let Some((r, kernel)) = run(&account, how, &["--memory-limit", "2G"], &case) {
        let sources: &[&str] = match account.is_root() {
            true => &["cgroup"],
            false => &["cgroup", "pss"],
        };
        check_peak(&r, &kernel, sources, &case);
    }
}

#[test]
fn as_user_under_a_memory_limit_a_shared_block_is_not_killed() {
    limit_case(Account::user(), WARM);
}

#[test]
fn as_root_under_a_memory_limit_the_cgroup_counts_a_shared_block_once() {
    if let Some(root) = Account::root("shared block as root under --memory-limit") {
        limit_case(root, WARM_BWRAP);
    }
}

/// `late_block.py` (a 300 MiB block taken 4 s in, held a second) as `how` says,
/// `--retries 0` and `args` added.
fn run_late(
    account: &Account,
    how: How,
    args: &[&str],
    case: &str,
) -> Option<(Tree, std::process::Output, Value)> {
    let args = [&["--retries", "0"], args].concat();
    let launched = launch(account, how, "late_block.py", &args, case)?;
    let out = &launched.1;
    assert!(
        matches!(code(out), 0 | 1),
        "{case}: exit {:?}: {}",
        out.status,
        stderr(out)
    );
    Some(launched)
}

fn late_block_case(account: Account, how: How) {
    let case = format!(
        "a block taken after the first seconds {}",
        describe(&account, how)
    );
    block_in_peak(account, how, &[], &case);
}

/// The block, taken as `args` say, is in the peak, read as a proportional size.
fn block_in_peak(account: Account, how: How, args: &[&str], case: &str) {
    if let Some((_tree, _, r)) = run_late(&account, how, args, case) {
        assert_eq!(r["status"], "succeeded", "{case}: {}", r["stderr_tail"]);
        let kernel = kernel_figures(&r);
        let (peak, pss) = (
            r["peak_memory_mb"].as_f64().unwrap(),
            kernel["pss_mb"].as_f64().unwrap(),
        );
        assert_eq!(r["memory_source"], "pss", "{case}");
        assert!(
            peak >= 0.8 * pss && peak >= 0.8 * kernel["block_mb"].as_f64().unwrap(),
            "{case}: recorded {peak:.0} MiB, the script read {pss:.0} MiB of itself"
        );
    }
}

/// A block taken in the script's last act, an exit handler 0.7 s in: the runner's
/// paced reads of its memory find it whole only where a tick falls in the few
/// milliseconds between the block's last page and the exit, so the script's own
/// reading as it exits is what puts it in the peak every time (a build without that
/// reading failed this in 1 of 6 runs; the copy-on-write case above, every time).
fn last_moment_case(account: Account, how: How) {
    let case = format!(
        "a block taken in the last moments {}",
        describe(&account, how)
    );
    let args = [
        "--env",
        "LATE_BLOCK_AFTER_S=0.7",
        "--env",
        "LATE_BLOCK_AT_EXIT=1",
    ];
    block_in_peak(account, how, &args, &case);
}

/// A block held 0.25 s, then freed, the script living on 1.5 s: the pace walks the
/// tree's page tables at most every half second, so what counts the block is the
/// runner's count of the anonymous pages a lone process adds between walks, at the
/// next tick (see `src/runner/pace.rs`). A build that kept the last walk's figure
/// between walks recorded the block only where a walk fell in the hold: it failed
/// the warm case in 3 of 3 runs, the cold one in 1 of 3. As the ordinary user:
/// root's scripts have a memory cgroup, whose own count is the figure.
fn brief_block_case(account: Account, how: How) {
    let case = format!("a block held briefly {}", describe(&account, how));
    let args = [
        "--env",
        "LATE_BLOCK_AFTER_S=1",
        "--env",
        "LATE_BLOCK_HOLD_S=0.25",
        "--env",
        "LATE_BLOCK_THEN_S=1.5",
    ];
    block_in_peak(account, how, &args, &case);
}

#[test]
fn as_user_warm_a_block_held_briefly_and_freed_is_in_the_peak() {
    brief_block_case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_user_cold_a_block_held_briefly_and_freed_is_in_the_peak() {
    brief_block_case(Account::user(), COLD);
}

/// `churn_block.py`: a 200 MiB block filled at full speed again and again for 2 s,
/// then held, while the script reads its own proportional size every few
/// milliseconds. The peak holds the block and is no more than that highest reading,
/// give or take 2 MiB and 2%: between walks the runner counts the anonymous pages a
/// process adds, so pages faulted in while a walk runs must not count twice, nor a
/// fork's pages, which it shares. A
/// build that counted from the tick's start, not from the walk's end, failed the warm
/// case in 2 of 4 runs (13 MiB over); one that went on counting when the tree's
/// process changed (a warm sandbox's script appears under its namespace's init after
/// the first read) failed in 2 of 3 (up to 54 MiB over); one that took the count it
/// added to from `statm` just after the walk, not from the walk itself, failed once
/// in CI (38 MiB over: the block let go and refilled in between, the runner's thread
/// off the CPU; `src/runner/tree/tests.rs` makes that happen every time). Warm only: a cold script's
/// share of the interpreter's and jax's library pages moves with every process that
/// maps them, which the tests beside it start and end (a cold case recorded 26 MiB
/// over its own readings, and 38 MiB under, in a full run of this file).
fn churn_case(account: Account, how: How) {
    let case = format!("a block filled again and again {}", describe(&account, how));
    let Some((r, kernel)) = run_fixture(&account, how, "churn_block.py", &[], &case) else {
        return;
    };
    let (held, block) = (
        kernel["pss_mb"].as_f64().unwrap(),
        kernel["block_mb"].as_f64().unwrap(),
    );
    let peak = r["peak_memory_mb"].as_f64().unwrap();
    assert_eq!(r["memory_source"], "pss", "{case}");
    // Below, the block is the bound: the script's own highest reading also counts its
    // share of library pages, which grows when another process that mapped them ends,
    // between two of the runner's walks.
    assert!(
        peak >= block && peak <= 1.02 * held + 2.0,
        "{case}: recorded {peak:.1} MiB; the script's own highest reading was {held:.1} \
         MiB, its block {block:.0} MiB"
    );
}

#[test]
fn as_user_warm_a_block_filled_again_and_again_counts_once() {
    churn_case(Account::user(), WARM_BWRAP);
}

/// `copy_on_write.py`: a warm script whose proportional size alone grows (it copies
/// the zygote's pages on write, its resident size unchanged), a quarter of a second
/// in, and which ends before the pace's next read. Its own reading as it exits is
/// what the peak holds: a build without that reading recorded the size before the
/// copies (24 MiB against 40).
fn copy_on_write_case(account: Account, how: How) {
    let case = format!("copies of the zygote's pages {}", describe(&account, how));
    let Some((r, kernel)) = run_fixture(&account, how, "copy_on_write.py", &[], &case) else {
        return;
    };
    let (before, after) = (
        kernel["pss_before_mb"].as_f64().unwrap(),
        kernel["pss_mb"].as_f64().unwrap(),
    );
    assert!(
        after >= 1.2 * before,
        "{case}: the fixture copied too little to tell ({before:.0} to {after:.0} MiB)"
    );
    let peak = r["peak_memory_mb"].as_f64().unwrap();
    assert_eq!(r["memory_source"], "pss", "{case}");
    assert!(
        peak >= 0.95 * after,
        "{case}: recorded {peak:.0} MiB; the script read {before:.0} MiB of itself \
         before its copies and {after:.0} MiB after"
    );
}

#[test]
fn as_user_warm_with_bwrap_copies_of_the_zygotes_pages_are_in_the_peak() {
    copy_on_write_case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_root_warm_without_bwrap_copies_of_the_zygotes_pages_are_in_the_peak() {
    if let Some(root) = Account::root("copies of the zygote's pages as root, warm, no bwrap") {
        copy_on_write_case(root, WARM);
    }
}

#[test]
fn as_user_warm_a_block_taken_in_the_last_moments_is_in_the_peak() {
    last_moment_case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_root_cold_a_block_taken_in_the_last_moments_is_in_the_peak() {
    if let Some(root) = Account::root("a block taken in the last moments as root, cold") {
        last_moment_case(root, COLD);
    }
}

#[test]
fn as_user_warm_a_block_taken_after_the_first_seconds_is_in_the_peak() {
    late_block_case(Account::user(), WARM_BWRAP);
}

#[test]
fn as_user_cold_a_block_taken_after_the_first_seconds_is_in_the_peak() {
    late_block_case(Account::user(), COLD);
}

/// As the ordinary user no cgroup holds the limit: the runner's watchdog stops the
/// script when its block passes `--memory-limit`, seconds after its start.
#[test]
fn as_user_the_watchdog_stops_a_script_past_its_limit_after_the_first_seconds() {
    let account = Account::user();
    let case = format!(
        "late block past --memory-limit 200M {}",
        describe(&account, WARM_BWRAP)
    );
    if let Some((_tree, _, r)) = run_late(&account, WARM_BWRAP, &["--memory-limit", "200M"], &case)
    {
        assert_eq!(r["class"], "out_of_memory", "{case}: {r}");
        assert_eq!(
            r["sandbox"]["memory_limit_enforced_by"], "watchdog",
            "{case}"
        );
        // Stopped once its block came, 4 s in, and before it let the block go.
        let took = r["attempts"][0]["duration_s"].as_f64().unwrap();
        assert!(
            took >= 4.0,
            "{case}: stopped {took:.1} s in, before its block"
        );
        let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
        assert!(!log.contains("True"), "{case}: it finished: {log}");
    }
}

/// A script whose main thread ended alone holds its memory in the thread that lives
/// on, where `/proc/<pid>` shows a zombie's nothing (no memory, no root to see the
/// scratch from): the watchdog still counts it, `into` its memory or (`tmp`) its
/// scratch, and stops the script past its limit.
fn headless_case(account: Account, how: How, into: &str) {
    let case = format!(
        "headless 300 MiB in its {into} past --memory-limit 200M {}",
        describe(&account, how)
    );
    let into = format!("HEADLESS_INTO={into}");
    let args = [
        "--memory-limit",
        "200M",
        "--retries",
        "0",
        "--timeout",
        "60",
        "--env",
        &into,
    ];
    if let Some((_tree, _, r)) = launch(&account, how, "memory_headless.py", &args, &case) {
        assert_eq!(r["class"], "out_of_memory", "{case}: {r}");
        let log = std::fs::read_to_string(r["stdout_log"].as_str().unwrap()).unwrap();
        assert!(
            log.contains("taking") && !log.contains("kept"),
            "{case}: {log}"
        );
    }
}

#[test]
fn as_user_warm_the_watchdog_counts_a_script_whose_main_thread_exited() {
    headless_case(Account::user(), WARM_BWRAP, "memory");
}

#[test]
fn as_user_cold_the_watchdog_counts_a_script_whose_main_thread_exited() {
    headless_case(Account::user(), COLD, "memory");
}

#[test]
fn as_user_warm_the_watchdog_counts_the_scratch_of_a_script_whose_main_thread_exited() {
    headless_case(Account::user(), WARM_BWRAP, "tmp");
}
