//! Draining real pipes: completeness, the tail, the cap and the scanner.

use super::*;
use std::process::{Command, Stdio};

async fn drain_command(script: &str, opts: DrainOptions) -> (Drained, String) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("out.log");
    let mut child = Command::new("sh")
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let task = drain(
        child.stdout.take().unwrap(),
        std::fs::File::create(&log).unwrap(),
        opts,
    );
    let drained = task.handle.await.unwrap();
    child.wait().unwrap();
    (drained, std::fs::read_to_string(&log).unwrap())
}

const LINES: &str = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done";

#[test]
fn last_lines_keeps_order_and_skips_blanks() {
    assert_eq!(last_lines(b"a\nb\n\nc\n", 2), vec!["b", "c"]);
    assert_eq!(last_lines(b"x", 5), vec!["x"]);
    assert!(last_lines(b"a\nb", 0).is_empty());
}

#[tokio::test]
async fn drains_a_large_stream_to_file_with_a_bounded_tail() {
    let opts = DrainOptions {
        tail_lines: 3,
        ..Default::default()
    };
    let (drained, written) = drain_command(LINES, opts).await;
    assert_eq!(drained.bytes, written.len() as u64);
    assert_eq!(written.lines().count(), 20000);
    assert_eq!(drained.tail, vec!["line-19997", "line-19998", "line-19999"]);
    assert_eq!(drained.cut_bytes, 0);
}

#[tokio::test]
async fn the_cap_keeps_head_and_end_and_says_what_was_cut() {
    let opts = DrainOptions {
        max_bytes: Some(2000),
        ..Default::default()
    };
    let (drained, written) = drain_command(LINES, opts).await;
    assert!(written.starts_with("line-0\nline-1\n"));
    assert!(written.ends_with("line-19999\n"));
    assert!(written.contains("bytes cut here by --max-log-size"));
    assert_eq!(drained.cut_bytes, drained.bytes - 2000);
    assert!(written.len() < 2100, "{}", written.len());
}

#[tokio::test]
async fn a_stream_under_the_cap_is_untouched() {
    let opts = DrainOptions {
        max_bytes: Some(10_000_000),
        ..Default::default()
    };
    let (drained, written) = drain_command(LINES, opts).await;
    assert_eq!(drained.cut_bytes, 0);
    assert_eq!(written.lines().count(), 20000);
}

#[tokio::test]
async fn the_scanner_sees_lines_split_across_reads() {
    let script = "printf 'Traceback (most recent call last):\\n  File \"x.py\"\\nValue'; sleep 0.2; printf 'Error: split line\\n'";
    let opts = DrainOptions {
        scan: true,
        ..Default::default()
    };
    let (drained, _) = drain_command(script, opts).await;
    let (x, _) = drained.scan.exception.unwrap();
    assert_eq!(
        (x.kind.as_str(), x.message.as_str()),
        ("ValueError", "split line")
    );
}

/// Told to stop while the pipe still holds output and a stranger keeps it open: the
/// output in the pipe is the script's all the same and is kept; the pipe is reported
/// as held open.
#[tokio::test]
async fn a_stop_keeps_what_the_pipe_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("out.log");
    let (read, write) = crate::runner::sys::pipe().unwrap();
    let chunk = vec![b'x'; 60 * 1024];
    std::fs::File::from(write.try_clone().unwrap())
        .write_all(&chunk)
        .unwrap();
    let task = drain(
        read,
        std::fs::File::create(&log).unwrap(),
        DrainOptions::default(),
    );
    // The stop arrives before the drain has read anything.
    task.stop.send(true).unwrap();
    let drained = task.handle.await.unwrap();
    assert_eq!(
        drained.bytes,
        chunk.len() as u64,
        "nothing in the pipe is lost"
    );
    assert_eq!(std::fs::metadata(&log).unwrap().len(), chunk.len() as u64);
    assert!(drained.held_open, "the write end is still open");
    drop(write);
}
