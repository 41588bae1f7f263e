//! Every JSON file a run writes, compared key by key with what an earlier design of
//! jax-runner wrote for the same scripts: an insta snapshot
//! (`tests/golden/sample_and_failure.snap`), so a redesign that changes a key, a value
//! or a type fails here with a diff. Timestamps, durations, memory and CPU figures,
//! worker slots and the like are insta redactions (`<number>`, `<string>`); machine
//! paths are replaced by placeholders first; the doctor's environment report is
//! compared by shape, since it describes the machine.
//!
//! `INSTA_UPDATE=always cargo test --features integration --test golden` rewrites the
//! snapshot, for a change of the contract that is meant (without it, a failing run
//! leaves the new one beside it as `.snap.new`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// Keys present only on some machines or when the runner saw something in time:
/// `capabilities` are what its sampler read from a live process (a script that exits
/// within the first sample has none); `uid` is the sandbox user of a root runner only.
/// Neither their presence nor their value is compared: they are left out.
const SOMETIMES: [&str; 2] = ["capabilities", "uid"];

/// Keys whose values change from run to run: redacted wherever they are, to their
/// type (see [`redact`]).
const VARYING: [&str; 42] = [
    // What confines a script depends on the machine: its kernel's Landlock ABI,
    // bubblewrap, whether the runner is root.
    "layers",
    // The default process limit counts the machine's cores, and a cgroup or the
    // watchdog enforces it as the host allows.
    "max_procs",
    "max_procs_enforced_by",
    "sandbox_layers",
    "run_id",
    "runner_version",
    "argv",
    "time_breakdown",
    "startup_s",
    "jax_import_s",
    "backend_init_s",
    "trace_time_s",
    "lowering_time_s",
    // The sample scripts print their own run time, and tracebacks hold the tree's
    // path, so the outputs' lengths vary.
    "stdout_bytes",
    "stdout_length",
    "stderr_bytes",
    "stderr_length",
    "started_at",
    "finished_at",
    "timestamp",
    "duration_s",
    "execution_time_s",
    "execution_time",
    "execution_time_mean",
    "execution_time_samples",
    "total_execution_time",
    "avg_execution_time",
    "wall_time_s",
    "wall_time",
    "peak_memory_mb",
    // `pss` where a sample was taken, `rss` (the kernel's `ru_maxrss`) for a script
    // that ended before the first.
    "memory_source",
    "cpu_user_s",
    "cpu_system_s",
    "runner_peak_rss_mb",
    "compile_time_s",
    "fingerprint",
    // The fingerprint's parts by name: hashes of the interpreter's path, jax's version
    // and the files beside a script, which differ from machine to machine (issue 32).
    "inputs",
    "slot",
    "delay_s",
    // Seconds per device (issue 18).
    "cpu_s",
    "gpu_s",
    // The interpreter's patch release is the machine's: the managed environment is
    // made from the fastest build of `python3`'s version on its PATH.
    "python_version",
];

/// `value` with machine paths replaced, the environment reduced to its shape and the
/// [`SOMETIMES`] keys left out.
fn normalize(value: &Value, key: &str, paths: &[(String, &str)]) -> Value {
    if key == "environment" {
        return shape(value);
    }
    match value {
        Value::String(s) => {
            let mut s = s.clone();
            for (path, name) in paths {
                s = s.replace(path.as_str(), name);
            }
            Value::String(without_timings(&s))
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| normalize(v, "", paths)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !SOMETIMES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), normalize(v, k, paths)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A [`VARYING`] value as the snapshot holds it: its type, `null` kept (a figure that
/// is missing where it used to be given is a change).
fn redact(value: insta::internals::Content) -> insta::internals::Content {
    use insta::internals::Content;
    let placeholder = match value.resolve_inner() {
        Content::None | Content::Unit => return value,
        Content::String(_) | Content::Char(_) => "<string>",
        Content::Seq(_) | Content::Tuple(_) => "<array>",
        Content::U8(_) | Content::U16(_) | Content::U32(_) | Content::U64(_) => "<number>",
        Content::U128(_) | Content::I8(_) | Content::I16(_) | Content::I32(_) => "<number>",
        Content::I64(_) | Content::I128(_) | Content::F32(_) | Content::F64(_) => "<number>",
        _ => "<value>",
    };
    Content::String(placeholder.into())
}

/// The sample scripts end their output with their run time, `(4.70 s)`.
fn without_timings(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('(') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits > 0 && rest[digits..].starts_with(" s)") {
            out.push_str("<secs>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Keys and types only; a map of environment variables, whose names are the
/// machine's, only as `<variables>`.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    // The variables set where the test runs (cargo's `LD_LIBRARY_PATH`, a
                    // developer's `JAX_PLATFORMS`): their names are the machine's too.
                    ("environment", Value::Object(_)) => (k.clone(), "<variables>".into()),
                    _ => (k.clone(), shape(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.first().map(shape).into_iter().collect()),
        Value::Null => Value::Null,
        Value::Bool(_) => "<bool>".into(),
        Value::Number(_) => "<number>".into(),
        Value::String(s) if s.starts_with('<') && s.ends_with('>') => value.clone(),
        Value::String(_) => "<string>".into(),
    }
}

/// Every JSON file under `dir`, by path relative to `base`.
fn json_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            json_files(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            out.insert(rel, p);
        }
    }
}

#[test]
fn results_match_the_previous_design_key_by_key() {
    let t = Tree::outside_tmp();
    let sample = repo().join("output/gnn_rendered_simulators/jax");
    for model in ["pomdp_solver", "general_model", "combined_model"] {
        let dest = t.root().join("sample/jax").join(format!("{model}.py"));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(sample.join(format!("{model}.py")), dest).unwrap();
    }
    t.fixture("fail_exception.py", "broken/jax/fail_exception.py");
    let out = t.run(&["--layout", "gnn", "--jobs", "1"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    let cache = std::env::var("HOME").unwrap_or_default() + "/.cache/jax-runner";
    let paths = [
        (python().display().to_string(), "<PYTHON>"),
        (t.root().display().to_string(), "<TREE>"),
        (cache, "<CACHE>"),
    ];
    let mut files = BTreeMap::new();
    json_files(&t.root(), &t.root(), &mut files);
    // The scripts' own outputs are theirs, not the runner's.
    files.retain(|rel, _| !rel.ends_with("simulation_results.json"));
    let got: BTreeMap<String, Value> = files
        .iter()
        .map(|(rel, p)| (rel.clone(), normalize(&read_json(p), "", &paths)))
        .collect();

    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("golden");
    settings.set_prepend_module_to_snapshot(false);
    for key in VARYING {
        settings.add_dynamic_redaction(&format!(".**.{key}"), |value, _| redact(value));
    }
    settings.bind(|| insta::assert_json_snapshot!("sample_and_failure", got));
}
