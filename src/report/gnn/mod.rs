//! GNN's step-12 layout, written the way GNN's own step 12 writes it, so its analysis
//! step (16) reads jax-runner's output exactly as it reads GNN's:
//! `12_execute_output/<model>/jax/execution_logs/<script>.py_{results.json,execution.log}`,
//! the scripts' own output in `<model>/jax/simulation_data/`, and
//! `12_execute_output/summaries/{execution_summary.json, execution_report.md}`.

mod document;
mod text;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::export::{Exporter, RunRecord};
use super::record::ScriptRecord;
use super::{markdown, write_atomic, write_atomic_stream, write_json};
use crate::discovery::Script;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::gnn::{
    CollectedOutputs, FrameworkStatus, GnnDetail, GnnSummary, RenderFailure, FRAMEWORK,
    SUMMARY_FORMAT,
};
use crate::model::ScriptResult;
use crate::paths::local_iso;
use text::LogText;

pub use document::gnn_error;

/// Where one script's step-12 files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GnnEntry {
    /// The model folder: the folder above `jax/` (else the script's own folder).
    pub model: String,
    /// The script's file name (`Model_jax.py`).
    pub script_name: String,
    /// What names its files in `execution_logs/`: the file name, or the script id
    /// where two scripts of one model share a file name.
    pub file_key: String,
    /// `12_execute_output/<model>/jax`: GNN's `implementation_directory`.
    pub impl_dir: PathBuf,
    /// Its `GNN_OUTPUT_DIR`.
    pub data_dir: PathBuf,
}

/// The model folder of a script: GNN renders `<model>/jax/<script>.py`.
fn model_of(s: &Script) -> String {
    let parent = s.path.parent();
    let folder = match parent.and_then(Path::file_name) {
        Some(n) if n == FRAMEWORK => parent.and_then(Path::parent).and_then(Path::file_name),
        other => other,
    };
    folder
        .map(|n| crate::discovery::sanitize(&n.to_string_lossy()))
        .unwrap_or_else(|| "unknown_model".into())
}

/// The longest file key: `<key>_results.json` and its atomic temporary
/// (`.<key>_results.json.<pid>.<n>.tmp`, 47 bytes more) must fit the 255-byte name
/// limit. A script whose file name is longer is keyed by its id, which is short.
const MAX_KEY_BYTES: usize = 180;

/// Decides each script's step-12 place under `step12`. A model with one script writes
/// straight into `simulation_data/`; with several, each gets `simulation_data/<key>/`
/// so their `simulation_results.json` files do not overwrite each other. Every script
/// gets its own files, always: see [`file_keys`].
pub fn plan(step12: &Path, scripts: &[Script]) -> HashMap<String, GnnEntry> {
    let named: Vec<(String, String)> = scripts
        .iter()
        .map(|s| {
            let name = s
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| format!("{}.py", s.id));
            (model_of(s), name)
        })
        .collect();
    let mut per_model: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (model, _)) in named.iter().enumerate() {
        per_model.entry(model.as_str()).or_default().push(i);
    }
    let mut keys: Vec<String> = vec![String::new(); scripts.len()];
    for members in per_model.values() {
        let wanted: Vec<(&str, &str)> = members
            .iter()
            .map(|&i| (named[i].1.as_str(), scripts[i].id.as_str()))
            .collect();
        for (&i, key) in members.iter().zip(file_keys(&wanted)) {
            keys[i] = key;
        }
    }
    scripts
        .iter()
        .zip(named.iter())
        .zip(keys)
        .map(|((s, (model, script_name)), file_key)| {
            let impl_dir = step12.join(model).join(FRAMEWORK);
            let mut data_dir = impl_dir.join("simulation_data");
            if per_model[model.as_str()].len() > 1 {
                data_dir = data_dir.join(file_key.strip_suffix(".py").unwrap_or(&file_key));
            }
            let entry = GnnEntry {
                model: model.clone(),
                script_name: script_name.clone(),
                file_key,
                impl_dir,
                data_dir,
            };
            (s.id.clone(), entry)
        })
        .collect()
}

/// The file keys of one model's scripts, given as (file name, id): each its file name
/// (GNN's own naming), unless that is shared or too long, then `<id>.py`. An id-based
/// key can equal another script's file name (`a/x/jax/s.py` keyed `a_x_jax_s.py`
/// beside a real `a_x_jax_s.py`): the real name then yields too, until no two keys
/// are equal. Ids are unique, so this ends, and the common case keeps GNN's names.
fn file_keys(scripts: &[(&str, &str)]) -> Vec<String> {
    let by_id = |id: &str| format!("{id}.py");
    let mut keys: Vec<(String, bool)> = scripts
        .iter()
        .map(
            |(name, id)| match name.len() > ".py".len() && name.len() <= MAX_KEY_BYTES {
                true => (name.to_string(), false),
                false => (by_id(id), true),
            },
        )
        .collect();
    loop {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (key, _) in &keys {
            *count.entry(key.as_str()).or_default() += 1;
        }
        let clashing: Vec<usize> = (0..keys.len())
            .filter(|&i| !keys[i].1 && count[keys[i].0.as_str()] > 1)
            .collect();
        if clashing.is_empty() {
            return keys.into_iter().map(|(k, _)| k).collect();
        }
        for i in clashing {
            keys[i] = (by_id(scripts[i].1), true);
        }
    }
}

/// What the summary says about the run beyond its scripts.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// `--output-dir`.
    pub target_directory: PathBuf,
    /// Failed JAX renderings from the manifest: (source file name, message).
    pub render_failures: Vec<(String, String)>,
    /// Listed scripts that do not exist, absolute.
    pub missing_render_scripts: Vec<PathBuf>,
    /// On a Ray cluster.
    pub distributed: bool,
}

/// Writes the step-12 layout: each script's files as it finishes (from its whole
/// result), the summaries when the run ends (from the run's shared records).
#[derive(Debug)]
pub struct GnnExporter {
    root: PathBuf,
    results_dir: PathBuf,
    entries: HashMap<String, GnnEntry>,
    facts: RunFacts,
    executor: String,
    jobs: usize,
    /// What each script left (outputs, log lengths), by id, kept from its result.
    seen: HashMap<String, document::Seen>,
}

impl GnnExporter {
    pub fn new(
        step12: PathBuf,
        results_dir: PathBuf,
        entries: HashMap<String, GnnEntry>,
        facts: RunFacts,
    ) -> Self {
        GnnExporter {
            root: step12,
            results_dir,
            entries,
            facts,
            executor: String::new(),
            jobs: 1,
            seen: HashMap::new(),
        }
    }

    /// The summary entries of the scripts this layout places, in discovery order.
    fn details(&self, records: &[&ScriptRecord]) -> Vec<GnnDetail> {
        records
            .iter()
            .filter_map(|r| {
                let e = self.entries.get(&r.id)?;
                let seen = self.seen.get(&r.id).cloned().unwrap_or_default();
                Some(document::detail(r, e, &self.executor, seen))
            })
            .collect()
    }

    fn summary(&self, run: &RunRecord) -> GnnSummary {
        let metrics = run.metrics;
        let details = self.details(&run.ordered());
        let skipped = details.iter().filter(|d| d.skipped).count();
        let succeeded = details.iter().filter(|d| d.success).count();
        let failed = details.len() - skipped - succeeded;
        let attempted = details.len() - skipped;
        let success_rate = if attempted == 0 {
            100.0
        } else {
            (10_000.0 * succeeded as f64 / attempted as f64).round() / 100.0
        };
        let status = match (attempted, failed) {
            (0, _) => "skipped",
            (_, 0) => "success",
            _ => "failed",
        };
        let framework_status = BTreeMap::from([(
            FRAMEWORK.to_string(),
            FrameworkStatus {
                status: status.into(),
                executions: attempted,
                error: details
                    .iter()
                    .find(|d| !d.success)
                    .and_then(|d| d.error.clone()),
            },
        )]);
        let lossy = |p: &Path| p.to_string_lossy().into_owned();
        GnnSummary {
            timestamp: local_iso(std::time::SystemTime::now()),
            target_directory: lossy(&self.facts.target_directory),
            output_directory: lossy(&self.root),
            total_scripts_found: details.len(),
            total_scripts: details.len(),
            successful_executions: succeeded,
            failed_executions: failed,
            skipped_executions: skipped,
            success_rate,
            success: failed == 0
                && skipped == 0
                && metrics.missing_scripts.is_empty()
                && metrics.render_failures.is_empty(),
            framework_status,
            requested_frameworks: vec![FRAMEWORK.into()],
            render_failures: self
                .facts
                .render_failures
                .iter()
                .map(|(file, message)| RenderFailure {
                    file: file.clone(),
                    framework: FRAMEWORK.into(),
                    message: message.clone(),
                })
                .collect(),
            missing_render_scripts: self
                .facts
                .missing_render_scripts
                .iter()
                .map(|p| lossy(p))
                .collect(),
            execution_workers: self.jobs,
            execution_mode: if self.facts.distributed {
                "distributed"
            } else {
                "local"
            }
            .into(),
            backend: self.facts.distributed.then(|| "ray".into()),
            execution_benchmark_repeats: 1,
            execution_summary_detail: false,
            execution_summary_format: SUMMARY_FORMAT.into(),
            execution_details: details,
            framework: FRAMEWORK.into(),
            total_execution_time: metrics.totals.total_execution_time,
            missing_scripts: metrics.missing_scripts.clone(),
            results_directory: lossy(&self.results_dir),
            runner: format!("jax-runner {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

impl Exporter for GnnExporter {
    fn observe(
        &mut self,
        event: &RunEvent,
        record: Option<&ScriptRecord>,
    ) -> Result<(), ReportError> {
        match event {
            RunEvent::RunStarted {
                interpreter, jobs, ..
            } => {
                self.executor = interpreter.clone();
                self.jobs = *jobs;
            }
            // Its files stay as they are; GNN's summary, which knows no `carried`,
            // lists it as its earlier record ended.
            RunEvent::ScriptCarried { result, .. } if self.entries.contains_key(&result.id) => {
                let (collected, stdout, stderr) = left_by(result);
                let seen = document::Seen::of(&collected, &stdout, &stderr);
                self.seen.insert(result.id.clone(), seen);
            }
            RunEvent::ScriptFinished { result } => {
                if let (Some(record), Some(e)) = (record, self.entries.get(&result.id)) {
                    let left = left_by(result);
                    let seen = document::Seen::of(&left.0, &left.1, &left.2);
                    self.seen.insert(result.id.clone(), seen);
                    make_folder(&self.root, &e.logs_dir())?;
                    script_files(result, record, e, left, &self.executor, &self.results_dir)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn export(&mut self, run: &RunRecord) -> Result<(), ReportError> {
        let metrics = run.metrics;
        if self.executor.is_empty() {
            self.executor = metrics.run.interpreter.clone().unwrap_or_default();
            self.jobs = metrics.run.jobs;
        }
        let summary = self.summary(run);
        let dir = make_folder(&self.root, &self.root.join("summaries"))?;
        write_json(
            &dir.join("execution_summary.json"),
            "GNN execution summary",
            &summary,
        )?;
        let md = markdown::render(metrics, &run.ordered());
        write_atomic(&dir.join("execution_report.md"), md.as_bytes())
    }
}

/// What a script left: its data folder's files, as its result lists them, and its two
/// logs as GNN's `str` would hold them. Read once per script.
fn left_by(r: &ScriptResult) -> (CollectedOutputs, LogText, LogText) {
    (
        document::collected(r),
        LogText::of(&r.stdout_log),
        LogText::of(&r.stderr_log),
    )
}

/// Writes a script's `_results.json` and `_execution.log` as it finishes.
fn script_files(
    r: &ScriptResult,
    record: &ScriptRecord,
    e: &GnnEntry,
    left: (CollectedOutputs, LogText, LogText),
    executor: &str,
    results_dir: &Path,
) -> Result<(), ReportError> {
    if r.attempts.is_empty() {
        // Never started: GNN writes no per-script files for a skipped script.
        return Ok(());
    }
    let ours = results_dir.join(crate::model::results_file_name(&r.id));
    let doc = document::script_document(r, record, e, executor, &ours, left);
    // Streamed: `simulation_data` can hold megabytes, which pretty-printing multiplies.
    write_atomic_stream(&e.results_file(), false, |out| {
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::other)?;
        out.write_all(b"\n")
    })?;
    write_atomic_stream(&e.log_file(), false, |out| {
        document::write_execution_log(r, record, e, out)
    })
}

/// Makes `dir` below GNN's step-12 folder `root` without following a symlink planted
/// on the way: these folders are the runner's (see [`crate::confined::Planted`]).
fn make_folder(root: &Path, dir: &Path) -> Result<PathBuf, ReportError> {
    let fail = |source| ReportError::Write {
        path: dir.to_path_buf(),
        source,
    };
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    crate::confined::make_dirs(root, rel, crate::confined::Planted::Replace)
        .map(|made| made.path)
        .map_err(|refused| fail(refused.into()))
}

#[cfg(test)]
mod tests;
