//! Failure classes: how each attempt ended, decided from its exit status, signal,
//! the runner's own stop reason and the lines it wrote to stderr. The signature table
//! below is the one place stderr patterns live.

use super::scratch::Held;
use crate::model::{ExceptionInfo, FailureClass, Platform, SourceFrame};

/// The scratch a memory reason names.
const SCRATCH: &str = "/tmp, /dev/shm, $HOME";

/// The stderr signatures, strongest class first: a broken install explains GPU errors
/// too, and a GPU environment failure explains the out-of-memory lines it can cause.
pub const SIGNATURES: &[(FailureClass, &str)] = &[
    (FailureClass::BrokenInstall, "incompatible with jax version"),
    (
        FailureClass::BrokenInstall,
        "This version of jax requires jaxlib version",
    ),
    (
        FailureClass::GpuEnvironment,
        "Unable to initialize backend 'cuda'",
    ),
    (
        FailureClass::GpuEnvironment,
        "PJRT_Api already exists for device type cuda",
    ),
    (
        FailureClass::GpuEnvironment,
        "Loaded runtime CuDNN library:",
    ),
    (
        FailureClass::GpuEnvironment,
        "DNN library initialization failed",
    ),
    (
        FailureClass::GpuEnvironment,
        "Jax plugin configuration error",
    ),
    (FailureClass::GpuEnvironment, "Unable to load CUDA"),
    (FailureClass::GpuEnvironment, "CUDA_ERROR_NO_DEVICE"),
    (FailureClass::GpuEnvironment, "No visible GPU devices"),
    (
        FailureClass::OutOfMemory,
        "RESOURCE_EXHAUSTED: Out of memory",
    ),
    (FailureClass::OutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"),
    (FailureClass::OutOfMemory, "std::bad_alloc"),
];

/// Longest stderr line examined; longer lines are cut (a flood cannot cost memory).
const MAX_LINE: usize = 4096;

/// Watches every stderr line as it streams past, keeping only what classification
/// needs: the first line matching each signature, and the last exception.
#[derive(Debug, Default, Clone)]
pub struct StderrScan {
    /// First matching line per signature-table entry.
    matches: Vec<(usize, String)>,
    in_traceback: bool,
    traceback_in_xla_bridge: bool,
    /// The last exception and whether its traceback went through jax's xla_bridge.
    pub exception: Option<(ExceptionInfo, bool)>,
    /// The innermost frame of the user's own code in the traceback being read, and
    /// whether its source line is the next line.
    frame_now: Option<SourceFrame>,
    source_next: bool,
    /// The innermost user frame of the last traceback that ended in an exception.
    pub user_frame: Option<SourceFrame>,
    /// In a stack dump (faulthandler's, printed before the runner stops a script):
    /// whether the block is the current thread's, and whether its user frame is taken.
    dump: Option<(bool, bool)>,
    /// The innermost user frame of the last stack dump, the current thread's first.
    pub hung_at: Option<SourceFrame>,
    /// Whether the dumps being read follow faulthandler's `Fatal Python error: …`: a
    /// crash's (a fatal signal), up to the next line that is not a dump's.
    dump_is_crash: bool,
    /// The innermost user frame of a crash's dump: where the script died.
    pub crashed_at: Option<SourceFrame>,
}

impl StderrScan {
    /// Feeds one line (without its newline).
    pub fn line(&mut self, raw: &[u8]) {
        let raw = &raw[..raw.len().min(MAX_LINE)];
        let line = String::from_utf8_lossy(raw);
        let line = line.trim_end();
        for (i, (_, needle)) in SIGNATURES.iter().enumerate() {
            if line.contains(needle) && !self.matches.iter().any(|(j, _)| *j == i) {
                self.matches.push((i, line.trim().to_string()));
            }
        }
        if line.starts_with("Fatal Python error: ") {
            self.dump_is_crash = true;
            return;
        }
        if line.starts_with("Traceback (most recent call last)") {
            self.in_traceback = true;
            self.traceback_in_xla_bridge = false;
            self.frame_now = None;
            self.source_next = false;
            self.dump_is_crash = false;
            return;
        }
        if self.stack_dump_line(line) {
            return;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        if self.in_traceback && indented {
            if line.contains("xla_bridge.py") {
                self.traceback_in_xla_bridge = true;
            }
            self.traceback_frame_line(line);
            return;
        }
        if indented {
            // Python's report of a script that does not compile has no header: its
            // place (`File "s.py", line 3`, no function), the source, a caret.
            if parse_frame(line.trim(), "").is_some() || self.source_next {
                self.traceback_frame_line(line);
            }
            return;
        }
        if line.is_empty() {
            return;
        }
        self.dump_is_crash = false;
        // `Type: message` or a bare `Type` ends a traceback; outside one, Python's
        // SyntaxError report has no header, so any `…Error: …` line counts.
        if let Some(info) = parse_exception_line(line, self.in_traceback) {
            self.exception = Some((info, self.in_traceback && self.traceback_in_xla_bridge));
            if let Some(frame) = self.frame_now.take() {
                self.user_frame = Some(frame);
            }
        }
        // Any other line ends what a frame line outside a traceback began.
        self.frame_now = None;
        self.source_next = false;
        self.in_traceback = false;
    }

    /// A traceback's indented line: a frame (`File "f.py", line 6, in efe`, or a
    /// SyntaxError's `File "f.py", line 6`), kept when it is the user's, or the source
    /// line printed under the user's frame.
    fn traceback_frame_line(&mut self, line: &str) {
        let trimmed = line.trim();
        if let Some(frame) = parse_frame(trimmed, ", in ").or_else(|| parse_frame(trimmed, "")) {
            self.source_next = is_users(&frame.file);
            if self.source_next {
                self.frame_now = Some(frame);
            }
            return;
        }
        if std::mem::take(&mut self.source_next) {
            if let Some(f) = self.frame_now.as_mut() {
                f.source = Some(line.trim().to_string());
            }
        }
    }

    /// A line of faulthandler's stack dump: a thread's header (`Current thread 0x…
    /// (most recent call first):`), its frames, most recent first (`File "f.py", line
    /// 9 in spin`), or the blank line that ends it. False for any other line.
    /// After `Fatal Python error: …`, the dump is a crash's: its current thread's user
    /// frame is where the script died.
    fn stack_dump_line(&mut self, line: &str) -> bool {
        let header = (line.starts_with("Thread 0x") || line.starts_with("Current thread 0x"))
            && line.ends_with("(most recent call first):");
        if header {
            self.dump = Some((line.starts_with("Current"), false));
            return true;
        }
        let Some((current, taken)) = self.dump else {
            return false;
        };
        let Some(frame) = parse_frame(line.trim(), " in ") else {
            self.dump = None;
            return line.trim().is_empty();
        };
        if !taken && is_users(&frame.file) {
            if self.dump_is_crash && current {
                self.crashed_at = Some(frame.clone());
            }
            if current || self.hung_at.is_none() {
                self.hung_at = Some(frame);
            }
            self.dump = Some((current, true));
        }
        true
    }

    /// The strongest matched signature, with its line.
    pub fn strongest(&self) -> Option<(FailureClass, &str)> {
        self.matches
            .iter()
            .min_by_key(|(i, _)| *i)
            .map(|(i, l)| (SIGNATURES[*i].0, l.as_str()))
    }

    fn first_of(&self, class: FailureClass) -> Option<&str> {
        self.matches
            .iter()
            .filter(|(i, _)| SIGNATURES[*i].0 == class)
            .min_by_key(|(i, _)| *i)
            .map(|(_, l)| l.as_str())
    }
}

/// `File "PATH", line N, in FUNC` (a traceback; `sep` is `", in "`), `File "PATH",
/// line N in FUNC` (faulthandler; `" in "`) or `File "PATH", line N` (a SyntaxError's
/// place; `""`: no function).
fn parse_frame(line: &str, sep: &str) -> Option<SourceFrame> {
    let rest = line.strip_prefix("File \"")?;
    let (file, rest) = rest.rsplit_once("\", line ")?;
    let (number, function) = match sep {
        "" => (rest, ""),
        sep => rest.split_once(sep)?,
    };
    Some(SourceFrame {
        file: file.to_string(),
        line: number.trim().parse().ok()?,
        function: function.trim().to_string(),
        source: None,
    })
}

/// Whether a frame's file is the user's own code: not the interpreter's (`<frozen …>`,
/// `<stdin>`, the standard library under `lib/pythonX.Y`), not an installed package
/// (`site-packages`, `dist-packages`), not the runner's shim (`sitecustomize.py`).
fn is_users(file: &str) -> bool {
    let installed = ["/site-packages/", "/dist-packages/", "/lib/python"]
        .iter()
        .any(|p| file.contains(p));
    !(file.starts_with('<') || installed || file.ends_with("/sitecustomize.py"))
}

fn parse_exception_line(line: &str, after_traceback: bool) -> Option<ExceptionInfo> {
    let (kind, message) = match line.split_once(": ") {
        Some((k, m)) => (k, m),
        None => (line.trim_end_matches(':'), ""),
    };
    let is_name = !kind.is_empty()
        && kind
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        && kind
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let looks_like_error = ["Error", "Exception", "Exit", "Interrupt"]
        .iter()
        .any(|s| kind.ends_with(s));
    (is_name && (after_traceback || looks_like_error)).then(|| ExceptionInfo {
        kind: kind.to_string(),
        message: message.to_string(),
    })
}

/// Everything classification looks at.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub platform: Platform,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub interrupted: bool,
    /// The runner's memory watchdog killed it (`--memory-limit`).
    pub memory_limit_hit: bool,
    /// The runner's process-count watchdog killed it (`--max-procs`).
    pub process_limit_hit: bool,
    /// The kernel's OOM killer fired in our cgroup while it ran.
    pub kernel_oom_kill: bool,
    /// The kernel held the attempt to `--memory-limit` (its own cgroup) and killed it.
    pub memory_cgroup_hit: bool,
    /// The attempt's highest memory sample: resident, and what its scratch held.
    pub peak: Held,
    pub scan: &'a StderrScan,
}

/// The verdict on one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub class: FailureClass,
    /// The stderr line (or a description) that decided it.
    pub matched_line: Option<String>,
    pub exception: Option<ExceptionInfo>,
}

/// Decides the class of an attempt.
pub fn classify(e: &Ending<'_>) -> Classification {
    let exception = e.scan.exception.as_ref().map(|(x, _)| x.clone());
    let verdict = |class, line: Option<String>| Classification {
        class,
        matched_line: line,
        exception: exception.clone(),
    };
    if e.interrupted {
        return verdict(FailureClass::Interrupted, None);
    }
    if e.timed_out {
        return verdict(FailureClass::TimedOut, None);
    }
    let mb = |bytes: u64| bytes / (1024 * 1024);
    if e.memory_cgroup_hit {
        let mut line = "killed by the kernel at --memory-limit (the attempt's cgroup)".to_string();
        if e.peak.scratch > 0 {
            line += &format!(
                ", at least {} MB of it in its scratch ({SCRATCH})",
                mb(e.peak.scratch)
            );
        }
        return verdict(FailureClass::OutOfMemory, Some(line));
    }
    if e.memory_limit_hit {
        let mut line = "killed by the --memory-limit watchdog".to_string();
        if e.peak.scratch > 0 {
            line += &format!(
                ": {} MB, of which {} MB in its scratch ({SCRATCH})",
                mb(e.peak.total()),
                mb(e.peak.scratch)
            );
        }
        return verdict(FailureClass::OutOfMemory, Some(line));
    }
    if e.process_limit_hit {
        return verdict(
            FailureClass::KilledBySignal,
            Some(crate::model::reason::PROCESS_WATCHDOG.into()),
        );
    }
    if e.code == Some(0) {
        return verdict(FailureClass::Succeeded, None);
    }
    for class in [FailureClass::BrokenInstall, FailureClass::GpuEnvironment] {
        if let Some(line) = e.scan.first_of(class) {
            return verdict(class, Some(line.to_string()));
        }
    }
    // jax's xla_bridge asserts a default backend exists: with JAX_PLATFORMS=cuda and no
    // visible GPU that bare AssertionError is all the user sees.
    if let Some((x, true)) = &e.scan.exception {
        if x.kind == "AssertionError" && e.platform == Platform::Gpu {
            return verdict(
                FailureClass::GpuEnvironment,
                Some("AssertionError in jax's xla_bridge: no usable cuda backend".into()),
            );
        }
    }
    if let Some(line) = e.scan.first_of(FailureClass::OutOfMemory) {
        return verdict(FailureClass::OutOfMemory, Some(line.to_string()));
    }
    if exception.as_ref().is_some_and(|x| x.kind == "MemoryError") {
        return verdict(FailureClass::OutOfMemory, Some("MemoryError".into()));
    }
    if let Some(sig) = e.signal {
        if sig == libc::SIGKILL && e.kernel_oom_kill {
            return verdict(
                FailureClass::OutOfMemory,
                Some("SIGKILL from the kernel's OOM killer".into()),
            );
        }
        let name = super::sys::signal_name(sig);
        return verdict(
            FailureClass::KilledBySignal,
            Some(format!("killed by {name}")),
        );
    }
    let line = exception.as_ref().map(|x| {
        if x.message.is_empty() {
            x.kind.clone()
        } else {
            format!("{}: {}", x.kind, x.message)
        }
    });
    verdict(FailureClass::ScriptError, line)
}

#[cfg(test)]
mod tests;
