//! A warm script's stderr less the warm start's own frames in faulthandler's stack
//! dumps. A warm script runs in a fork of the zygote, below the zygote's program
//! (which comes on stdin, `File "<stdin>"`) and `runpy` (`File "<frozen runpy>"`), so
//! a dump it writes (on a timeout's SIGTERM, or a crash) lists those frames under its
//! own; a cold start's dump of the same script has none. They are the runner's, not
//! the script's, and a warm start must leave no trace in what a script records: they
//! are left out of the log and the tail, and every other byte passes as it came.

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
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(pos + 1);
            if self.held.is_empty() {
                self.line(line, out);
            } else {
                let mut whole = std::mem::take(&mut self.held);
                whole.extend_from_slice(line);
                self.line(&whole, out);
            }
            rest = after;
        }
        self.held.extend_from_slice(rest);
        if self.held.len() > MAX_HELD {
            // No dump line is this long: whatever it is passes.
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

    /// One whole line, its newline included.
    fn line(&mut self, line: &[u8], out: &mut impl FnMut(&[u8])) {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.ends_with(DUMP_HEADER_END) {
            self.in_dump = true;
        } else if self.in_dump && is_frame(text) {
            if is_warm_starts(text) {
                return;
            }
        } else {
            self.in_dump = false;
        }
        out(line);
    }
}

/// A dump's frame line: `  File "f.py", line 9 in spin`.
fn is_frame(text: &[u8]) -> bool {
    text.starts_with(b"  File \"") && contains(text, b"\", line ")
}

/// A frame of the zygote's program or of runpy, in a dump's words (` in `, where a
/// traceback writes `, in `).
fn is_warm_starts(text: &[u8]) -> bool {
    (text.starts_with(b"  File \"<stdin>\", line ")
        || text.starts_with(b"  File \"<frozen runpy>\", line "))
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
        File \"<stdin>\", line 1016 in <module>\n\n\
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
        let long = "x".repeat(3 * MAX_HELD);
        assert_eq!(filtered(&[long.as_bytes()]), long);
    }
}
