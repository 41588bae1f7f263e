//! Builds GNN's step-12 documents from jax-runner's own results, with GNN's value
//! conventions: the per-script document and execution log from the whole result as the
//! script finishes, the summary entries from the run's script records.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::GnnEntry;
use crate::model::gnn::{
    CollectedOutputs, GnnDetail, GnnExecutionMetadata, GnnScriptDocument, GnnSimulationData,
    OutputCount, FRAMEWORK, MAX_SIMULATION_RESULTS_BYTES, SIMULATION_RESULTS,
    SIMULATION_RESULTS_BUDGET, TIMEOUT_RETURN_CODE,
};
use crate::model::{FailureClass, ScriptResult, Status};
use crate::paths::local_iso;
use crate::report::record::ScriptRecord;

use super::text::LogText;

/// Keys copied from the script's `simulation_results.json`, as GNN's step 12 does.
const EXTRACTED_KEYS: [&str; 4] = ["beliefs", "actions", "observations", "num_timesteps"];

/// How a script's end reads in GNN's terms: `(return_code, error, error_type)`.
pub fn gnn_error(r: &ScriptRecord) -> (Option<i32>, Option<String>, Option<String>) {
    if r.attempts.is_empty() {
        let why = "Not started: the run was interrupted before this script's turn";
        return (None, Some(why.into()), Some("InterruptedError".into()));
    }
    if r.success {
        return (r.return_code, None, None);
    }
    // A carried script ends in GNN's terms as its earlier record did.
    let status = r.carried.as_ref().map_or(r.status, |c| c.status);
    if status == Status::TimedOut {
        let error = format!(
            "Script execution timed out after {} seconds",
            trim_float(r.timeout_s)
        );
        return (
            Some(TIMEOUT_RETURN_CODE),
            Some(error),
            Some("TimeoutError".into()),
        );
    }
    let exception = r
        .exception_text()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    let (code, error) = match (r.return_code, r.signal) {
        (Some(code), _) => (
            code,
            format!("Script failed with return code {code}{exception}"),
        ),
        (None, Some(sig)) => (
            -sig,
            format!(
                "Script failed with return code -{sig} (killed by {}){exception}",
                r.signal_name
                    .clone()
                    .unwrap_or_else(|| format!("signal {sig}"))
            ),
        ),
        (None, None) => {
            let why = r
                .matched_line
                .clone()
                .unwrap_or_else(|| "no process".into());
            return (
                Some(-2),
                Some(format!("Script execution failed: {why}")),
                Some("ExecutionError".into()),
            );
        }
    };
    (Some(code), Some(error), Some(error_type(r).into()))
}

/// GNN's error kinds (`DependencyError`, `SyntaxError`, `RuntimeError`), plus the
/// classes jax-runner tells apart. Only failures ask, and they keep their stderr tail.
fn error_type(r: &ScriptRecord) -> &'static str {
    let kind = r.exception.as_ref().map(|e| e.kind.as_str()).unwrap_or("");
    let in_stderr = |needle: &str| r.stderr_tail.iter().any(|l| l.contains(needle));
    match r.class {
        FailureClass::OutOfMemory => "OutOfMemoryError",
        FailureClass::GpuEnvironment => "GpuEnvironmentError",
        FailureClass::Interrupted => "InterruptedError",
        FailureClass::BrokenInstall => "DependencyError",
        _ if kind.ends_with("ModuleNotFoundError") || in_stderr("ModuleNotFoundError") => {
            "DependencyError"
        }
        _ if kind.ends_with("SyntaxError") || kind.ends_with("IndentationError") => "SyntaxError",
        _ => "RuntimeError",
    }
}

/// `3.0` prints as `3`, `2.5` as `2.5`.
fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// The script's start as GNN writes timestamps.
fn timestamp(r: &ScriptRecord) -> String {
    local_iso(r.started_at.unwrap_or_else(std::time::SystemTime::now))
}

fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The files the script left in its data folder, as the runner listed them when it
/// finished (`data_files`), so the folder is not read again.
pub fn collected(r: &ScriptResult) -> CollectedOutputs {
    let dir = Path::new(&r.data_dir);
    CollectedOutputs::sort(r.data_files.iter().map(|f| lossy(&dir.join(f))))
}

/// `beliefs`, `actions`, … from the script's `simulation_results.json`, when it is a
/// regular file of at most [`MAX_SIMULATION_RESULTS_BYTES`] whose values fit
/// [`SIMULATION_RESULTS_BUDGET`] (anything else is on the script's `problems`
/// already, and copies nothing).
fn extracted(c: &CollectedOutputs) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Some(file) = c
        .simulation_data
        .iter()
        .find(|f| f.ends_with(SIMULATION_RESULTS))
    else {
        return out;
    };
    let max = MAX_SIMULATION_RESULTS_BYTES;
    let Ok(Some(mut doc)) =
        crate::confined::read_json_in(Path::new(file), max, SIMULATION_RESULTS_BUDGET)
    else {
        return out;
    };
    // Taken out rather than cloned: the document can be large.
    let mut trace = doc.get_mut("simulation_trace").map(Value::take);
    for key in EXTRACTED_KEYS {
        let v = doc
            .get_mut(key)
            .map(Value::take)
            .or_else(|| trace.as_mut()?.get_mut(key).map(Value::take));
        if let Some(v) = v {
            out.insert(key.to_string(), v);
        }
    }
    out
}

/// The per-script document, from the whole result and its record.
pub fn script_document(
    r: &ScriptResult,
    record: &ScriptRecord,
    e: &GnnEntry,
    executor: &str,
    results_file: &Path,
    (collected, stdout, stderr): (CollectedOutputs, LogText, LogText),
) -> GnnScriptDocument {
    let (return_code, error, error_type) = gnn_error(record);
    let on_success = |v| r.success.then_some(v);
    GnnScriptDocument {
        framework: FRAMEWORK.into(),
        model_name: e.model.clone(),
        script_name: e.script_name.clone(),
        script_path: r.script_path.clone(),
        success: r.success,
        return_code,
        execution_time: r.execution_time_s,
        timestamp: timestamp(record),
        error,
        error_type,
        simulation_data: GnnSimulationData {
            raw_output: stdout.head,
            raw_error: stderr.head,
            output_dir: lossy(&e.data_dir),
            // The runner found it unfit already (its `problems` say why): not read again.
            extracted: match r.problems.iter().any(|p| p.starts_with(SIMULATION_RESULTS)) {
                true => BTreeMap::new(),
                false => extracted(&collected),
            },
        },
        execution_benchmark_repeats: 1,
        execution_time_mean: on_success(r.execution_time_s),
        execution_time_std: on_success(0.0),
        execution_time_samples: r.success.then(|| vec![r.execution_time_s]),
        execution_metadata: GnnExecutionMetadata {
            executor: executor.to_string(),
            accelerator_type: match r.device_used {
                Some(crate::model::Platform::Gpu) => "cuda",
                Some(crate::model::Platform::Tpu) => "tpu",
                _ => "cpu",
            }
            .into(),
            stdout_length: stdout.chars,
            stderr_length: stderr.chars,
            output_directory: lossy(&e.impl_dir),
            runner: "jax-runner".into(),
            runner_version: env!("CARGO_PKG_VERSION").into(),
            status: r.status,
            class: r.class,
            device_requested: r.device_requested,
            device_used: r.device_used,
            attempts: r.attempts.len(),
            peak_memory_mb: r.peak_memory_mb,
            results_file: lossy(results_file),
        },
        collected_outputs: collected,
    }
}

/// What the summary needs of a script's outputs, taken when its result came (its logs
/// are read once, for the per-script document and the summary alike).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// `collected_outputs_summary`.
    pub outputs: BTreeMap<String, OutputCount>,
    /// Characters of standard output and standard error.
    pub stdout_chars: u64,
    pub stderr_chars: u64,
}

impl Seen {
    /// What `collected` and the two logs say.
    pub fn of(collected: &CollectedOutputs, stdout: &LogText, stderr: &LogText) -> Seen {
        Seen {
            outputs: collected.summary(),
            stdout_chars: stdout.chars,
            stderr_chars: stderr.chars,
        }
    }
}

/// The summary entry of a script.
pub fn detail(r: &ScriptRecord, e: &GnnEntry, executor: &str, seen: Seen) -> GnnDetail {
    let (return_code, error, error_type) = gnn_error(r);
    let ran = !r.attempts.is_empty();
    let on_success = |v| r.success.then_some(v);
    GnnDetail {
        script_path: r.script_path.clone(),
        script_name: e.script_name.clone(),
        framework: FRAMEWORK.into(),
        model_name: e.model.clone(),
        executor: executor.to_string(),
        success: r.success,
        skipped: !ran,
        return_code,
        error,
        error_type,
        execution_time: r.execution_time_s,
        timestamp: timestamp(r),
        execution_benchmark_repeats: 1,
        execution_time_mean: on_success(r.execution_time_s),
        execution_time_std: on_success(0.0),
        execution_time_samples: r.success.then(|| vec![r.execution_time_s]),
        structured_result_file: ran.then(|| lossy(&e.results_file())),
        output_file: ran.then(|| lossy(&e.log_file())),
        implementation_directory: lossy(&e.impl_dir),
        // GNN's `len(stdout)`: characters, as the per-script document counts them.
        stdout_length: seen.stdout_chars,
        stderr_length: seen.stderr_chars,
        collected_outputs_summary: seen.outputs,
        id: r.id.clone(),
        status: r.status,
        class: r.class,
        started_at: r.started_at.map(crate::model::Timestamp::from),
        device_requested: r.device_requested,
        device_used: r.device_used,
        simulation_data: lossy(&e.data_dir),
    }
}

/// Writes `<script>_execution.log` as GNN does: a header, then the whole standard
/// output and standard error, streamed from jax-runner's logs (never held in memory).
pub fn write_execution_log(
    r: &ScriptResult,
    record: &ScriptRecord,
    e: &GnnEntry,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let (return_code, _, _) = gnn_error(record);
    let code = return_code.map_or("None".to_string(), |c| c.to_string());
    writeln!(out, "Execution Results for {}", e.script_name)?;
    writeln!(out, "Timestamp: {}", timestamp(record))?;
    writeln!(out, "Return Code: {code}")?;
    writeln!(out, "Benchmark repeats: 1")?;
    writeln!(
        out,
        "Execution Time (median wall-clock): {:.2} seconds",
        r.execution_time_s
    )?;
    if r.success {
        writeln!(out, "Sample durations (s): [{}]", r.execution_time_s)?;
        writeln!(
            out,
            "Duration mean/std (s): {:.4} / 0.0000",
            r.execution_time_s
        )?;
    }
    writeln!(out, "Model: {}", e.model)?;
    writeln!(out, "Framework: {FRAMEWORK}")?;
    writeln!(out, "Output Directory: {}", e.impl_dir.display())?;
    writeln!(out, "\nSTDOUT:")?;
    copy_log(&r.stdout_log, r.stdout_bytes, out)?;
    writeln!(out, "\n\nSTDERR:")?;
    copy_log(&r.stderr_log, r.stderr_bytes, out)
}

/// Streams a log into `out`, no more than the `written` bytes the runner wrote to it
/// (and a little for `--max-log-size`'s marker): a script that replaced its log by a
/// huge sparse file, a FIFO or a link cannot make this copy block or run on.
fn copy_log(path: &str, written: u64, out: &mut dyn Write) -> std::io::Result<()> {
    match crate::confined::open_in(Path::new(path)) {
        Ok(f) => f.copy_to(out, written + 4096).map(|_| ()),
        // A script that never started has no log: the section stays empty.
        Err(e) if e.is_not_found() => Ok(()),
        Err(crate::confined::Refused::Io(e)) => Err(e),
        Err(refused) => writeln!(out, "[jax-runner] log not copied: {refused}"),
    }
}

/// `PathBuf` helpers of an entry.
impl GnnEntry {
    /// `<impl>/execution_logs/<script>_results.json`.
    pub fn results_file(&self) -> PathBuf {
        self.logs_dir()
            .join(format!("{}_results.json", self.file_key))
    }

    /// `<impl>/execution_logs/<script>_execution.log`.
    pub fn log_file(&self) -> PathBuf {
        self.logs_dir()
            .join(format!("{}_execution.log", self.file_key))
    }

    /// `<impl>/execution_logs`.
    pub fn logs_dir(&self) -> PathBuf {
        self.impl_dir.join("execution_logs")
    }
}
