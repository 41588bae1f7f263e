//! JSON Schemas of everything jax-runner writes, generated from the types themselves
//! and committed under `schemas/`, so the next pipeline step can validate its input.

use schemars::schema_for;

/// The documents with a schema: results, metrics, events, doctor output, `list --json`
/// and GNN's step-12 documents.
pub const NAMES: [&str; 7] = [
    "results",
    "metrics",
    "events",
    "doctor",
    "list",
    "gnn_execution_summary",
    "gnn_script_result",
];

/// The schema of document `name`, or `None` for an unknown name.
pub fn schema(name: &str) -> Option<serde_json::Value> {
    let schema = match name {
        "results" => schema_for!(crate::model::ScriptResult),
        "metrics" => schema_for!(crate::model::PerformanceMetrics),
        // One line of the NDJSON stream; lines also carry `schema_version`,
        // `timestamp` and, for script events, `id`.
        "events" => schema_for!(crate::events::RunEvent),
        "doctor" => schema_for!(super::doctor::DoctorReport),
        "list" => schema_for!(crate::model::list::ListDocument),
        // GNN's step-12 layout (`12_execute_output/`).
        "gnn_execution_summary" => schema_for!(crate::model::gnn::GnnSummary),
        "gnn_script_result" => schema_for!(crate::model::gnn::GnnScriptDocument),
        _ => return None,
    };
    serde_json::to_value(schema).ok()
}

/// The committed file of schema `name`, relative to the repository.
pub fn file_name(name: &str) -> String {
    format!("schemas/{name}.schema.json")
}
