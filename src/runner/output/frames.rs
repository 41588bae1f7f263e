//! A warm script's stderr less the warm start's own frames in faulthandler's stack
//! dumps. A warm script runs in a fork of the zygote, below the zygote's program
//! (which comes on stdin, `File "<stdin>"`, run by a one-line loader, `File
//! "<string>"`) and `runpy` (`File "<frozen runpy>"`), so a dump it writes (on a
//! timeout's SIGTERM, or a crash) lists those frames under its own; a cold start's
//! dump of the same script has none. They are the runner's, not the script's, and a
//! warm start must leave no trace in what a script records: they are left out of the
//! log and the tail, and every other byte passes as it came.

/// Longest partial line held back while a dump may be under way; a longer one passes.
const MAX_HELD: usize = 8 * 1024;

/// What a dump's header line ends with (faulthandler's `Current thread 0x… (most
/// recent call first):` and `Thread 0x…`).
const DUMP_HEADER_END: &[u8] = b"(most recent call first):";

/// The stream's state between chunks.
#[derive(Debug, Default)]
pub struct WarmFrames {
    /// The partial line the last chunk ended with.
    held: Vec<u8>,
    /// Whether the lines now coming are a dump's frames.
    in_dump: bool,
    /// Whether the last frame was the zygote's program: the loader's frame, below it,
    /// is the warm start's too (a script's own `<string>` frames lie above runpy's).
    after_program: bool,
}

impl WarmFrames {
    /// Passes `chunk` to `out`, less the warm start's frame lines of any dump in it.
    pub fn feed(&mut self, chunk: &[u8], out: &mut impl FnMut(&[u8])) {
        // Most chunks hold no dump at all: they pass whole.
        if !self.in_dump
            && self.held.is_empty()
            && chunk.last() == Some(&b'\n')
            && !contains(chunk, DUMP_HEADER_END)
        {
            out(chunk);
            return;
        }
        // What passes goes out in runs as long as the chunk allows (one write of the
        // log each, not one a line): only a dropped line cuts a run.
        let mut rest = chunk;
        if !self.held.is_empty() {
            let Some(pos) = rest.iter().position(|b| *b == b'\n') else {
                return self.hold(rest, out);
            };
            let mut whole = std::mem::take(&mut self.held);
            whole.extend_from_slice(&rest[..=pos]);
            if self.keeps(&whole) {
                out(&whole);
            }
            rest = &rest[pos + 1..];
        }
        let mut run = 0;
        let mut at = 0;
        while let Some(pos) = rest[at..].iter().position(|b| *b == b'\n') {
            let end = at + pos + 1;
            if !self.keeps(&rest[at..end]) {
                if run < at {
                    out(&rest[run..at]);
                }
                run = end;
            }
            at = end;
        }
        if run < at {
            out(&rest[run..at]);
        }
        self.hold(&rest[at..], out);
    }

    /// Holds the partial line `rest` back until its newline comes; a line longer than
    /// any dump's passes as it is.
    fn hold(&mut self, rest: &[u8], out: &mut impl FnMut(&[u8])) {
        self.held.extend_from_slice(rest);
        if self.held.len() > MAX_HELD {
            self.in_dump = false;
            out(&std::mem::take(&mut self.held));
        }
    }

    /// Passes what is held back (the stream ended without a newline).
    pub fn finish(&mut self, out: &mut impl FnMut(&[u8])) {
        if !self.held.is_empty() {
            out(&std::mem::take(&mut self.held));
        }
    }

    /// Whether one whole line (its newline included) passes: all but the warm start's
    /// frames in a dump.
    fn keeps(&mut self, line: &[u8]) -> bool {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let after_program = std::mem::take(&mut self.after_program);
        if text.ends_with(DUMP_HEADER_END) {
            self.in_dump = true;
        } else if self.in_dump && is_frame(text) {
            if after_program && text == LOADER_FRAME {
                return false;
            }
            self.after_program = text.starts_with(PROGRAM_FRAME);
            return !is_warm_starts(text);
        } else {
            self.in_dump = false;
        }
        true
    }
}

/// The start of a frame line of the zygote's program, which it reads from stdin.
const PROGRAM_FRAME: &[u8] = b"  File \"<stdin>\", line ";
/// The frame of the loader that runs the program (`python -c`, `runner/zygote.rs`):
/// the outermost of every thread that started there.
const LOADER_FRAME: &[u8] = b"  File \"<string>\", line 1 in <module>";

/// A dump's frame line: `  File "f.py", line 9 in spin`.
fn is_frame(text: &[u8]) -> bool {
    text.starts_with(b"  File \"") && contains(text, b"\", line ")
}

/// A frame of the zygote's program or of runpy, in a dump's words (` in `, where a
/// traceback writes `, in `).
fn is_warm_starts(text: &[u8]) -> bool {
    (text.starts_with(PROGRAM_FRAME) || text.starts_with(b"  File \"<frozen runpy>\", line "))
        && !contains(text, b", in ")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "before\n\
        Fatal Python error: Segmentation fault\n\n\
        Current thread 0x00007f551d3d64c0 (most recent call first):\n  \
        File \"/t/m/jax/crash.py\", line 14 in <module>\n  \
        File \"<frozen runpy>\", line 88 in _run_code\n  \
        File \"<stdin>\", line 492 in become_script\n  \
        File \"<stdin>\", line 1016 in <module>\n  \
        File \"<string>\", line 1 in <module>\n\n\
        Extension modules: numpy (total: 1)\n";
    const COLD: &str = "before\n\
        Fatal Python error: Segmentation fault\n\n\
        Current thread 0x00007f551d3d64c0 (most recent call first):\n  \
        File \"/t/m/jax/crash.py\", line 14 in <module>\n\n\
        Extension modules: numpy (total: 1)\n";

    fn filtered(chunks: &[&[u8]]) -> String {
        let mut f = WarmFrames::default();
        let mut got = Vec::new();
        for c in chunks {
            f.feed(c, &mut |b| got.extend_from_slice(b));
        }
        f.finish(&mut |b| got.extend_from_slice(b));
        String::from_utf8(got).unwrap()
    }

    /// In one chunk or cut anywhere, a warm dump reads as the cold one.
    #[test]
    fn a_warm_dump_reads_as_a_cold_one_however_it_is_cut() {
        assert_eq!(filtered(&[DUMP.as_bytes()]), COLD);
        let bytes = DUMP.as_bytes();
        for cut in 1..bytes.len() {
            assert_eq!(
                filtered(&[&bytes[..cut], &bytes[cut..]]),
                COLD,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(filtered(&bytes), COLD);
    }

    /// Outside a dump every byte passes: a traceback's frames (`, in `), the same
    /// words printed by the script, a last line with no newline.
    #[test]
    fn everything_else_passes_as_it_came() {
        let other = "Traceback (most recent call last):\n  \
            File \"<stdin>\", line 3, in <module>\n  \
            File \"<stdin>\", line 3 in spin\n\
            ValueError: x\nno newline at the end";
        assert_eq!(filtered(&[other.as_bytes()]), other);
        // After a dump ends, the same words are the script's own again.
        let after = format!("{DUMP}  File \"<stdin>\", line 3 in spin\n");
        assert_eq!(
            filtered(&[after.as_bytes()]),
            format!("{COLD}  File \"<stdin>\", line 3 in spin\n")
        );
        // A script's own `<string>` frame (code it runs with exec) is its own.
        let exec = DUMP.replace(
            "  File \"<frozen runpy>\"",
            "  File \"<string>\", line 1 in <module>\n  File \"<frozen runpy>\"",
        );
        let cold = COLD.replace(
            "in <module>\n\n",
            "in <module>\n  File \"<string>\", line 1 in <module>\n\n",
        );
        assert_eq!(filtered(&[exec.as_bytes()]), cold);
        let long = "x".repeat(3 * MAX_HELD);
        assert_eq!(filtered(&[long.as_bytes()]), long);
    }

    /// Lines that pass go out in runs, not a write a line, even when reads end in the
    /// middle of a line (as a flood's 64 KiB reads do).
    #[test]
    fn a_flood_passes_in_runs() {
        let lines: String = (0..1000).map(|i| format!("warning {i}\n")).collect();
        let mut f = WarmFrames::default();
        let mut calls = 0;
        f.feed(b"partial ", &mut |_| calls += 1);
        f.feed(lines.as_bytes(), &mut |_| calls += 1);
        f.feed(b"tail", &mut |_| calls += 1);
        assert!(calls <= 2, "{calls} writes for 1,000 lines");
        let cut = DUMP.len() / 2;
        let (mut calls, dump) = (0, format!("{lines}{DUMP}{lines}"));
        f.feed(&dump.as_bytes()[..cut], &mut |_| calls += 1);
        f.feed(&dump.as_bytes()[cut..], &mut |_| calls += 1);
        assert!(calls <= 6, "{calls} writes around one dump");
    }
}
