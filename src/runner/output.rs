//! Streams a child's output pipe to its log file without holding it in memory,
//! keeping only a bounded tail of the last lines for the result.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::OwnedFd;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

/// Bytes of the stream's end kept to extract the last lines.
const TAIL_BYTES: usize = 16 * 1024;

/// What a drained stream left behind.
#[derive(Debug, Default, Clone)]
pub struct Drained {
    /// Bytes read from the pipe and written to the log.
    pub bytes: u64,
    /// The last lines, when asked for.
    pub tail: Vec<String>,
    /// A write to the log failed; reading went on so the child never blocks.
    pub write_error: Option<String>,
}

/// Spawns a task that copies `pipe` to `file` until end-of-file, keeping up to
/// `tail_lines` final lines.
pub fn drain(
    source: impl Into<OwnedFd>,
    mut file: std::fs::File,
    tail_lines: usize,
) -> tokio::task::JoinHandle<Drained> {
    let fd: OwnedFd = source.into();
    tokio::spawn(async move {
        let mut out = Drained::default();
        let mut rx = match pipe::Receiver::from_owned_fd(fd) {
            Ok(rx) => rx,
            Err(e) => {
                out.write_error = Some(format!("failed to read the pipe: {e}"));
                return out;
            }
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: VecDeque<u8> = VecDeque::with_capacity(TAIL_BYTES);
        loop {
            let n = match rx.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            out.bytes += n as u64;
            if out.write_error.is_none() {
                if let Err(e) = file.write_all(&buf[..n]) {
                    out.write_error = Some(e.to_string());
                }
            }
            if tail_lines > 0 {
                let chunk = &buf[n.saturating_sub(TAIL_BYTES)..n];
                let excess = (tail.len() + chunk.len()).saturating_sub(TAIL_BYTES);
                tail.drain(..excess.min(tail.len()));
                tail.extend(chunk);
            }
        }
        let _ = file.flush();
        out.tail = last_lines(tail.make_contiguous(), tail_lines);
        out
    })
}

/// The last `n` non-empty lines of `bytes`, decoded lossily.
pub fn last_lines(bytes: &[u8], n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| l.trim_end().to_string())
        .collect();
    lines.reverse();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_order_and_skips_blanks() {
        assert_eq!(last_lines(b"a\nb\n\nc\n", 2), vec!["b", "c"]);
        assert_eq!(last_lines(b"x", 5), vec!["x"]);
        assert!(last_lines(b"a\nb", 0).is_empty());
    }

    #[tokio::test]
    async fn drains_a_large_stream_to_file_with_a_bounded_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("out.log");
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let task = drain(
            child.stdout.take().unwrap(),
            std::fs::File::create(&log).unwrap(),
            3,
        );
        let drained = task.await.unwrap();
        child.wait().unwrap();
        let written = std::fs::read_to_string(&log).unwrap();
        assert_eq!(drained.bytes, written.len() as u64);
        assert_eq!(written.lines().count(), 20000);
        assert_eq!(drained.tail, vec!["line-19997", "line-19998", "line-19999"]);
    }
}
