//! What the previous run in the same results folder knew: how long each script took
//! (longest expected first), how much memory it needed (how many fit at once), and
//! whether it already succeeded unchanged (`--resume`, `--rerun-failed`).

use std::collections::HashMap;
use std::path::Path;

use crate::discovery::Script;
use crate::model::{
    results_file_name, DeviceTimes, PerformanceMetrics, Platform, Reuse, ScriptResult, Status,
};

/// The largest `performance_metrics.json` read: about a kilobyte per script, parsed
/// into typed summaries, so 10,000 scripts fit many times over.
const MAX_METRICS_BYTES: u64 = 64 << 20;
/// The largest previous `<id>_results.json` read: a result is a few KiB (tails are
/// bounded), parsed into a typed result.
const MAX_RESULT_BYTES: u64 = 16 << 20;

/// The previous run, as far as its files tell.
#[derive(Debug, Default)]
pub struct History {
    /// Seconds per script id.
    pub seconds: HashMap<String, f64>,
    /// Peak MiB per script id.
    pub peak_mb: HashMap<String, f64>,
    /// Peak GPU MiB per script id (scripts that ran on a GPU).
    pub gpu_peak_mb: HashMap<String, f64>,
    /// Seconds of the last successful run per device, per script id.
    pub device_times: HashMap<String, DeviceTimes>,
}

impl History {
    /// Reads `performance_metrics.json` in `results_dir`; empty when there is none.
    pub fn load(results_dir: &Path) -> History {
        let metrics = Path::new("performance_metrics.json");
        let Ok(text) = crate::confined::read_file(results_dir, metrics, MAX_METRICS_BYTES) else {
            return History::default();
        };
        let Ok(m) = serde_json::from_slice::<PerformanceMetrics>(&text) else {
            return History::default();
        };
        let ran = m.scripts.iter().filter(|s| s.attempts > 0);
        History {
            seconds: ran
                .clone()
                .map(|s| (s.id.clone(), s.execution_time_s))
                .collect(),
            peak_mb: ran
                .clone()
                .map(|s| (s.id.clone(), s.peak_memory_mb))
                .collect(),
            gpu_peak_mb: ran
                .filter_map(|s| Some((s.id.clone(), s.peak_gpu_memory_mb?)))
                .collect(),
            device_times: m
                .scripts
                .iter()
                .filter_map(|s| Some((s.id.clone(), known_times(s)?)))
                .collect(),
        }
    }

    /// The largest peak GPU memory the previous run saw, MiB.
    pub fn max_gpu_peak_mb(&self) -> Option<f64> {
        self.gpu_peak_mb.values().copied().reduce(f64::max)
    }

    /// The run order: longest expected first. Scripts without history are estimated
    /// from their size against the median seconds-per-byte of those with history (or
    /// by size alone when nothing has history). Returns indices into `scripts`.
    pub fn schedule(&self, scripts: &[Script]) -> Vec<usize> {
        let mut rates: Vec<f64> = scripts
            .iter()
            .filter_map(|s| Some(self.seconds.get(&s.id)? / s.size_bytes.max(1) as f64))
            .collect();
        rates.sort_by(f64::total_cmp);
        let rate = rates.get(rates.len() / 2).copied().unwrap_or(1.0);
        let expected = |s: &Script| {
            self.seconds
                .get(&s.id)
                .copied()
                .unwrap_or(s.size_bytes as f64 * rate)
        };
        let mut order: Vec<usize> = (0..scripts.len()).collect();
        // Stable: equal estimates keep discovery order.
        order.sort_by(|&a, &b| expected(&scripts[b]).total_cmp(&expected(&scripts[a])));
        order
    }

    /// Seconds `scripts` should take in all, one after another, from the previous run's
    /// durations (scripts it did not have are estimated as in [`History::schedule`]);
    /// `None` when the history knows none of them.
    pub fn expected_total(&self, scripts: &[Script]) -> Option<f64> {
        let known: Vec<(f64, u64)> = scripts
            .iter()
            .filter_map(|s| Some((*self.seconds.get(&s.id)?, s.size_bytes.max(1))))
            .collect();
        if known.is_empty() {
            return None;
        }
        let mut rates: Vec<f64> = known.iter().map(|(t, b)| t / *b as f64).collect();
        rates.sort_by(f64::total_cmp);
        let rate = rates[rates.len() / 2];
        Some(
            scripts
                .iter()
                .map(|s| {
                    self.seconds
                        .get(&s.id)
                        .copied()
                        .unwrap_or(s.size_bytes.max(1) as f64 * rate)
                })
                .sum(),
        )
    }

    /// The largest peak memory the previous run saw, MiB.
    pub fn max_peak_mb(&self) -> Option<f64> {
        self.peak_mb.values().copied().reduce(f64::max)
    }
}

/// A summary's seconds per device: its own record, or, from runs before devices were
/// recorded, a first-attempt success's time on the device jax used.
fn known_times(s: &crate::model::ScriptSummary) -> Option<DeviceTimes> {
    if s.device_times.is_some() {
        return s.device_times;
    }
    if s.status != Status::Succeeded || s.attempts != 1 {
        return None;
    }
    Some(DeviceTimes::default().with(s.device_used?, s.execution_time_s))
}

impl DeviceTimes {
    /// These times with `seconds` on `device` (a TPU's are not kept).
    pub fn with(mut self, device: Platform, seconds: f64) -> DeviceTimes {
        match device {
            Platform::Cpu => self.cpu_s = Some(seconds),
            Platform::Gpu => self.gpu_s = Some(seconds),
            Platform::Tpu => {}
        }
        self
    }
}

/// The last run's `performance_metrics.json` in `results_dir`, or why there is none.
pub fn last_run(results_dir: &Path) -> Result<PerformanceMetrics, String> {
    let name = Path::new("performance_metrics.json");
    let text = crate::confined::read_file(results_dir, name, MAX_METRICS_BYTES).map_err(|e| {
        format!(
            "no run recorded in {}: cannot read {} ({e})",
            results_dir.display(),
            name.display()
        )
    })?;
    serde_json::from_slice(&text).map_err(|e| {
        format!(
            "{} is not a run's metrics: {e}",
            results_dir.join(name).display()
        )
    })
}

/// The previous result of `id`, if its file is there and parses, with its paths on
/// the tree at `tree` (see [`rebased`]).
pub fn previous_result(results_dir: &Path, tree: &Path, id: &str) -> Option<ScriptResult> {
    let name = results_file_name(id);
    let text = crate::confined::read_file(results_dir, Path::new(&name), MAX_RESULT_BYTES).ok()?;
    Some(rebased(serde_json::from_slice(&text).ok()?, tree))
}

/// `record` with its paths moved onto the tree at `tree`: a record says where its
/// script was relative to the tree (`relative_path`), so the tree it ran in is its
/// `script_path` less that; every path of the record below that tree is taken to the
/// same place below `tree`. A tree copied or moved (`cp -a`, rsync from a cluster's
/// scratch) so keeps its ledger, and `--resume` finds the outputs where they now are.
/// A path outside the old tree (a `--results-dir` elsewhere) stays as it is.
pub fn rebased(mut record: ScriptResult, tree: &Path) -> ScriptResult {
    let script = Path::new(&record.script_path);
    let rel = Path::new(&record.relative_path);
    let depth = rel.components().count();
    if depth == 0 || !script.ends_with(rel) {
        return record;
    }
    let Some(old) = script.ancestors().nth(depth) else {
        return record;
    };
    // The tree as given first: the usual case, and no system call per record.
    if old == tree {
        return record;
    }
    let new = std::fs::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf());
    if old == new {
        return record;
    }
    let old = old.to_path_buf();
    let moved = |p: &mut String| {
        if let Ok(rest) = Path::new(p.as_str()).strip_prefix(&old) {
            *p = new.join(rest).to_string_lossy().into_owned();
        }
    };
    moved(&mut record.script_path);
    moved(&mut record.stdout_log);
    moved(&mut record.stderr_log);
    moved(&mut record.data_dir);
    for a in &mut record.attempts {
        moved(&mut a.stdout_log);
        moved(&mut a.stderr_log);
    }
    record
}

/// Whether `previous` stands instead of running the script again.
pub fn keeps(reuse: Reuse, previous: &ScriptResult, fingerprint: &str) -> bool {
    let ok = previous.status == Status::Succeeded;
    match reuse {
        Reuse::None => false,
        Reuse::Resume => ok && previous.fingerprint == fingerprint,
        Reuse::RerunFailed => ok,
    }
}

/// Whether what `previous` says the script produced is still where it says: its data
/// folder is the one this run would give it (a switched layout moves it), and that
/// folder, the files the script left there and its logs all still exist. `Err` says
/// what is gone.
pub fn outputs_intact(previous: &ScriptResult, data_dir: &Path) -> Result<(), String> {
    if Path::new(&previous.data_dir) != data_dir {
        return Err(format!(
            "its data folder moved from {} to {}",
            previous.data_dir,
            data_dir.display()
        ));
    }
    let files = previous.data_files.iter().map(|f| data_dir.join(f));
    let logs = [&previous.stdout_log, &previous.stderr_log].map(std::path::PathBuf::from);
    match std::iter::once(data_dir.to_path_buf())
        .chain(files)
        .chain(logs)
        // Present as themselves: a link is not followed to see whether it leads somewhere.
        .find(|p| p.symlink_metadata().is_err())
    {
        Some(gone) => Err(format!("{} is gone", gone.display())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(id: &str, size: u64) -> Script {
        Script::for_test(id, size)
    }

    #[test]
    fn longest_expected_first_with_size_estimates_for_newcomers() {
        let mut h = History::default();
        h.seconds.insert("short".into(), 1.0);
        h.seconds.insert("long".into(), 9.0);
        // Both known scripts are 1000 bytes: the median rate is 5 ms per byte.
        let scripts = vec![
            script("short", 1000),
            script("new_big", 4000),
            script("long", 1000),
            script("new_small", 10),
        ];
        let order: Vec<&str> = h
            .schedule(&scripts)
            .into_iter()
            .map(|i| scripts[i].id.as_str())
            .collect();
        assert_eq!(order, vec!["new_big", "long", "short", "new_small"]);
    }

    #[test]
    fn the_expected_total_counts_known_durations_and_estimates_newcomers() {
        let mut h = History::default();
        assert_eq!(h.expected_total(&[script("a", 100)]), None, "nothing known");
        h.seconds.insert("a".into(), 2.0);
        h.seconds.insert("b".into(), 4.0);
        // Median rate of 1000-byte a (2 ms/byte) and b (4 ms/byte): 4 ms/byte.
        let scripts = vec![script("a", 1000), script("b", 1000), script("new", 500)];
        assert_eq!(h.expected_total(&scripts), Some(2.0 + 4.0 + 2.0));
    }

    #[test]
    fn without_history_bigger_files_go_first() {
        let scripts = vec![script("a", 10), script("b", 30), script("c", 20)];
        let order = History::default().schedule(&scripts);
        assert_eq!(order, vec![1, 2, 0]);
    }

    #[test]
    fn kept_results_need_their_outputs() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("simulation_results.json"), "{}").unwrap();
        let log = tmp.path().join("x.log");
        std::fs::write(&log, "").unwrap();
        let mut previous: ScriptResult = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "id": "x", "script_path": "/x.py", "relative_path": "x.py",
            "discovered_by": "jax_folder", "success": true, "status": "succeeded",
            "class": "succeeded", "return_code": 0, "signal": null,
            "device_requested": "cpu", "device_used": "cpu", "device_mismatch": false,
            "attempts": [], "execution_time_s": 1.0, "peak_memory_mb": 1.0,
            "cpu_user_s": 0.0, "cpu_system_s": 0.0, "timeout_s": 1.0, "started_at": null,
            "finished_at": null, "stdout_log": log, "stderr_log": log, "stdout_bytes": 0,
            "stderr_bytes": 0, "stderr_tail": [], "log_truncated": false, "leaks": [],
            "data_dir": data, "data_files": ["simulation_results.json"],
            "sandbox": {"kind": "none", "network": true, "home_visible": true,
                "environment": "inherited"}
        }))
        .unwrap();
        assert_eq!(outputs_intact(&previous, &data), Ok(()));
        let moved = outputs_intact(&previous, &tmp.path().join("elsewhere")).unwrap_err();
        assert!(moved.contains("moved"), "{moved}");
        std::fs::remove_file(data.join("simulation_results.json")).unwrap();
        let gone = outputs_intact(&previous, &data).unwrap_err();
        assert!(gone.contains("simulation_results.json"), "{gone}");
        previous.data_files.clear();
        std::fs::remove_dir(&data).unwrap();
        assert!(outputs_intact(&previous, &data).is_err());
    }
}
