//! Synthetic runs of any size for the report.html tests: scripts of a pipeline with
//! realistic ids, durations from a fixed pseudo-random sequence, some failures (a
//! few very short), timeouts, retries and an interrupted script, scheduled on
//! `jobs` worker slots as the runner would, fed to the reporter as events.

use std::path::Path;
use std::time::{Duration, SystemTime};

use jax_runner::events::RunEvent;
use jax_runner::model::{PerformanceMetrics, Platform, ScriptResult, ScriptSummary};
use jax_runner::report::{EndOfRun, HtmlExporter, Reporter};
use serde_json::{json, Value};

/// Model names as a GNN pipeline renders them: long, sharing prefixes.
const MODELS: [&str; 6] = [
    "actinf_pomdp_agent",
    "multiarmed_bandit_agent",
    "model.simple_markov_chain",
    "model.hierarchical_active_inference",
    "baseline_hmm",
    "two_state_bistable_pomdp",
];

/// The 2026-11-22T07:40:00Z of every synthetic run.
fn run_start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_333_200)
}

fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A small linear congruential generator: the same run on every machine.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How script `i` ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    Ok,
    Fails,
    /// Fails within a few milliseconds: the smallest bar on the timeline.
    FailsFast,
    TimesOut,
    /// Fails once, then succeeds.
    Flaky,
    Interrupted,
    /// Interrupted before it started: no attempt, nothing on the timeline.
    NotStarted,
    /// Never started because `--max-fail` stopped the run.
    Skipped,
}

fn end_of(i: usize, n: usize) -> End {
    match i {
        _ if n > 3 && i == n - 1 => End::NotStarted,
        _ if n > 3 && i == n - 2 => End::Interrupted,
        _ if n > 40 && i == n - 3 => End::Skipped,
        _ if i % 23 == 5 => End::Fails,
        _ if i % 31 == 9 => End::FailsFast,
        _ if i % 37 == 14 => End::TimesOut,
        _ if i % 19 == 3 => End::Flaky,
        _ => End::Ok,
    }
}

/// The id of script `i`: the 3-script run has short ones, so some labels fit.
pub fn id_of(i: usize, n: usize) -> String {
    if n <= 3 {
        format!("m{i}")
    } else {
        format!("{}_{i:04}", MODELS[i % MODELS.len()])
    }
}

fn attempt(number: u32, slot: usize, start: SystemTime, secs: f64, status: &str) -> Value {
    let (class, code, signal) = match status {
        "succeeded" => ("succeeded", json!(0), json!(null)),
        "timed_out" => ("timed_out", json!(null), json!(9)),
        "interrupted" => ("interrupted", json!(null), json!(15)),
        _ => ("script_error", json!(1), json!(null)),
    };
    json!({
        "number": number, "device": "cpu", "slot": slot, "started_at": stamp(start),
        "duration_s": secs, "status": status, "return_code": code, "signal": signal,
        "peak_memory_mb": 150.0, "cpu_user_s": secs * 0.9, "cpu_system_s": 0.1,
        "class": class, "stdout_log": "/r/logs/x.stdout.log",
        "stderr_log": "/r/logs/x.stderr.log"
    })
}

fn result(id: &str, attempts: Vec<Value>, end: End, wall: f64) -> ScriptResult {
    let never = if end == End::Skipped {
        "skipped"
    } else {
        "interrupted"
    };
    let last = attempts.last().cloned().unwrap_or(json!({
        "status": never, "class": never, "return_code": null, "signal": null
    }));
    let status = last["status"].as_str().unwrap().to_string();
    let ok = status == "succeeded";
    let tail: Vec<String> = if ok {
        vec![]
    } else if end == End::TimesOut {
        vec!["step 9000 of 10000".into()]
    } else {
        vec![
            "Traceback (most recent call last):".into(),
            format!("  File \"{id}.py\", line 12, in <module>"),
            "ValueError: belief does not sum to <1>".into(),
        ]
    };
    let v = json!({
        "schema_version": 1, "id": id, "script_path": format!("/out/m/jax/{id}.py"),
        "relative_path": format!("{id}/jax/{id}.py"), "discovered_by": "jax_folder",
        "success": ok, "status": status, "class": last["class"].clone(),
        "return_code": last["return_code"].clone(), "signal": last["signal"].clone(),
        "device_requested": "cpu", "device_used": "cpu", "device_mismatch": false,
        "jax": {"jax_imported": true, "backend": "cpu", "compile_time_s": 0.4,
                "trace_time_s": 0.1, "lowering_time_s": 0.05, "uncaught_exception": null},
        "time_breakdown": if attempts.is_empty() { Value::Null } else { breakdown(wall) },
        "attempts": attempts, "execution_time_s": wall, "peak_memory_mb": 150.0,
        "cpu_user_s": wall * 0.9, "cpu_system_s": 0.1, "timeout_s": 30.0,
        "started_at": null, "finished_at": null,
        "stdout_log": format!("/r/logs/{id}.stdout.log"),
        "stderr_log": format!("/r/logs/{id}.stderr.log"),
        "stdout_bytes": 10, "stderr_bytes": 10, "stderr_tail": tail,
        "log_truncated": false, "leaks": [], "data_dir": format!("/r/data/{id}"),
        "sandbox": {"kind": "none", "network": true, "home_visible": true,
                    "environment": "inherited"}
    });
    serde_json::from_value(v).expect("a valid ScriptResult")
}

/// Where `wall` seconds went, with the compile time of the telemetry above (0.55 s:
/// tracing, lowering and XLA, the one definition every column uses).
fn breakdown(wall: f64) -> Value {
    let known = 0.05 + 0.8 + 0.1 + 0.55;
    json!({"startup_s": 0.05, "jax_import_s": 0.8, "backend_init_s": 0.1,
           "compile_s": 0.55, "script_s": (wall - known).max(0.0)})
}

/// The events of a run of `n` scripts on `jobs` slots, in the order they happen.
pub fn events(n: usize, jobs: usize) -> Vec<RunEvent> {
    let mut rng = Lcg(n as u64 * 7919 + jobs as u64);
    let origin = run_start();
    // When each slot is next free, seconds after the run's start.
    let mut free = vec![0.05f64; jobs];
    let mut events = vec![RunEvent::RunStarted {
        run_id: "20261122T074000.000Z-1".into(),
        total: n,
        kept: 0,
        jobs,
        device: Platform::Cpu,
        interpreter: "/venv/bin/python".into(),
        expected_s: None,
    }];
    let mut finished = Vec::new();
    for i in 0..n {
        let id = id_of(i, n);
        let end = end_of(i, n);
        // Log-uniform between 0.4 s and 25 s.
        let mut secs = 0.4 * (62.5f64).powf(rng.next());
        let plan: Vec<(&str, f64)> = match end {
            End::Ok => vec![("succeeded", secs)],
            End::Fails => vec![("failed", secs * 0.3)],
            End::FailsFast => vec![("failed", 0.004)],
            End::TimesOut => vec![("timed_out", 30.0)],
            End::Flaky => vec![("failed", 0.6), ("succeeded", secs)],
            End::Interrupted => {
                secs = secs.min(3.0);
                vec![("interrupted", secs)]
            }
            End::NotStarted | End::Skipped => vec![],
        };
        let mut attempts = Vec::new();
        for (k, (status, dur)) in plan.iter().enumerate() {
            let slot = (0..jobs)
                .min_by(|a, b| free[*a].total_cmp(&free[*b]))
                .unwrap();
            let at = free[slot];
            let start = origin + Duration::from_secs_f64(at);
            events.push(RunEvent::ScriptStarted {
                id: id.clone(),
                attempt: k as u32 + 1,
                device: Platform::Cpu,
                path: format!("{id}/jax/{id}.py"),
                slot,
            });
            // Samples about once a second, as the runner takes them: none for
            // attempts shorter than a second.
            for s in 1..=(*dur as usize) {
                events.push(RunEvent::Sample {
                    id: id.clone(),
                    attempt: k as u32 + 1,
                    elapsed_s: s as f64,
                    rss_mb: 80.0 + 60.0 * ((s as f64) * 0.4).sin().abs() + i as f64 % 40.0,
                    processes: 1,
                    gpu_memory_mb: None,
                    gpu_utilization_pct: None,
                });
            }
            attempts.push(attempt(k as u32 + 1, slot, start, *dur, status));
            free[slot] = at + dur + 0.02;
        }
        let wall = plan.iter().map(|p| p.1).sum();
        let r = result(&id, attempts, end, wall);
        events.push(RunEvent::ScriptFinished {
            result: Box::new(r.clone()),
        });
        finished.push(r);
    }
    let wall = free.iter().cloned().fold(0.0, f64::max);
    events.push(RunEvent::RunFinished {
        metrics: Box::new(metrics(&finished, jobs, wall)),
    });
    events
}

fn metrics(results: &[ScriptResult], jobs: usize, wall: f64) -> PerformanceMetrics {
    let run = json!({
        "run_id": "20261122T074000.000Z-1", "runner_version": "0.0.0-test",
        "argv": ["jax-runner", "--jobs", jobs.to_string()],
        "started_at": stamp(run_start()),
        "finished_at": stamp(run_start() + Duration::from_secs_f64(wall)),
        "wall_time_s": wall, "device_requested": "cpu", "device": "cpu", "jobs": jobs,
        "interpreter": "/venv/bin/python", "interpreter_source": "managed",
        "python_version": "3.11.2", "jax_version": "0.10.2", "jaxlib_version": "0.10.2",
        "output_dir": "/out", "results_dir": "/r",
        "compilation_cache": null, "interrupted": true, "retries": 1,
        "retry_on": ["script_error"], "fallback": "cpu", "runner_peak_rss_mb": 20.0,
        "device_choice": "requested"
    });
    PerformanceMetrics::build(
        serde_json::from_value(run).unwrap(),
        results.iter().map(ScriptSummary::of).collect(),
        vec![],
        vec![],
    )
}

/// Writes the report of a synthetic run of `n` scripts into `dir`; returns its path.
pub fn write_report(dir: &Path, n: usize, jobs: usize) -> std::path::PathBuf {
    let mut reporter = EndOfRun::new(vec![Box::new(HtmlExporter::new(dir.to_path_buf()))]);
    for e in events(n, jobs) {
        reporter.handle(&e).unwrap();
    }
    dir.join("report.html")
}
