//! Text a script controls, made safe to show a person: nothing a script prints steers
//! a terminal or a reader. Its exception message, output tail, file names and manifest
//! entries reach the terminal lines, `show`, Markdown, CSV, JUnit and HTML through
//! [`line`] (one line: a reason, a name, a path) or [`excerpt`] (several lines: an
//! output tail), which write every control character as visible text:
//!
//! - C0 controls (U+0000–U+001F), DEL (U+007F) and C1 controls (U+0080–U+009F) become
//!   `\xNN` (`\x1b` for ESC, `\x9b` for the one-character CSI), so no escape sequence
//!   sets a window title, writes the clipboard, moves the cursor or erases a line;
//! - newline, carriage return and tab are `\n`, `\r` and `\t` in a line; an excerpt
//!   keeps its line breaks and tabs (a carriage return, which would overwrite the line
//!   it ends, is still `\r`);
//! - the Unicode bidirectional embeddings, overrides and isolates (U+202A–U+202E,
//!   U+2066–U+2069) become `\u{202e}`, so text cannot be shown in another order than
//!   it is stored ("Trojan Source").
//!
//! Backslashes are left alone: a script that prints `\x1b` itself shows as the same
//! harmless text. The logs and the JSON files keep the script's bytes as they were
//! (JSON escapes control characters itself); only what is shown is escaped.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` for one line of a report or of the terminal: every control character, line
/// breaks and tabs included, and every bidirectional control written visibly.
/// Borrowed when there is nothing to escape.
pub fn line(s: &str) -> Cow<'_, str> {
    escaped(s, false)
}

/// `s` for a shown block of several lines (an output tail): as [`line`], but line
/// breaks and tabs stay what they are.
pub fn excerpt(s: &str) -> Cow<'_, str> {
    escaped(s, true)
}

/// Whether `c` is written another way (`block`: in an excerpt).
fn needs_escape(c: char, block: bool) -> bool {
    match c {
        '\n' | '\t' => !block,
        '\0'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn escaped(s: &str, block: bool) -> Cow<'_, str> {
    let Some(first) = s.find(|c| needs_escape(c, block)) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 16);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !needs_escape(c, block) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
                write!(out, "\\u{{{:04x}}}", c as u32)
            }
            c => write!(out, "\\x{:02x}", c as u32),
        };
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed() {
        for s in [
            "",
            "exit code 1: ValueError: bad",
            "модель 模型 ✓ é",
            "a\\x1b",
        ] {
            assert!(matches!(line(s), Cow::Borrowed(_)), "{s}");
            assert!(matches!(excerpt(s), Cow::Borrowed(_)), "{s}");
        }
        assert!(matches!(excerpt("a\n\tb"), Cow::Borrowed(_)));
    }

    #[test]
    fn c0_controls_and_del_are_hex() {
        assert_eq!(line("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
        assert_eq!(line("a\0b"), "a\\x00b");
        assert_eq!(line("\x08\x0b\x0c\x1f\x7f"), "\\x08\\x0b\\x0c\\x1f\\x7f");
        assert_eq!(excerpt("\x1b[2K\x00"), "\\x1b[2K\\x00");
    }

    #[test]
    fn c1_controls_are_hex() {
        assert_eq!(line("\u{9b}31m\u{85}\u{80}"), "\\x9b31m\\x85\\x80");
        // Just past C1: a no-break space is text.
        assert_eq!(line("\u{a0}"), "\u{a0}");
    }

    #[test]
    fn line_breaks_and_tabs_depend_on_the_context() {
        assert_eq!(line("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(excerpt("a\nb\r\tc"), "a\nb\\r\tc");
    }

    #[test]
    fn bidirectional_controls_are_code_points() {
        assert_eq!(
            line("x\u{202e}gnp.exe\u{202c}"),
            "x\\u{202e}gnp.exe\\u{202c}"
        );
        assert_eq!(
            excerpt("\u{202a}\u{202b}\u{202d}\u{2066}\u{2067}\u{2068}\u{2069}"),
            "\\u{202a}\\u{202b}\\u{202d}\\u{2066}\\u{2067}\\u{2068}\\u{2069}"
        );
        // Neighbours that are not controls stay.
        assert_eq!(line("\u{2029}\u{2065}\u{206a}"), "\u{2029}\u{2065}\u{206a}");
    }

    #[test]
    fn multi_byte_text_around_escapes_is_kept() {
        assert_eq!(
            line("ошибка\x1b[31m模型\u{202e}✓"),
            "ошибка\\x1b[31m模型\\u{202e}✓"
        );
    }

    #[test]
    fn the_escaped_form_has_nothing_left_to_escape() {
        let once = line("\x1b\0\u{9b}\u{202e}\n");
        assert_eq!(line(&once), once);
        assert!(matches!(line(&once), Cow::Borrowed(_)));
    }
}
