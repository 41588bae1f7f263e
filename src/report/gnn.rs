//! GNN's step-12 layout, for pipelines whose analysis step reads it:
//! `12_execute_output/<model>/jax/execution_logs/<script>_results.json` with GNN's
//! keys, the scripts' own output under `…/jax/simulation_data/`, and
//! `12_execute_output/summaries/{execution_summary.json, execution_report.md}`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::digest::{order_like, Digest};
use super::{markdown, write_atomic, write_json, Reporter};
use crate::discovery::Script;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::{ScriptResult, Status};
use crate::paths::rfc3339;

/// The step-12 folder, beside `11_render_output`.
pub const STEP12_DIR: &str = "12_execute_output";
/// Bytes of a script's stdout copied into `simulation_data.raw_output`.
const RAW_OUTPUT_BYTES: u64 = 64 * 1024;

/// Where one script's step-12 files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GnnEntry {
    /// The folder two levels above the script (`<model>/jax/<script>.py`).
    pub model: String,
    /// The script's file name without `.py`.
    pub script: String,
    /// Its `GNN_OUTPUT_DIR`.
    pub data_dir: PathBuf,
}

/// Decides each script's step-12 place. A model with one script writes straight into
/// `simulation_data/`; with several, each gets `simulation_data/<script>/` so their
/// `simulation_results.json` files do not overwrite each other.
pub fn plan(output_dir: &Path, scripts: &[Script]) -> HashMap<String, GnnEntry> {
    let root = output_dir.join(STEP12_DIR);
    let model_of = |s: &Script| {
        s.path
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map(|n| crate::discovery::sanitize(&n.to_string_lossy()))
            .unwrap_or_else(|| "unknown_model".into())
    };
    let mut per_model: HashMap<String, usize> = HashMap::new();
    for s in scripts {
        *per_model.entry(model_of(s)).or_default() += 1;
    }
    scripts
        .iter()
        .map(|s| {
            let model = model_of(s);
            let script = s
                .path
                .file_stem()
                .map(|n| crate::discovery::sanitize(&n.to_string_lossy()))
                .unwrap_or_else(|| s.id.clone());
            let mut data_dir = root.join(&model).join("jax").join("simulation_data");
            if per_model[&model] > 1 {
                data_dir = data_dir.join(&script);
            }
            (
                s.id.clone(),
                GnnEntry {
                    model,
                    script,
                    data_dir,
                },
            )
        })
        .collect()
}

fn raw_output(path: &str) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(RAW_OUTPUT_BYTES)));
    let mut buf = Vec::new();
    let _ = f.take(RAW_OUTPUT_BYTES).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// One script's step-12 results document, with GNN's keys.
pub fn script_document(r: &ScriptResult, e: &GnnEntry, results_file: &Path) -> serde_json::Value {
    json!({
        "framework": "jax",
        "model_name": e.model,
        "script_name": format!("{}.py", e.script),
        "script_path": r.script_path,
        "success": r.success,
        "return_code": r.return_code,
        "execution_time": r.execution_time_s,
        "timestamp": r.finished_at.clone().unwrap_or_else(|| rfc3339(std::time::SystemTime::now())),
        "simulation_data": {
            "raw_output": raw_output(&r.stdout_log),
            "raw_error": r.stderr_tail.join("\n"),
            "output_dir": e.data_dir,
        },
        "execution_metadata": {
            "runner": "jax-runner",
            "runner_version": env!("CARGO_PKG_VERSION"),
            "status": r.status,
            "class": r.class,
            "device_requested": r.device_requested,
            "device_used": r.device_used,
            "attempts": r.attempts.len(),
            "peak_memory_mb": r.peak_memory_mb,
            "results_file": results_file,
        },
    })
}

/// Writes the step-12 layout as scripts finish and when the run ends.
#[derive(Debug)]
pub struct GnnReporter {
    root: PathBuf,
    results_dir: PathBuf,
    entries: HashMap<String, GnnEntry>,
    scripts: Vec<Digest>,
}

impl GnnReporter {
    pub fn new(
        output_dir: &Path,
        results_dir: PathBuf,
        entries: HashMap<String, GnnEntry>,
    ) -> Self {
        GnnReporter {
            root: output_dir.join(STEP12_DIR),
            results_dir,
            entries,
            scripts: Vec::new(),
        }
    }
}

impl Reporter for GnnReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        match event {
            RunEvent::ScriptFinished { result } => {
                self.scripts.push(Digest::of(result));
                if let Some(e) = self.entries.get(&result.id) {
                    let ours = self
                        .results_dir
                        .join(crate::model::results_file_name(&result.id));
                    let path = self
                        .root
                        .join(&e.model)
                        .join("jax")
                        .join("execution_logs")
                        .join(format!("{}_results.json", e.script));
                    write_json(
                        &path,
                        "GNN script result",
                        &script_document(result, e, &ours),
                    )?;
                }
            }
            RunEvent::RunFinished { metrics } => {
                order_like(&mut self.scripts, metrics);
                let t = &metrics.totals;
                // Scripts the run never started count as skipped, not failed, in GNN's summary.
                let never_started = self
                    .scripts
                    .iter()
                    .filter(|d| d.status == Status::Interrupted && d.attempts == 0)
                    .count();
                let skipped = never_started + t.missing;
                let ran = t.total_scripts + t.missing;
                let details: Vec<serde_json::Value> = self
                    .scripts
                    .iter()
                    .map(|d| {
                        let e = self.entries.get(&d.id);
                        json!({
                            "script_name": e.map(|e| format!("{}.py", e.script)),
                            "model_name": e.map(|e| e.model.clone()),
                            "script_path": d.script_path,
                            "success": d.succeeded(),
                            "status": d.status,
                            "class": d.class,
                            "return_code": d.return_code,
                            "execution_time": d.execution_time_s,
                            "started_at": d.started_at,
                            "device_requested": d.device_requested,
                            "device_used": d.device_used,
                            "simulation_data": e.map(|e| e.data_dir.clone()),
                        })
                    })
                    .collect();
                let summary = json!({
                    "framework": "jax",
                    "timestamp": metrics.run.finished_at,
                    "total_scripts_found": ran,
                    "successful_executions": t.succeeded,
                    "failed_executions": t.failed - never_started,
                    "skipped_executions": skipped,
                    "success_rate": if ran == 0 { 0.0 } else { 100.0 * t.succeeded as f64 / ran as f64 },
                    "total_execution_time": t.total_execution_time,
                    "missing_scripts": metrics.missing_scripts,
                    "execution_details": details,
                });
                let dir = self.root.join("summaries");
                write_json(
                    &dir.join("execution_summary.json"),
                    "GNN execution summary",
                    &summary,
                )?;
                let md = markdown::render(metrics, &self.scripts);
                write_atomic(&dir.join("execution_report.md"), md.as_bytes())?;
            }
            _ => {}
        }
        Ok(())
    }
}
