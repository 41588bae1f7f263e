//! Bounded lists for people: a message, a log line or a report names the first few
//! items of a long list and counts the rest. A manifest with 200,000 missing entries
//! must make one warning, not 200,000; the JSON files keep every item.

use std::fmt::Display;

/// How many items a message names before it counts the rest.
pub const NAMED: usize = 10;

/// How many items a report (Markdown, JUnit, HTML, the terminal summary) lists one by
/// one before a closing "and K more" line.
pub const LISTED: usize = 50;

/// `a, b, c` or, past `named` items, `a, b, c and 7 more`.
pub fn first_named<T: Display>(items: &[T], named: usize) -> String {
    let shown: Vec<String> = items.iter().take(named).map(ToString::to_string).collect();
    let mut out = shown.join(", ");
    if items.len() > named {
        out.push_str(&format!(" and {} more", items.len() - named));
    }
    out
}

/// The first `listed` items, and how many were left out.
pub fn head<T>(items: &[T], listed: usize) -> (&[T], usize) {
    let n = items.len().min(listed);
    (&items[..n], items.len() - n)
}

/// Each of the first `listed` messages, then one that counts the rest (`what` names
/// them, and may say where all are: "warnings (every one is in …)"). For a list of
/// distinct warnings of unknown kinds.
pub fn bounded_messages(messages: &[String], listed: usize, what: &str) -> Vec<String> {
    let (shown, rest) = head(messages, listed);
    let mut out = shown.to_vec();
    if rest > 0 {
        out.push(format!("and {rest} more {what}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_items_and_counts_the_rest() {
        assert_eq!(first_named(&["a", "b"], 3), "a, b");
        assert_eq!(first_named(&["a", "b", "c", "d"], 2), "a, b and 2 more");
        assert_eq!(first_named::<&str>(&[], 2), "");
    }

    #[test]
    fn long_lists_end_in_one_counting_line() {
        let many: Vec<String> = (0..200_000).map(|i| format!("w{i}")).collect();
        let out = bounded_messages(&many, 3, "warnings");
        assert_eq!(out.len(), 4);
        assert_eq!(out[0], "w0");
        assert_eq!(out[3], "and 199997 more warnings");
        assert_eq!(bounded_messages(&many[..2], 3, "warnings").len(), 2);
        assert_eq!(head(&many, 5).1, 199_995);
    }
}
