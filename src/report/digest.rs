//! What the end-of-run documents (Markdown, JUnit, GNN layout) need of each script,
//! kept small: whole results go to disk as scripts finish, and only failures keep
//! their stderr tail.

use crate::model::{ScriptResult, Status};

/// One script, as the end-of-run documents show it.
#[derive(Debug, Clone)]
pub struct Digest {
    pub id: String,
    pub relative_path: String,
    pub status: Status,
    pub class: String,
    pub device_used: Option<String>,
    pub attempts: usize,
    pub execution_time_s: f64,
    pub peak_memory_mb: f64,
    pub matched_line: Option<String>,
    /// Only for failures.
    pub stderr_tail: Vec<String>,
    pub stdout_log: String,
}

impl Digest {
    pub fn of(r: &ScriptResult) -> Self {
        Digest {
            id: r.id.clone(),
            relative_path: r.relative_path.clone(),
            status: r.status,
            class: r.class.as_str().to_string(),
            device_used: r.device_used.map(|d| d.as_str().to_string()),
            attempts: r.attempts.len(),
            execution_time_s: r.execution_time_s,
            peak_memory_mb: r.peak_memory_mb,
            matched_line: r.matched_line.clone(),
            stderr_tail: if r.success {
                Vec::new()
            } else {
                r.stderr_tail.clone()
            },
            stdout_log: r.stdout_log.clone(),
        }
    }

    pub fn succeeded(&self) -> bool {
        self.status == Status::Succeeded
    }
}

/// Sorts digests into the metrics' script order (discovery order): scripts finish in
/// any order, reports list them as discovered.
pub fn order_like(digests: &mut [Digest], m: &crate::model::PerformanceMetrics) {
    let pos: std::collections::HashMap<&str, usize> = m
        .scripts
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    digests.sort_by_key(|d| pos.get(d.id.as_str()).copied().unwrap_or(usize::MAX));
}
