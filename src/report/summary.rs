//! Human-readable tables: the end-of-run summary and the `list` output.

use crate::discovery::Discovery;
use crate::model::{PerformanceMetrics, Status};

fn mark(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "ok",
        Status::Failed => "FAILED",
        Status::TimedOut => "TIMEOUT",
        Status::Interrupted => "INTERRUPTED",
    }
}

/// Lays out rows as left-aligned columns separated by two spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
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
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The table printed when a run ends.
pub fn run_summary(m: &PerformanceMetrics) -> String {
    let rows: Vec<Vec<String>> = m
        .scripts
        .iter()
        .map(|s| {
            vec![
                mark(s.status).to_string(),
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
        "\n{} of {} succeeded, {} failed ({} timed out, {} interrupted) in {:.2}s on {}{} with {} job(s)\n",
        t.succeeded,
        t.total_scripts,
        t.failed,
        t.timed_out,
        t.interrupted,
        m.run.wall_time_s,
        m.run.device.as_str(),
        if m.run.device_requested.as_str() == m.run.device.as_str()
            || m.run.device_requested == crate::model::Device::Auto
        {
            String::new()
        } else {
            format!(" ({} requested)", m.run.device_requested.as_str())
        },
        m.run.jobs
    ));
    if t.fallbacks > 0 {
        out.push_str(&format!(
            "fell back to cpu: {} script(s){}\n",
            t.fallbacks,
            m.run
                .device_fallback_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
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
    for missing in &m.missing_scripts {
        out.push_str(&format!(
            "missing: {missing} (listed in the render manifest)\n"
        ));
    }
    out.push_str(&format!("results: {}\n", m.run.results_dir));
    out
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
    for m in &d.missing {
        out.push_str(&format!("missing: {m} (listed in the render manifest)\n"));
    }
    out
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
}
