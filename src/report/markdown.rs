//! `execution_report.md`: the run's summary for people reading a repository.
//!
//! Nothing a script controls (its name and path, manifest entries, exceptions,
//! output) reaches the Markdown as markup: names and paths go in code spans, output
//! in fences longer than any backtick run inside it, and the rest is escaped, so a
//! renderer shows `<img src=x onerror=…>` as text and never as an element. Control
//! characters and bidirectional controls are written visibly first
//! ([`super::escape`]), so a reader's terminal or editor shows `\x1b]0;…` and obeys
//! nothing.

use std::fmt::Write;

use super::escape;
use super::export::RunRecord;
use super::record::ScriptRecord;
use crate::error::ReportError;
use crate::listing::{head, LISTED};
use crate::model::{Outcomes, PerformanceMetrics};

/// `execution_report.md` of a finished run.
pub fn render_bytes(run: &RunRecord) -> Result<Vec<u8>, ReportError> {
    Ok(render(run.metrics, &run.ordered()).into_bytes())
}

/// Renders the Markdown report.
pub fn render(m: &PerformanceMetrics, scripts: &[&ScriptRecord]) -> String {
    let mut s = String::new();
    summary(&mut s, m);
    table(&mut s, m, scripts);
    warnings(&mut s, m);
    // Every script this run ran or meant to run that did not succeed, so the section
    // counts what the summary line's statuses other than succeeded and carried count.
    let failures: Vec<&ScriptRecord> = scripts
        .iter()
        .copied()
        .filter(|d| d.needs_attention())
        .collect();
    if !failures.is_empty() {
        let counts = Outcomes::count(failures.iter().map(|d| d.status));
        let _ = writeln!(
            s,
            "\n## Did not succeed ({}: {})",
            failures.len(),
            counts.problems()
        );
        for d in failures {
            failure(&mut s, d);
        }
    }
    // The carried records that did not succeed: the tree is red there, though this
    // run did not run them. Counted apart from this run's.
    let standing: Vec<&ScriptRecord> = scripts
        .iter()
        .copied()
        .filter(|d| d.still_failing())
        .collect();
    if !standing.is_empty() {
        let _ = writeln!(
            s,
            "\n## Still failing from earlier runs ({})",
            standing.len()
        );
        for d in standing {
            failure(&mut s, d);
        }
    }
    s
}

/// The title, the summary line and the run's table.
fn summary(s: &mut String, m: &PerformanceMetrics) {
    let t = &m.totals;
    let _ = writeln!(s, "# JAX execution report\n");
    let _ = writeln!(
        s,
        "{} in {:.2} s on {} with {}.\n",
        t.outcomes().words(),
        m.run.wall_time_s,
        m.run.device.as_str(),
        m.run.jobs_words()
    );
    // What step 11 failed to render has no script to fail: said before anything else.
    if !m.render_failures.is_empty() {
        let _ = writeln!(
            s,
            "**{} model(s) failed to render** (step 11 made no JAX script):\n",
            m.render_failures.len()
        );
        let (shown, rest) = head(&m.render_failures, LISTED);
        for f in shown {
            let _ = writeln!(s, "- {}: {}", code_span(&f.source), inline(&f.message));
        }
        if rest > 0 {
            let _ = writeln!(s, "- and {rest} more (in performance_metrics.json)");
        }
        s.push('\n');
    }
    if !m.missing_scripts.is_empty() {
        let _ = writeln!(
            s,
            "**{} script(s) the render manifest lists are missing** (see the table).\n",
            m.missing_scripts.len()
        );
    }
    let _ = writeln!(s, "| | |\n| --- | --- |");
    let _ = writeln!(s, "| run id | {} |", cell_code(&m.run.run_id));
    let _ = writeln!(s, "| jax-runner | {} |", cell_text(&m.run.runner_version));
    let _ = writeln!(
        s,
        "| started | {} |",
        cell_text(&m.run.started_at.rfc3339())
    );
    let _ = writeln!(
        s,
        "| device | {} requested, {} used ({}) |",
        m.run.device_requested.as_str(),
        m.run.device.as_str(),
        cell_text(&m.run.device_choice)
    );
    let or_dash = |v: &Option<String>| v.as_deref().map_or("-".into(), cell_text);
    let _ = writeln!(s, "| python | {} |", or_dash(&m.run.python_version));
    let _ = writeln!(s, "| jax | {} |", or_dash(&m.run.jax_version));
    let _ = writeln!(s, "| fallbacks | {} |", t.fallbacks);
    let _ = writeln!(s, "| device mismatches | {} |", t.device_mismatches);
    let _ = writeln!(s, "| leaked processes | {} |\n", t.leaks);
}

/// The table of scripts, then the manifest's missing and refused entries.
fn table(s: &mut String, m: &PerformanceMetrics, scripts: &[&ScriptRecord]) {
    let _ = writeln!(s, "## Scripts\n");
    // The GPU column only where some script has a GPU figure.
    let gpu = scripts.iter().any(|d| d.peak_gpu_memory_mb.is_some());
    let (gpu_head, gpu_rule) = if gpu {
        (" peak GPU (MiB) |", " --- |")
    } else {
        ("", "")
    };
    let _ = writeln!(
        s,
        "| script | status | class | device | attempts | wall (s) | peak RSS (MiB) |{gpu_head} reason |"
    );
    let _ = writeln!(
        s,
        "| --- | --- | --- | --- | --- | --- | --- |{gpu_rule} --- |"
    );
    for d in scripts {
        let gpu_cell = match (gpu, d.peak_gpu_memory_mb) {
            (false, _) => String::new(),
            (true, Some(mb)) => match d.gpu_index {
                Some(i) => format!(" {mb:.0} (GPU {i}) |"),
                None => format!(" {mb:.0} |"),
            },
            (true, None) => " - |".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.2} | {:.0} |{gpu_cell} {} |",
            cell_code(&d.relative_path),
            d.status.as_str(),
            d.class.as_str(),
            d.device_used.map_or("-", |p| p.as_str()),
            d.attempts.len(),
            d.execution_time_s,
            d.peak_memory_mb,
            match (&d.reason, &d.carried) {
                (Some(r), _) => cell_text(&r.words),
                (None, Some(c)) => cell_text(&c.line()),
                (None, None) => String::new(),
            },
        );
    }
    let dash = if gpu { " - |" } else { "" };
    for (status, entries) in [
        ("missing", &m.missing_scripts),
        ("refused", &m.refused_scripts),
    ] {
        let (shown, rest) = head(entries, LISTED);
        for entry in shown {
            let _ = writeln!(
                s,
                "| {} | {status} | - | - | 0 | - | - |{dash} listed in the render manifest |",
                cell_code(entry)
            );
        }
        if rest > 0 {
            let _ = writeln!(
                s,
                "| and {rest} more (in performance_metrics.json) | {status} | - | - | 0 | - | - |{dash} |"
            );
        }
    }
}

/// What the run passed over or worked around, as the HTML and the log say it: files
/// discovery skipped (a link out of the tree, a loop, a FIFO, an unreadable file),
/// results it could not read.
fn warnings(s: &mut String, m: &PerformanceMetrics) {
    if m.warnings.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Warnings ({})\n", m.warnings.len());
    let (shown, rest) = head(&m.warnings, LISTED);
    for w in shown {
        let _ = writeln!(s, "- {}", inline(w));
    }
    if rest > 0 {
        let _ = writeln!(s, "- and {rest} more (in performance_metrics.json)");
    }
}

/// One failure: its id, the reason, the exception and the output tail.
fn failure(s: &mut String, d: &ScriptRecord) {
    let ended = match &d.carried {
        Some(c) => inline(&c.line()),
        None => Outcomes::label(d.status).to_string(),
    };
    let _ = writeln!(
        s,
        "\n### {}: {ended} ({})\n",
        code_span(&d.id),
        d.class.as_str()
    );
    let Some(reason) = &d.reason else {
        return;
    };
    let _ = writeln!(s, "{}\n", text(&reason.words));
    if let Some(exception) = d.exception_text() {
        let _ = writeln!(s, "Exception: {}\n", code_span(&exception));
    }
    if !reason.tail.is_empty() {
        let _ = writeln!(s, "Last lines of {}:\n", reason.stream);
        let _ = writeln!(s, "{}", fence(&reason.tail.join("\n")));
    }
}

/// The longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `s` as an inline code span: delimited by more backticks than any run inside,
/// padded where it starts or ends with a backtick, on one line (its line breaks and
/// control characters escaped, [`escape::line`]).
pub fn code_span(s: &str) -> String {
    let one_line = escape::line(s);
    let ticks = "`".repeat(longest_backtick_run(&one_line) + 1);
    let pad = if one_line.starts_with('`') || one_line.ends_with('`') || one_line.is_empty() {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{one_line}{pad}{ticks}")
}

/// `s` as a fenced code block, its fence longer than any backtick run inside, its
/// control characters escaped ([`escape::excerpt`]).
pub fn fence(s: &str) -> String {
    let s = escape::excerpt(s);
    let ticks = "`".repeat((longest_backtick_run(&s) + 1).max(3));
    format!("{ticks}text\n{s}\n{ticks}")
}

/// `s` as plain text at the start of a line: [`inline`], and a start that would
/// open a list is escaped too.
pub fn text(s: &str) -> String {
    let mut out = inline(s);
    let digits = out.bytes().take_while(u8::is_ascii_digit).count();
    match out.as_bytes().get(digits) {
        Some(b'-' | b'+' | b'=') if digits == 0 => out.insert(0, '\\'),
        Some(b'.' | b')') if digits > 0 => out.insert(digits, '\\'),
        _ => {}
    }
    out
}

/// `s` as plain text inside a line: every character Markdown or HTML would read as
/// markup is escaped (`<`, `>` and `&` as entities, the rest with a backslash),
/// after line breaks and control characters are written visibly ([`escape::line`]).
pub fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in escape::line(s).chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A table cell of plain text (never at a line start).
fn cell_text(s: &str) -> String {
    inline(s)
}

/// A table cell holding a code span: GFM splits cells at `|` even inside code, so
/// pipes are escaped there too (GFM drops the backslash again).
fn cell_code(s: &str) -> String {
    code_span(s).replace('|', "\\|")
}

#[cfg(test)]
mod tests;
