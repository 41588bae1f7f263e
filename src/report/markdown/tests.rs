//! The Markdown report carries no HTML from a script: rendered by a real CommonMark
//! renderer (pulldown-cmark, with GFM tables), hostile names, exceptions, output and
//! manifest entries come out as text.

use pulldown_cmark::{html, Event, Options, Parser};
use serde_json::json;

use super::*;
use crate::model::{ScriptResult, ScriptSummary};

const HOSTILE: &str = "ValueError(\"<img src=x onerror=alert(1)>\")";
/// A name with Markdown and HTML in it, and backticks that try to close a span.
const NAME: &str = "e`v``il_<b>|*x*|[l](javascript:alert(1))";

fn hostile_result() -> ScriptResult {
    crate::model::test_failed_result(json!({
        "id": NAME, "script_path": format!("/out/{NAME}.py"),
        "relative_path": format!("m/jax/{NAME}.py"), "stderr_bytes": 4,
        "stderr_tail": ["Traceback (most recent call last):", "```", "</pre><script>alert(1)</script>",
            format!("ValueError: {HOSTILE}")],
        "exception": {"type": "ValueError", "message": HOSTILE},
        "matched_line": format!("ValueError: {HOSTILE}"),
    }))
}

fn report() -> String {
    let result = hostile_result();
    let run = crate::model::test_run_info(
        json!({"python_version": "3 <i>", "device_choice": "requested <u>"}),
    );
    let metrics = PerformanceMetrics::build(
        run,
        vec![ScriptSummary::of(&result)],
        vec!["gone/<img src=y onerror=alert(2)>.py".into()],
        vec![],
    );
    let mut metrics = metrics;
    metrics.warnings = vec![
        "skipped /out/m/pipe.py: not a regular file (a FIFO)".into(),
        "skipped /out/<script>alert(3)</script>.py: a symlink out of --output-dir".into(),
    ];
    let record = ScriptRecord::of(&result);
    render(&metrics, &[&record])
}

/// Files discovery passed over are in the report too, as in the HTML and the log.
#[test]
fn the_warnings_are_listed() {
    let md = report();
    assert!(md.contains("\n## Warnings (2)\n"), "{md}");
    assert!(
        md.contains("- skipped /out/m/pipe.py: not a regular file (a FIFO)\n"),
        "{md}"
    );
}

#[test]
fn a_renderer_finds_no_html_in_the_report() {
    let md = report();
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    let events: Vec<Event> = Parser::new_ext(&md, options).collect();
    let raw: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Html(_) | Event::InlineHtml(_)))
        .collect();
    assert!(raw.is_empty(), "raw HTML in the Markdown: {raw:?}\n{md}");
    let mut out = String::new();
    html::push_html(&mut out, events.into_iter());
    for live in ["<img", "<script", "<b>", "<i>", "<u>", "<a "] {
        assert!(!out.contains(live), "a live {live} element:\n{out}");
    }
    // The exception and the name are there, as text.
    assert!(out.contains("&lt;img src=x onerror=alert(1)&gt;"), "{out}");
    assert!(out.contains("<code>"), "{out}");
}

#[test]
fn the_hostile_name_stays_one_code_span_and_one_table_row() {
    let md = report();
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    let mut out = String::new();
    html::push_html(&mut out, Parser::new_ext(&md, options));
    // The script table: a header row and exactly one script row, then the missing one.
    let scripts = out.split("<h2>Scripts</h2>").nth(1).unwrap();
    let table = &scripts[..scripts.find("</table>").unwrap()];
    assert_eq!(table.matches("<tr>").count(), 3, "{table}");
    let row = table.split("<tr>").nth(2).unwrap();
    assert_eq!(row.matches("<td>").count(), 8, "{row}");
    assert!(
        row.contains("<code>m/jax/e`v``il_&lt;b&gt;|*x*|[l](javascript:alert(1)).py</code>"),
        "{row}"
    );
}

#[test]
fn spans_and_fences_outgrow_the_backticks_inside() {
    assert_eq!(code_span("a"), "`a`");
    assert_eq!(code_span("a``b"), "```a``b```");
    assert_eq!(code_span("`x"), "`` `x ``");
    assert_eq!(fence("a\n````\nb"), "`````text\na\n````\nb\n`````");
    assert_eq!(text("<a href='x'>*"), "&lt;a href='x'&gt;\\*");
    assert_eq!(text("0.1.0 [x](y)"), "0\\.1.0 \\[x\\](y)");
    assert_eq!(text("- item"), "\\- item");
}

#[test]
fn control_characters_are_shown_escaped() {
    assert_eq!(code_span("a\u{1b}]0;t\u{7}\nb"), "`a\\x1b]0;t\\x07\\nb`");
    assert_eq!(
        fence("E\u{1b}[2K\r\u{202e}\n\tx\0"),
        "```text\nE\\x1b[2K\\r\\u{202e}\n\tx\\x00\n```"
    );
    // Escaped, then its backslashes escaped for Markdown: it renders as `\x1b`.
    assert_eq!(inline("a\u{1b}b\nc"), "a\\\\x1bb\\\\nc");
}
