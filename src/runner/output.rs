//! Streams a child's output pipe to its log file without holding it in memory. It
//! keeps a bounded tail of the last lines, can cap the log (keeping its head and its
//! tail), and can show every line to the stderr scanner that classification reads.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::OwnedFd;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::classify::StderrScan;

/// Bytes of the stream's end kept to extract the last lines.
const TAIL_BYTES: usize = 16 * 1024;
/// Most bytes of a capped log's end kept in memory until the stream ends.
const MAX_KEPT_END: u64 = 4 * 1024 * 1024;
/// Most bytes read from a pipe after the drain was told to stop.
const MAX_LATE_BYTES: usize = 64 * 1024 * 1024;
/// Longest partial line buffered for the scanner.
const MAX_PENDING_LINE: usize = 8 * 1024;

/// How to drain one stream.
#[derive(Debug, Clone, Default)]
pub struct DrainOptions {
    /// Last lines to keep for the result (0 = none).
    pub tail_lines: usize,
    /// Cap on the log file's size, keeping its head and its end.
    pub max_bytes: Option<u64>,
    /// Feed every line to a [`StderrScan`].
    pub scan: bool,
    /// `--no-capture`: send every line into the event stream as it comes.
    pub echo: Option<LineEcho>,
    /// A warm script's stderr: leave the warm start's own frames out of its stack
    /// dumps ([`frames`]).
    pub warm_frames: bool,
}

/// Where `--no-capture` sends a stream's lines.
#[derive(Debug, Clone)]
pub struct LineEcho {
    pub events: crate::events::EventSender,
    pub id: String,
    pub attempt: u32,
    pub stream: crate::events::Stream,
}

impl LineEcho {
    fn line(&self, bytes: &[u8]) {
        self.events.emit(crate::events::RunEvent::Output {
            id: self.id.clone(),
            attempt: self.attempt,
            stream: self.stream,
            line: String::from_utf8_lossy(bytes)
                .trim_end_matches('\r')
                .to_string(),
        });
    }
}

/// What a drained stream left behind.
#[derive(Debug, Default, Clone)]
pub struct Drained {
    /// Bytes read from the pipe.
    pub bytes: u64,
    /// The last lines, when asked for.
    pub tail: Vec<String>,
    /// Bytes left out of the log by the cap (0 when not cut).
    pub cut_bytes: u64,
    /// The pipe was still open, and empty, when the drain was told to stop: a process
    /// outside the script's tree held it.
    pub held_open: bool,
    /// A write to the log failed; reading went on so the child never blocks.
    pub write_error: Option<String>,
    /// That failure was a full file system (`ENOSPC`, `EDQUOT`): the runner halts.
    pub disk_full: bool,
    /// What the scanner saw, when asked for.
    pub scan: StderrScan,
}

/// The log file and the cap's bookkeeping.
struct CappedLog {
    file: std::fs::File,
    head_limit: u64,
    written: u64,
    end: VecDeque<u8>,
    end_limit: usize,
    dropped: u64,
    error: Option<std::io::Error>,
}

impl CappedLog {
    fn new(file: std::fs::File, max: Option<u64>) -> Self {
        let (head_limit, end_limit) = match max {
            None => (u64::MAX, 0),
            Some(max) => {
                let end = (max / 2).min(MAX_KEPT_END);
                (max - end, end as usize)
            }
        };
        CappedLog {
            file,
            head_limit,
            written: 0,
            end: VecDeque::new(),
            end_limit,
            dropped: 0,
            error: None,
        }
    }

    fn write(&mut self, mut data: &[u8]) {
        if self.written < self.head_limit {
            let n = (self.head_limit - self.written).min(data.len() as u64) as usize;
            if self.error.is_none() {
                if let Err(e) = self.file.write_all(&data[..n]) {
                    self.error = Some(e);
                }
            }
            self.written += n as u64;
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        let excess = (self.end.len() + data.len()).saturating_sub(self.end_limit);
        let from_end = excess.min(self.end.len());
        self.end.drain(..from_end);
        self.dropped += from_end as u64;
        let skip = excess - from_end;
        self.dropped += skip as u64;
        self.end.extend(&data[skip..]);
    }

    /// Writes the kept end and flushes. A failure here is reported like any other
    /// (a log cut short by a full disk must say so).
    fn finish(mut self) -> (u64, Option<std::io::Error>) {
        let marker = match self.dropped {
            0 => String::new(),
            n => format!("\n[jax-runner: {n} bytes cut here by --max-log-size]\n"),
        };
        let (a, b) = self.end.as_slices();
        let written = self
            .file
            .write_all(marker.as_bytes())
            .and_then(|_| self.file.write_all(a))
            .and_then(|_| self.file.write_all(b))
            .and_then(|_| self.file.flush());
        if let (None, Err(e)) = (&self.error, written) {
            self.error = Some(e);
        }
        (self.dropped, self.error)
    }
}

/// A running drain: await `handle`; `stop` makes it finish early with what it has
/// (for a pipe some stranger keeps open).
pub struct Drainer {
    pub handle: tokio::task::JoinHandle<Drained>,
    pub stop: watch::Sender<bool>,
}

/// Spawns a task that copies `source` to `file` until end-of-file or a stop.
pub fn drain(source: impl Into<OwnedFd>, file: std::fs::File, opts: DrainOptions) -> Drainer {
    let fd: OwnedFd = source.into();
    let (stop, mut stopped) = watch::channel(false);
    let handle = tokio::spawn(async move {
        let mut out = Drained::default();
        let mut rx = match pipe::Receiver::from_owned_fd(fd) {
            Ok(rx) => rx,
            Err(e) => {
                out.write_error = Some(format!("failed to read the pipe: {e}"));
                return out;
            }
        };
        let mut log = CappedLog::new(file, opts.max_bytes);
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: VecDeque<u8> = VecDeque::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut echoed: Vec<u8> = Vec::new();
        let echo = opts.echo.clone();
        let mut frames = opts.warm_frames.then(frames::WarmFrames::default);
        let mut take = |chunk: &[u8], out: &mut Drained| {
            if let Some(echo) = &echo {
                split_lines(&mut echoed, chunk, |line| echo.line(line));
            }
            out.bytes += chunk.len() as u64;
            log.write(chunk);
            if opts.tail_lines > 0 {
                let keep = &chunk[chunk.len().saturating_sub(TAIL_BYTES)..];
                let excess = (tail.len() + keep.len()).saturating_sub(TAIL_BYTES);
                tail.drain(..excess.min(tail.len()));
                tail.extend(keep);
            }
            if opts.scan {
                scan_lines(&mut out.scan, &mut pending, chunk);
            }
        };
        let mut pass = |chunk: &[u8], out: &mut Drained| match frames.as_mut() {
            Some(f) => f.feed(chunk, &mut |c| take(c, out)),
            None => take(chunk, out),
        };
        loop {
            let read = tokio::select! {
                r = rx.read(&mut buf) => Some(r),
                _ = stopped.changed() => None,
            };
            match read {
                // Told to stop: whatever is already in the pipe is the script's output
                // all the same (a busy runner may simply be late to read it). Take it
                // all; only a pipe that is empty and still open is held by a stranger.
                None => {
                    let held = read_what_is_there(&rx, &mut buf, |c| pass(c, &mut out));
                    out.held_open = held;
                    break;
                }
                Some(Ok(0)) => break,
                Some(Ok(n)) => pass(&buf[..n], &mut out),
                Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Some(Err(_)) => break,
            }
        }
        if let Some(f) = frames.as_mut() {
            f.finish(&mut |c| take(c, &mut out));
        }
        if opts.scan && !pending.is_empty() {
            out.scan.line(&pending);
        }
        if let (Some(echo), false) = (&opts.echo, echoed.is_empty()) {
            echo.line(&echoed);
        }
        let (cut, error) = log.finish();
        out.cut_bytes = cut;
        out.disk_full = error.as_ref().is_some_and(crate::halt::is_disk_full);
        out.write_error = error.map(|e| e.to_string());
        out.tail = last_lines(tail.make_contiguous(), opts.tail_lines);
        out
    });
    Drainer { handle, stop }
}

/// Reads what the pipe holds without waiting, up to a bound (a stranger writing
/// without end must not hold the runner). Returns true when the pipe ended empty but
/// open: someone outside the script's tree still holds its write end.
fn read_what_is_there(rx: &pipe::Receiver, buf: &mut [u8], mut take: impl FnMut(&[u8])) -> bool {
    let mut budget: usize = MAX_LATE_BYTES;
    loop {
        // A plain read on the non-blocking descriptor: tokio's `try_read` would answer
        // from its own idea of readiness, which may not have caught up yet.
        match rustix::io::read(rx, &mut *buf).map_err(std::io::Error::from) {
            Ok(0) => return false,
            Ok(n) => {
                take(&buf[..n]);
                budget = budget.saturating_sub(n);
                if budget == 0 {
                    return true;
                }
            }
            Err(e) => match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return true,
                _ => return false,
            },
        }
    }
}

fn scan_lines(scan: &mut StderrScan, pending: &mut Vec<u8>, chunk: &[u8]) {
    split_lines(pending, chunk, |line| scan.line(line));
}

/// Calls `each` with every whole line of `chunk`, joined to the partial line left in
/// `pending` by the chunk before; keeps the new partial line (bounded) in `pending`.
fn split_lines(pending: &mut Vec<u8>, chunk: &[u8], mut each: impl FnMut(&[u8])) {
    let mut rest = chunk;
    while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
        if pending.is_empty() {
            each(&rest[..pos]);
        } else {
            pending.extend_from_slice(&rest[..pos]);
            each(pending);
            pending.clear();
        }
        rest = &rest[pos + 1..];
    }
    let room = MAX_PENDING_LINE.saturating_sub(pending.len());
    pending.extend_from_slice(&rest[..rest.len().min(room)]);
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

pub mod frames;
#[cfg(test)]
mod tests;
