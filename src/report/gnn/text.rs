//! A script's output as GNN's step 12 sees it: Python decodes the captured output to
//! `str`, so `stdout_length` counts characters and `raw_output` is the first 10,000
//! characters. Read from jax-runner's logs, streamed, never held whole.

use std::io::Read;
use std::path::Path;

/// Characters of output GNN copies into `raw_output`/`raw_error` (`stdout[:10000]`).
pub const RAW_CHARS: usize = 10_000;

/// A log as GNN's `str` would hold it: its length and its beginning.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LogText {
    /// Characters in the log (`len(stdout)`).
    pub chars: u64,
    /// Its first [`RAW_CHARS`] characters.
    pub head: String,
}

impl LogText {
    /// Reads `path` when it is a regular file (a script could have replaced its log
    /// by a FIFO or a link); empty otherwise.
    pub fn of(path: &str) -> LogText {
        match crate::confined::open_in(Path::new(path)) {
            Ok(file) => LogText::read(file).unwrap_or_default(),
            Err(_) => LogText::default(),
        }
    }

    /// Streams `input`: every byte that does not continue a UTF-8 sequence starts a
    /// character. That is exact for valid UTF-8, the only output GNN's own step can
    /// decode (its strict decoding raises on anything else). Only the head's bytes are
    /// kept: at most four per character.
    fn read(mut input: impl Read) -> std::io::Result<LogText> {
        let keep = RAW_CHARS * 4;
        let mut head = Vec::with_capacity(keep.min(64 * 1024));
        let mut chars = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let chunk = &buf[..n];
            chars += chunk.iter().filter(|b| (**b & 0xC0) != 0x80).count() as u64;
            let room = keep.saturating_sub(head.len());
            head.extend_from_slice(&chunk[..room.min(n)]);
        }
        let head = String::from_utf8_lossy(&head)
            .chars()
            .take(RAW_CHARS)
            .collect();
        Ok(LogText { chars, head })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_not_bytes_and_the_first_ten_thousand() {
        // 'é' is two bytes, '€' three: Python's len() counts each as one.
        let text = "é".repeat(6_000) + &"€".repeat(6_000) + "end";
        let got = LogText::read(text.as_bytes()).unwrap();
        assert_eq!(got.chars, 12_003);
        assert_eq!(got.head, "é".repeat(6_000) + &"€".repeat(4_000));
        let short = LogText::read("a\nb\n".as_bytes()).unwrap();
        assert_eq!((short.chars, short.head.as_str()), (4, "a\nb\n"));
        assert_eq!(LogText::read(&b""[..]).unwrap(), LogText::default());
    }

    #[test]
    fn a_head_cut_inside_a_character_keeps_whole_ones() {
        // 40,001 bytes of 4-byte characters: the kept bytes end mid-character only
        // past the 10,000th, which the head never reaches.
        let text = "😀".repeat(10_001);
        let got = LogText::read(text.as_bytes()).unwrap();
        assert_eq!(got.chars, 10_001);
        assert_eq!(got.head.chars().count(), RAW_CHARS);
        assert!(got.head.chars().all(|c| c == '😀'));
    }
}
