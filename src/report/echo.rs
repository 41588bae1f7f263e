//! `--no-capture`: every line a script writes, shown on the terminal as it comes,
//! prefixed with the script's id (and the attempt, from the second on).

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;

/// Prints `Output` events to standard error, above the progress bars when they show.
pub struct EchoReporter;

impl Reporter for EchoReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        if let RunEvent::Output {
            id, attempt, line, ..
        } = event
        {
            let text = prefixed(id, *attempt, line);
            if !super::print_above_bars(&text) {
                eprintln!("{text}");
            }
        }
        Ok(())
    }
}

/// `[id] line`, or `[id#2] line` for a retry.
fn prefixed(id: &str, attempt: u32, line: &str) -> String {
    match attempt {
        1 => format!("[{id}] {line}"),
        n => format!("[{id}#{n}] {line}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_carry_the_id_and_later_attempts() {
        assert_eq!(super::prefixed("a.b", 1, "x"), "[a.b] x");
        assert_eq!(super::prefixed("a.b", 3, "x"), "[a.b#3] x");
    }
}
