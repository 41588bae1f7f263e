//! `--export-csv`: one row per script (id, status, exit code, seconds, peak memory
//! MiB, device, attempts, reason) under a header row, in discovery order, quoted as
//! RFC 4180 says: a field with a comma, a quote or a line break goes in quotes, its
//! quotes doubled. Rows end in CRLF, as the RFC and spreadsheets expect. The id and
//! the reason are shown with their control characters escaped ([`escape::line`]), so
//! a row is one line and a terminal that prints the file obeys nothing in it.

use super::escape;
use super::export::RunRecord;
use super::record::ScriptRecord;
use crate::error::ReportError;

/// The header row's fields.
const HEADER: [&str; 8] = [
    "id",
    "status",
    "exit_code",
    "seconds",
    "peak_memory_mib",
    "device",
    "attempts",
    "reason",
];

/// The CSV document of a finished run.
pub fn render_bytes(run: &RunRecord) -> Result<Vec<u8>, ReportError> {
    Ok(render(&run.ordered()).into_bytes())
}

/// The header, then one row per record.
pub fn render(scripts: &[&ScriptRecord]) -> String {
    let mut out = row(HEADER.map(String::from));
    for r in scripts {
        out.push_str(&row(fields(r)));
    }
    out
}

/// A record's fields, in the header's order.
fn fields(r: &ScriptRecord) -> [String; 8] {
    let device = match r.device_used {
        Some(p) => label(&p),
        None => label(&r.device_requested),
    };
    let reason = match (&r.carried, r.reason_line()) {
        (Some(c), _) => c.line(),
        (None, Some(line)) => line,
        (None, None) => String::new(),
    };
    [
        escape::line(&r.id).into_owned(),
        r.status.as_str().to_string(),
        r.return_code.map(|c| c.to_string()).unwrap_or_default(),
        format!("{:.3}", r.execution_time_s),
        format!("{:.1}", r.peak_memory_mb),
        device,
        r.attempts.len().to_string(),
        escape::line(&reason).into_owned(),
    ]
}

/// A value's serialized name (`cpu`, `gpu`).
fn label<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// One row, its fields quoted where they must be, ending in CRLF.
fn row<const N: usize>(fields: [String; N]) -> String {
    let mut line = fields
        .iter()
        .map(|f| quote(f))
        .collect::<Vec<_>>()
        .join(",");
    line.push_str("\r\n");
    line
}

/// A field as RFC 4180 writes it.
pub fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_fields_stay_bare() {
        assert_eq!(quote("pomdp_solver"), "pomdp_solver");
        assert_eq!(quote(""), "");
        assert_eq!(quote("exit code 1: boom"), "exit code 1: boom");
    }

    #[test]
    fn commas_quotes_and_line_breaks_are_quoted() {
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quote("one\ntwo"), "\"one\ntwo\"");
        assert_eq!(quote("cr\rlf"), "\"cr\rlf\"");
        assert_eq!(quote("\""), "\"\"\"\"");
    }

    #[test]
    fn a_row_reads_back_as_its_fields() {
        let fields = [
            "x".to_string(),
            "exit code 1: ValueError: a, \"b\"\nc".to_string(),
        ];
        let line = row(fields.clone());
        assert!(line.ends_with("\r\n"));
        assert_eq!(parse(&line), fields.to_vec());
    }

    fn failed_result() -> crate::model::ScriptResult {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "id": "a,b", "script_path": "/out/a.py",
            "relative_path": "m/jax/a.py", "discovered_by": "jax_folder",
            "success": false, "status": "failed", "class": "script_error", "return_code": 1,
            "signal": null, "device_requested": "auto", "device_used": "cpu",
            "device_mismatch": false, "attempts": [],
            "execution_time_s": 1.25, "peak_memory_mb": 12.34, "cpu_user_s": 0.0,
            "cpu_system_s": 0.0, "timeout_s": 2.0, "started_at": null,
            "finished_at": null, "stdout_log": "/o", "stderr_log": "/e",
            "stdout_bytes": 0, "stderr_bytes": 4, "log_truncated": false, "leaks": [],
            "stderr_tail": ["ValueError: say \"no\", twice"],
            "data_dir": "/d",
            "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
        }))
        .unwrap()
    }

    #[test]
    fn one_row_per_record_under_the_header() {
        let record = ScriptRecord::of(&failed_result());
        let csv = render(&[&record]);
        let lines: Vec<&str> = csv.split_terminator("\r\n").collect();
        assert_eq!(lines[0], HEADER.join(","));
        assert_eq!(lines.len(), 2, "{csv}");
        let row = parse(&format!("{}\r\n", lines[1]));
        assert_eq!(
            row[..7],
            ["a,b", "failed", "1", "1.250", "12.3", "cpu", "0"]
        );
        assert!(row[7].contains("say \"no\", twice"), "{row:?}");
    }

    #[test]
    fn a_reason_with_control_characters_is_one_escaped_line() {
        let mut record = ScriptRecord::of(&failed_result());
        record.id = "x\u{202e}".into();
        record.reason.as_mut().unwrap().tail = vec!["E: \u{1b}]0;t\u{7}\0\r\u{1b}[2K".into()];
        let csv = render(&[&record]);
        let row = csv.split_terminator("\r\n").nth(1).unwrap();
        assert!(row.starts_with("x\\u{202e},failed,"), "{row}");
        assert!(row.ends_with("E: \\x1b]0;t\\x07\\x00\\r\\x1b[2K"), "{row}");
    }

    /// A small RFC 4180 reader of one row, to check the writer against.
    fn parse(line: &str) -> Vec<String> {
        let line = line.strip_suffix("\r\n").unwrap();
        let (mut out, mut cur, mut quoted, mut chars) =
            (Vec::new(), String::new(), false, line.chars().peekable());
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(std::mem::take(&mut cur)),
                (c, _) => cur.push(c),
            }
        }
        out.push(cur);
        out
    }
}
