//! Human-readable tables: the end-of-run summary and the `list` output. Cells and
//! manifest entries are shown through [`escape::line`]: a file name or a reason with
//! control characters in it cannot steer the terminal.

use super::escape;
use crate::discovery::Discovery;
use crate::listing::{head, LISTED};
use crate::model::{PerformanceMetrics, Status};

fn mark(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "ok",
        Status::Failed => "FAILED",
        Status::TimedOut => "TIMEOUT",
        Status::Interrupted => "INTERRUPTED",
        Status::Skipped => "SKIPPED",
        Status::Carried => "CARRIED",
    }
}

/// Lays out rows as left-aligned columns separated by two spaces, each cell escaped.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| escape::line(c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The table `-v` prints when a run ends: a row per script, then how the run ran.
/// The failures and the counts follow it in `terminal::end_of_run`.
pub fn run_table(m: &PerformanceMetrics) -> String {
    let rows: Vec<Vec<String>> = m
        .scripts
        .iter()
        .map(|s| {
            vec![
                // A script kept from an earlier run by --resume/--rerun-failed did not
                // run now: it says so, instead of passing for a fresh success.
                if s.resumed {
                    "kept".to_string()
                } else {
                    mark(s.status).to_string()
                },
                s.id.clone(),
                s.device_used.map_or("-", |d| d.as_str()).to_string(),
                s.attempts.to_string(),
                format!("{:.2}s", s.execution_time_s),
                format!("{:.2}s", s.cpu_user_s + s.cpu_system_s),
                format!("{:.0} MiB", s.peak_memory_mb),
                if s.status == Status::Succeeded {
                    String::new()
                } else {
                    s.class.as_str().to_string()
                },
            ]
        })
        .collect();
    let mut out = table(
        &[
            "STATUS", "SCRIPT", "DEVICE", "TRIES", "WALL", "CPU", "PEAK RSS", "CLASS",
        ],
        &rows,
    );
    let t = &m.totals;
    out.push_str(&format!(
        "\nran on {}{} with {}\n",
        m.run.device.as_str(),
        if m.run.device_requested.as_str() == m.run.device.as_str()
            || m.run.device_requested == crate::model::Device::Auto
        {
            String::new()
        } else {
            format!(" ({} requested)", m.run.device_requested.as_str())
        },
        m.run.jobs_words()
    ));
    if let Some(how) = isolation(m) {
        out.push_str(&how);
        out.push('\n');
    }
    if t.fallbacks > 0 {
        out.push_str(&format!(
            "fell back to cpu: {} script(s){}\n",
            t.fallbacks,
            m.run
                .device_fallback_reason
                .as_deref()
                .map(|r| format!(" ({})", escape::line(r)))
                .unwrap_or_default()
        ));
    }
    if t.device_mismatches > 0 {
        out.push_str(&format!(
            "device mismatch: {} script(s) ran on another device than asked\n",
            t.device_mismatches
        ));
    }
    if t.leaks > 0 {
        out.push_str(&format!("leaked processes killed: {}\n", t.leaks));
    }
    if t.compilations > 0 {
        out.push_str(&format!(
            "compilations: {} ({} from the persistent cache, {} missed it)\n",
            t.compilations, t.cache_hits, t.cache_misses
        ));
    }
    out.push_str(&format!("results: {}\n", escape::line(&m.run.results_dir)));
    out
}

/// `missing:` and `refused:` lines for render manifest entries, at most
/// [`LISTED`] of each, then one that counts the rest.
/// The models step 11 failed to render, each with its message: said first, since no
/// script of theirs ran to fail on its own.
pub(crate) fn render_failure_lines(out: &mut String, failed: &[crate::model::RenderFailed]) {
    if failed.is_empty() {
        return;
    }
    out.push_str(&format!(
        "\nrender failures ({}): step 11 made no JAX script for these models\n",
        failed.len()
    ));
    let (shown, rest) = head(failed, LISTED);
    for f in shown {
        out.push_str(&format!(
            "  {}: {}\n",
            escape::line(&f.source),
            escape::line(&f.message)
        ));
    }
    if rest > 0 {
        out.push_str(&format!(
            "  and {rest} more (in performance_metrics.json)\n"
        ));
    }
}

pub(crate) fn manifest_lines(out: &mut String, missing: &[String], refused: &[String]) {
    for (label, entries, why) in [
        ("missing", missing, "listed in the render manifest"),
        (
            "refused",
            refused,
            "listed in the render manifest, outside --output-dir: not run",
        ),
    ] {
        let (shown, rest) = head(entries, LISTED);
        for entry in shown {
            out.push_str(&format!("{label}: {} ({why})\n", escape::line(entry)));
        }
        if rest > 0 {
            out.push_str(&format!("{label}: and {rest} more\n"));
        }
    }
}

/// The `list` table.
pub fn discovery_table(d: &Discovery) -> String {
    let rows: Vec<Vec<String>> = d
        .scripts
        .iter()
        .map(|s| {
            let by = serde_json::to_value(s.discovered_by)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            vec![
                s.id.clone(),
                by,
                s.relative_path.to_string_lossy().into_owned(),
            ]
        })
        .collect();
    let mut out = table(&["ID", "FOUND BY", "PATH"], &rows);
    out.push_str(&format!("\n{} script(s)\n", d.scripts.len()));
    manifest_lines(&mut out, &d.missing, &d.refused);
    out
}

/// The plan `--dry-run` prints: each script in run order, how it would run, and what
/// `--resume`/`--rerun-failed` would keep (with why).
pub fn dry_run_table(
    scripts: &[crate::model::PlannedScript],
    jobs: usize,
    cold_reason: Option<&str>,
    d: &Discovery,
) -> String {
    let rows: Vec<Vec<String>> = scripts
        .iter()
        .map(|p| {
            // Settings from one override share its place: `timeout 5s, device cpu
            // (override "*pomdp*" in profile ci (jax-runner.toml:8))`.
            let mut by_source: Vec<(&str, Vec<String>)> = Vec::new();
            for (key, set) in &p.overrides {
                let item = format!("{key} {}", set.value);
                match by_source.iter_mut().find(|(s, _)| *s == set.source) {
                    Some((_, items)) => items.push(item),
                    None => by_source.push((&set.source, vec![item])),
                }
            }
            let notes = p.why.iter().cloned().chain(
                by_source
                    .into_iter()
                    .map(|(source, items)| format!("{} ({source})", items.join(", "))),
            );
            let note = notes.collect::<Vec<_>>().join("; ");
            vec![
                p.order.to_string(),
                p.id.clone(),
                p.action.clone(),
                p.device.as_str().to_string(),
                p.sandbox.clone(),
                p.start.clone(),
                humantime::format_duration(std::time::Duration::from_secs_f64(p.timeout_s))
                    .to_string(),
                p.retries.to_string(),
                note,
            ]
        })
        .collect();
    let header = [
        "#", "ID", "ACTION", "DEVICE", "SANDBOX", "START", "TIMEOUT", "RETRIES", "NOTE",
    ];
    let mut out = table(&header, &rows);
    let run = scripts.iter().filter(|p| p.action == "run").count();
    out.push_str(&format!(
        "
dry run: {run} script(s) would run, {} kept, {jobs} at once; nothing was started or written
",
        scripts.len() - run
    ));
    if let Some(why) = cold_reason {
        out.push_str(&format!(
            "cold starts: {why}
"
        ));
    }
    manifest_lines(&mut out, &d.missing, &d.refused);
    out
}

/// What confined the scripts that ran, and how many started warm:
/// `sandboxed (bwrap, landlock-v7, seccomp), 3 of 3 started warm`. `None` when no
/// script ran (all kept, skipped or carried).
pub fn isolation(m: &PerformanceMetrics) -> Option<String> {
    let t = &m.totals;
    // M is the scripts this run started, counted as the totals count them.
    let ran = m.scripts.iter().filter(|s| s.started_here()).count();
    if ran == 0 {
        return None;
    }
    let how = match m.run.sandbox_layers.is_empty() {
        true => "not sandboxed".to_string(),
        false => format!("sandboxed ({})", m.run.sandbox_layers.join(", ")),
    };
    Some(format!("{how}, {} of {ran} started warm", t.warm_starts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let t = table(
            &["A", "B"],
            &[
                vec!["long-cell".into(), "x".into()],
                vec!["s".into(), "y".into()],
            ],
        );
        assert_eq!(t, "A          B\nlong-cell  x\ns          y\n");
    }

    #[test]
    fn the_table_counts_this_runs_compilations_when_there_were_any() {
        let line = |id: &str, compilations: u64, hits: u64| -> crate::model::ScriptSummary {
            serde_json::from_value(serde_json::json!({
                "id": id, "status": "succeeded", "execution_time_s": 1.0,
                "cpu_user_s": 1.0, "cpu_system_s": 0.0, "peak_memory_mb": 1.0,
                "attempts": 1, "class": "succeeded", "device_requested": "cpu",
                "device_used": "cpu", "fallback": false, "device_mismatch": false,
                "leaks": 0, "results_file": format!("{id}_results.json"),
                "compilations": compilations, "cache_hits": hits,
                "cache_misses": compilations - hits,
            }))
            .unwrap()
        };
        let run = || crate::model::test_run_info(serde_json::json!({}));
        let m = PerformanceMetrics::build(
            run(),
            vec![line("a", 32, 30), line("b", 35, 0)],
            vec![],
            vec![],
        );
        assert_eq!(
            (
                m.totals.compilations,
                m.totals.cache_hits,
                m.totals.cache_misses
            ),
            (67, 30, 37)
        );
        let table = run_table(&m);
        assert!(
            table.contains("compilations: 67 (30 from the persistent cache, 37 missed it)\n"),
            "{table}"
        );
        let none = PerformanceMetrics::build(run(), vec![line("a", 0, 0)], vec![], vec![]);
        assert!(!run_table(&none).contains("compilations"));
    }

    #[test]
    fn a_long_missing_list_ends_in_one_counting_line() {
        let missing: Vec<String> = (0..200_000).map(|i| format!("gone/{i}.py")).collect();
        let mut out = String::new();
        manifest_lines(&mut out, &missing, &["/etc/x.py".into()]);
        assert_eq!(out.lines().count(), LISTED + 2, "{out}");
        assert!(out.contains("missing: and 199950 more\n"), "{out}");
        assert!(out.contains("refused: /etc/x.py"), "{out}");
    }
}
