//! Why a script did not succeed, in the words every report uses: "exit code 3",
//! "killed by SIGABRT", "no exit within 30s (timed out)", "out of memory at 1.0 GiB",
//! followed by the last lines of standard error, or of standard output when the script
//! wrote nothing to standard error. The terminal, the HTML, Markdown and JUnit
//! reports and the events all take their words from here, so they never disagree.

use std::time::Duration;

use super::{Attempt, FailureClass, ScriptResult, SourceFrame, Status};

/// The line an attempt the `--max-procs` watchdog killed is classified by (its
/// `matched_line`): the reason's hint knows the attempt by it.
pub const PROCESS_WATCHDOG: &str =
    "killed by the --max-procs watchdog: too many processes and threads";

/// Lines of standard output kept when standard error is empty.
pub const STDOUT_TAIL_LINES: usize = 20;
/// Bytes read from the end of a stdout log to find those lines.
const STDOUT_TAIL_BYTES: u64 = 16 * 1024;

/// How one attempt (or a script's final attempt) ended: the facts the words need.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub status: Status,
    pub class: FailureClass,
    pub return_code: Option<i32>,
    pub signal: Option<i32>,
    /// The attempt time limit, seconds.
    pub timeout_s: f64,
    /// `--memory-limit` when set, else the peak the script reached, MiB.
    pub memory_mb: f64,
    /// False when the script never started.
    pub started: bool,
}

impl Ending {
    /// The final attempt of `r`.
    pub fn of_result(r: &ScriptResult) -> Ending {
        Ending {
            status: r.status,
            class: r.class,
            return_code: r.return_code,
            signal: r.signal,
            timeout_s: r.timeout_s,
            memory_mb: r.sandbox.memory_limit_mb.unwrap_or(r.peak_memory_mb),
            started: !r.attempts.is_empty(),
        }
    }

    /// One attempt of `r`.
    pub fn of_attempt(a: &Attempt, r: &ScriptResult) -> Ending {
        Ending {
            status: a.status,
            class: a.class,
            return_code: a.return_code,
            signal: a.signal,
            timeout_s: r.timeout_s,
            memory_mb: r.sandbox.memory_limit_mb.unwrap_or(a.peak_memory_mb),
            started: true,
        }
    }

    /// The words for this ending; `None` for a success.
    pub fn words(&self) -> Option<String> {
        Some(match (self.status, self.class) {
            (Status::Succeeded, _) => return None,
            (_, FailureClass::TimedOut) | (Status::TimedOut, _) => {
                format!("no exit within {} (timed out)", duration(self.timeout_s))
            }
            (_, FailureClass::OutOfMemory) if self.memory_mb > 0.0 => {
                format!("out of memory at {}", size(self.memory_mb))
            }
            (_, FailureClass::OutOfMemory) => "out of memory".into(),
            (Status::Interrupted, _) if !self.started => "not started (interrupted)".into(),
            (Status::Skipped, _) => {
                "not started (the run stopped early: --fail-fast/--max-fail)".into()
            }
            _ => match (self.signal, self.return_code) {
                (Some(sig), _) => format!("killed by {}", signal_name(sig)),
                (None, Some(code)) => format!("exit code {code}"),
                (None, None) if self.status == Status::Interrupted => "interrupted".into(),
                (None, None) => format!("no exit code ({})", self.class.as_str()),
            },
        })
    }
}

/// A failed script's reason: the words, where in the user's own code, then the
/// output that explains them.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureReason {
    /// How it ended ("exit code 3", …).
    pub words: String,
    /// The user's own line it failed or was stopped at (`m/jax/model.py:6 in efe`),
    /// and that line's source, when a traceback or a stack dump named one.
    pub place: Option<(String, Option<String>)>,
    /// Whether the runner stopped it (a timeout, Ctrl-C): its output ends with a stack
    /// dump, not with the reason.
    pub stopped: bool,
    /// The user's line first (where there is one), then the last lines of standard
    /// error, or of standard output when stderr is empty.
    pub tail: Vec<String>,
    /// `stderr` or `stdout`: where the tail's output comes from.
    pub stream: &'static str,
    /// What to do about it, where the reason says (a missing module: how to add it).
    pub hint: Option<String>,
    /// The exception (`ValueError: bad`) that ends the one-line form, where the script
    /// died of it or its output shows nothing.
    pub exception: Option<String>,
}

impl FailureReason {
    /// The reason `r` failed; `None` when it succeeded. Reads the end of the stdout
    /// log when stderr is empty and `r.stdout_tail` is not filled in yet.
    pub fn of(r: &ScriptResult) -> Option<FailureReason> {
        let words = Ending::of_result(r).words()?;
        let (tail, stream) = if !r.stderr_tail.is_empty() {
            (r.stderr_tail.clone(), "stderr")
        } else if !r.stdout_tail.is_empty() {
            (r.stdout_tail.clone(), "stdout")
        } else {
            (last_lines(&r.stdout_log, STDOUT_TAIL_LINES), "stdout")
        };
        let place = r.user_frame.as_ref().map(|f| {
            let at = match f.function.as_str() {
                // A SyntaxError's place names no function.
                "" => format!("{}:{}", shown_file(r, f), f.line),
                function => format!("{}:{} in {function}", shown_file(r, f), f.line),
            };
            (at, f.source.clone())
        });
        // A stopped script's output ends with its stack dump, and so does a crashed
        // one's when its place came from faulthandler's (a fatal signal, no exit code).
        let stopped = matches!(r.status, Status::TimedOut | Status::Interrupted)
            || r.class == FailureClass::TimedOut
            || (r.signal.is_some() && r.return_code.is_none() && place.is_some());
        let exception = r.exception.as_ref().map(|x| match x.message.is_empty() {
            true => x.kind.clone(),
            false => format!("{}: {}", x.kind, x.message),
        });
        // The user's line leads: jax's frames can fill the whole tail above it.
        let mut lead: Vec<String> = Vec::new();
        if let Some((at, source)) = &place {
            lead.push(at.clone());
            lead.extend(source.as_ref().map(|s| format!("    {s}")));
            lead.extend(exception.clone());
            lead.push("…".into());
        }
        // The exception ends the one-line form where the script died of it (the
        // shim's hook saw it uncaught: a message of several lines, or one jax follows
        // with a link, ends below it) or the output shows nothing (a script that
        // closed its stderr). An exception only logged before the script exited keeps
        // its last line.
        let uncaught = r.jax.as_ref().and_then(|j| j.uncaught_exception.as_deref());
        let died_of_it =
            (r.exception.as_ref()).is_some_and(|x| uncaught == x.kind.rsplit('.').next());
        let exception =
            exception.filter(|_| died_of_it || tail.iter().all(|l| l.trim().is_empty()));
        lead.extend(tail);
        Some(FailureReason {
            words,
            place,
            stopped,
            exception,
            tail: lead,
            stream,
            hint: (r.exception.as_ref().and_then(missing_module_hint))
                .or_else(|| process_limit_hint(r)),
        })
    }

    /// One line: the words, the user's line where known, and the exception or else the
    /// last non-blank line of output (`exit code 1 at m/jax/model.py:6 in efe:
    /// ValueError: bad`); a stopped or crashed script's output ends with its stack
    /// dump, so its line ends at the place.
    pub fn line(&self) -> String {
        let words = match &self.place {
            Some((at, _)) => format!("{} at {at}", self.words),
            None => self.words.clone(),
        };
        if self.stopped && self.place.is_some() {
            return words;
        }
        let last = self.tail.iter().rev().find(|l| !l.trim().is_empty());
        let line = match self.exception.as_deref().or(last.map(|l| l.trim())) {
            Some(last) => format!("{words}: {last}"),
            None => words,
        };
        match &self.hint {
            Some(hint) => format!("{line} ({hint})"),
            None => line,
        }
    }
}

/// For a script that met its process limit on its last attempt (the kernel refused it
/// new processes or threads, or the watchdog killed it for holding more): the limit
/// and how to raise it. The script's own error says only "Resource temporarily
/// unavailable", or nothing where a library aborts or the watchdog's SIGKILL came.
fn process_limit_hint(r: &ScriptResult) -> Option<String> {
    let last = r.attempts.last()?;
    let limit = r
        .sandbox
        .max_procs
        .map_or_else(String::new, |n| format!(" of {n}"));
    let watchdog = last.matched_line.as_deref() == Some(PROCESS_WATCHDOG);
    let met = match (last.refused_forks, watchdog) {
        (0, false) => return None,
        (0, true) => format!("the watchdog stopped it past its limit{limit}"),
        (n, _) => {
            format!("the kernel refused it {n} new process(es) or thread(s) past its limit{limit}")
        }
    };
    Some(format!("{met}; raise it with --max-procs N"))
}

/// For `ModuleNotFoundError: No module named 'x.y'`: how to add `x` (the module's
/// top-level name; its package on PyPI may be named otherwise, as `cv2`'s is).
fn missing_module_hint(x: &super::ExceptionInfo) -> Option<String> {
    if x.kind != "ModuleNotFoundError" {
        return None;
    }
    let name = x
        .message
        .strip_prefix("No module named ")?
        .trim_matches(['\'', '"']);
    let top = name.split('.').next().filter(|t| !t.is_empty())?;
    Some(format!(
        "add it: jax-runner setup --with {top}, or pip install it into the run's --python"
    ))
}

/// A frame's file as reports name the script: relative to the tree when it lies in
/// it (the script's own path shown as `relative_path`), else as Python printed it.
fn shown_file(r: &ScriptResult, f: &SourceFrame) -> String {
    match tree_root(r).and_then(|root| std::path::Path::new(&f.file).strip_prefix(root).ok()) {
        Some(inside) => inside.display().to_string(),
        None => f.file.clone(),
    }
}

/// The tree the script of `r` was found in: its path less its relative path.
pub fn tree_root(r: &ScriptResult) -> Option<std::path::PathBuf> {
    let script = std::path::Path::new(&r.script_path);
    let relative = std::path::Path::new(&r.relative_path);
    (script.components().count() >= relative.components().count())
        .then(|| {
            let mut root = script.to_path_buf();
            for _ in relative.components() {
                root.pop();
            }
            root
        })
        .filter(|root| script.starts_with(root))
}

/// Seconds as people write a limit: `30s`, `5m`, `1h 30m`, `1s 500ms`.
pub fn duration(secs: f64) -> String {
    let millis = (secs.max(0.0) * 1000.0).round() as u64;
    humantime::format_duration(Duration::from_millis(millis)).to_string()
}

/// MiB as people read memory: `512 MiB`, `1.0 GiB`.
pub fn size(mb: f64) -> String {
    if mb >= 1024.0 {
        format!("{:.1} GiB", mb / 1024.0)
    } else {
        format!("{mb:.0} MiB")
    }
}

/// A signal's name (`SIGABRT`), or `signal N` for one without a common name.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// The last `n` lines of the file at `path` (read from its last 16 KiB); none when
/// it cannot be read, or is not a regular file (a script that ran unsandboxed could
/// have replaced its log by a FIFO or a link).
pub fn last_lines(path: &str, n: usize) -> Vec<String> {
    let Ok(file) = crate::confined::open_in(std::path::Path::new(path)) else {
        return Vec::new();
    };
    let cut = file.size() > STDOUT_TAIL_BYTES;
    let Ok(bytes) = file.tail(STDOUT_TAIL_BYTES) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if cut && !lines.is_empty() {
        lines.remove(0); // cut in the middle
    }
    let from = lines.len().saturating_sub(n);
    lines[from..].iter().map(|l| l.to_string()).collect()
}

#[cfg(test)]
mod tests;
