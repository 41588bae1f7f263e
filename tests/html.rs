//! `report.html` opened in headless Chromium: the page's script runs without errors,
//! the table, timeline and failures are there, and nothing from a script can inject
//! markup. Chromium is required: `.ci/run` installs it (`apt-get install chromium`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use jax_runner::events::RunEvent;
use jax_runner::model::{PerformanceMetrics, ScriptResult, ScriptSummary};
use jax_runner::report::{HtmlReporter, Reporter};
use serde_json::json;

const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);

/// The `chromium` binary on PATH; its absence fails the test rather than skipping it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`chromium` is not on PATH: the report.html tests need headless Chromium. \
                 `.ci/run` installs it; locally run `apt-get install -y chromium`"
            )
        })
}

/// What headless Chromium made of a page.
struct Rendered {
    dom: String,
    stderr: String,
}

/// Runs headless Chromium with `mode` (`--dump-dom`, `--screenshot=…`) on `page`,
/// killing it (by its own PID) if it runs past the timeout.
fn headless(page: &Path, mode: &[String]) -> Rendered {
    let scratch = tempfile::tempdir().unwrap();
    let profile = scratch.path().join("profile");
    let out_path = scratch.path().join("stdout");
    let err_path = scratch.path().join("stderr");
    // Files rather than pipes: a helper process that outlives the browser cannot
    // block the test by holding a pipe open.
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {CHROMIUM_TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let rendered = Rendered {
        dom: String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned(),
    };
    assert!(
        status.success(),
        "chromium exited with {status}; stderr:\n{}",
        rendered.stderr
    );
    rendered
}

/// Dumps the DOM after scripts ran and checks the console stayed clean.
fn dump_dom(page: &Path) -> String {
    let r = headless(page, &["--dump-dom".to_string()]);
    for bad in ["Uncaught", "SyntaxError"] {
        assert!(
            !r.stderr.contains(bad),
            "the page logged a JavaScript error ({bad}):\n{}",
            r.stderr
        );
    }
    r.dom
}

/// The `<body …>` start tag of a dumped DOM.
fn body_tag(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body element");
    let end = start + dom[start..].find('>').unwrap();
    &dom[start..=end]
}

fn assert_rendered(dom: &str) {
    assert!(
        body_tag(dom).contains("data-rendered=\"ok\""),
        "the page's script did not finish: {}",
        body_tag(dom)
    );
    assert!(dom.contains("<svg"), "no SVG in the page");
    assert!(dom.contains("id=\"timeline\""), "no timeline");
    assert!(dom.contains("id=\"scripts\""), "no scripts table");
}

/// A numeric attribute of a start tag.
fn attr(tag: &str, name: &str) -> f64 {
    let key = format!(" {name}=\"");
    let start = tag
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + key.len();
    let end = start + tag[start..].find('"').unwrap();
    tag[start..end].parse().unwrap()
}

/// A worker runs one attempt at a time: bars sharing a row must not overlap.
fn assert_no_overlap_within_a_slot(dom: &str) {
    let bars: Vec<(f64, f64, f64)> = dom
        .match_indices("<rect class=\"attempt")
        .map(|(i, _)| {
            let tag = &dom[i..i + dom[i..].find('>').unwrap()];
            (
                attr(tag, "y"),
                attr(tag, "x"),
                attr(tag, "x") + attr(tag, "width"),
            )
        })
        .collect();
    for (i, a) in bars.iter().enumerate() {
        for b in &bars[i + 1..] {
            // Rounding to 0.1 unit and the 1.5-unit minimum width allow a hair.
            let overlap = a.1.max(b.1) + 2.0 < a.2.min(b.2);
            assert!(
                !(a.0 == b.0 && overlap),
                "attempts overlap in one slot: {a:?} and {b:?}"
            );
        }
    }
}

#[test]
fn chromium_renders_the_report_of_a_real_run() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    t.fixture("fail_exception.py", "m/jax/fail.py");
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "one script fails: {}", stderr(&out));

    let page = t.results_dir().join("report.html");
    assert!(
        page.is_file(),
        "{} is missing: is HtmlReporter registered in src/app.rs?",
        page.display()
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"));

    let dom = dump_dom(&page);
    assert_rendered(&dom);
    assert!(dom.contains("ok_jax"), "ok_jax missing from the page");
    assert!(dom.contains(">fail<"), "fail missing from the page");
    // Both attempts are bars on the timeline, and the failure shows its traceback.
    assert_eq!(dom.matches("<rect class=\"attempt").count(), 2, "{dom}");
    assert!(dom.contains("class=\"attempt succeeded\""));
    assert!(dom.contains("class=\"attempt failed\""));
    assert_no_overlap_within_a_slot(&dom);
    assert!(dom.contains("deliberate failure for tests"));
    assert!(dom.contains("<pre class=\"stderr\">"));
    assert!(dom.contains("script_error"));
}

// ---------------------------------------------------------------------------------
// A page built from hand-made events: runs without the binary, and carries hostile
// text that must come out as text.

const HOSTILE_ID: &str = "evil<img src=x onerror=\"document.body.dataset.pwned=1\">";
const HOSTILE_LINE: &str = "<script>document.body.dataset.pwned = 1</script>";

fn result(id: &str, slot: usize, started_at: &str, ok: bool, stderr_tail: &[&str]) -> ScriptResult {
    let status = if ok { "succeeded" } else { "failed" };
    let class = if ok { "succeeded" } else { "script_error" };
    let attempt = json!({
        "number": 1, "device": "cpu", "slot": slot, "started_at": started_at,
        "duration_s": 3.25, "status": status, "return_code": if ok { 0 } else { 1 },
        "signal": null, "peak_memory_mb": 180.0, "cpu_user_s": 2.0, "cpu_system_s": 0.2,
        "class": class, "stdout_log": "/r/a.log", "stderr_log": "/r/b.log"
    });
    let mut v = json!({
        "schema_version": 1, "id": id, "script_path": "/out/x.py",
        "relative_path": format!("m/jax/{id}.py"), "discovered_by": "jax_folder",
        "success": ok, "status": status, "class": class,
        "return_code": if ok { 0 } else { 1 }, "signal": null,
        "device_requested": "cpu", "device_used": "cpu", "device_mismatch": false,
        "jax": {"jax_imported": true, "backend": "cpu", "compile_time_s": 0.4,
                "uncaught_exception": null},
        "attempts": [attempt], "execution_time_s": 3.25, "peak_memory_mb": 180.0,
        "cpu_user_s": 2.0, "cpu_system_s": 0.2, "timeout_s": 300.0,
        "started_at": started_at, "finished_at": null,
        "stdout_log": "/r/a.log", "stderr_log": "/r/b.log",
        "stdout_bytes": 0, "stderr_bytes": 0, "stderr_tail": stderr_tail,
        "log_truncated": false, "leaks": [], "data_dir": "/r/d",
        "sandbox": {"kind": "none", "network": true, "home_visible": true,
                    "environment": "inherited"}
    });
    if !ok {
        v["matched_line"] = json!(HOSTILE_LINE);
        v["exception"] = json!({"type": "RuntimeError", "message": HOSTILE_LINE});
    }
    serde_json::from_value(v).unwrap()
}

fn events() -> Vec<RunEvent> {
    let results = vec![
        result("fine_model", 0, "2026-11-22T07:40:35.693Z", true, &[]),
        result(
            HOSTILE_ID,
            1,
            "2026-11-22T07:40:36.100Z",
            false,
            &[
                "Traceback (most recent call last):",
                HOSTILE_LINE,
                "</pre></div>",
            ],
        ),
    ];
    let run = json!({
        "started_at": "2026-11-22T07:40:35.500Z", "finished_at": "2026-11-22T07:40:40.000Z",
        "wall_time_s": 4.5, "device_requested": "auto", "device": "cpu", "jobs": 2,
        "interpreter": "/venv/bin/python", "interpreter_source": "managed",
        "python_version": "3.11.2", "jax_version": "0.10.2", "jaxlib_version": "0.10.2",
        "output_dir": "/out", "results_dir": "/out/execution_results/jax",
        "compilation_cache": null, "interrupted": false, "retries": 0, "retry_on": [],
        "fallback": "cpu", "runner_peak_rss_mb": 20.0, "device_choice": "auto: no GPU"
    });
    let metrics = PerformanceMetrics::build(
        serde_json::from_value(run).unwrap(),
        results.iter().map(ScriptSummary::of).collect(),
        vec![],
        vec![],
    );
    let mut events = Vec::new();
    for r in &results {
        for i in 0..12 {
            events.push(RunEvent::Sample {
                id: r.id.clone(),
                attempt: 1,
                elapsed_s: i as f64 * 0.25,
                rss_mb: 60.0 + (i as f64 * 0.7).sin().abs() * 100.0,
                processes: 1,
                gpu_memory_mb: None,
                gpu_utilization_pct: None,
            });
        }
    }
    events.extend(results.into_iter().map(|r| RunEvent::ScriptFinished {
        result: Box::new(r),
    }));
    events.push(RunEvent::RunFinished {
        metrics: Box::new(metrics),
    });
    events
}

#[test]
fn chromium_renders_a_report_built_from_events_without_injection() {
    let dir = tempfile::tempdir().unwrap();
    let mut reporter = HtmlReporter::new(dir.path().to_path_buf());
    for e in events() {
        reporter.handle(&e).unwrap();
    }
    let page = dir.path().join("report.html");
    let dom = dump_dom(&page);
    assert_rendered(&dom);
    assert!(dom.contains("fine_model"));
    assert!(
        !body_tag(&dom).contains("pwned"),
        "text from a script ran as code: {}",
        body_tag(&dom)
    );
    assert!(!dom.contains("<img src=\"x\""), "an id became markup");
    // The hostile stderr line is there, as text.
    assert!(dom.contains("&lt;script&gt;document.body.dataset.pwned = 1&lt;/script&gt;"));
    assert_eq!(dom.matches("<rect class=\"attempt").count(), 2);
    assert_eq!(
        dom.matches("<polyline").count(),
        2,
        "one sparkline per script"
    );
}
