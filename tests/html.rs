//! `report.html` opened in headless Chromium: the page's script runs without errors,
//! the table, timeline and failures are there, and nothing from a script can inject
//! markup. At 3, 41 and 1,000 scripts the page stays readable: failures first, cards
//! that add up, a filter, labels that fit, every failure marked; each is screenshot.
//! Chromium is required: `.ci/run` installs it (`apt-get install chromium`).
//! `JAX_RUNNER_KEEP_SCREENSHOTS=DIR` keeps the screenshots (and the synthetic pages)
//! for a person to look at.

#[path = "html/chromium.rs"]
mod chromium;
mod common;
#[path = "html/dom.rs"]
mod dom;
#[path = "html/lines.rs"]
mod lines;
#[path = "html/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};

use chromium::*;
use common::*;
use jax_runner::events::RunEvent;
use jax_runner::model::{PerformanceMetrics, ScriptResult, ScriptSummary};
use jax_runner::report::{EndOfRun, HtmlExporter, Reporter};
use serde_json::json;

#[test]
fn chromium_renders_the_report_of_a_real_run() {
    if !here("chromium_renders_the_report_of_a_real_run") {
        return;
    }
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    // Discovered after ok_jax: shown before it all the same.
    t.fixture("fail_exception.py", "m/jax/z_fail.py");
    let out = t.run(&[]);
    assert_eq!(code(&out), 1, "one script fails: {}", stderr(&out));

    let page = t.results_dir().join("report.html");
    assert!(
        page.is_file(),
        "{} is missing: is HtmlExporter registered in report::documents?",
        page.display()
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"));

    let dom = dump_dom(&page);
    assert_rendered(&dom);
    assert!(dom.contains("ok_jax"), "ok_jax missing from the page");
    assert!(dom.contains(">z_fail<"), "z_fail missing from the page");
    // Both attempts are bars on the timeline, and the failure shows its traceback.
    assert_eq!(dom.matches("<rect class=\"attempt").count(), 2, "{dom}");
    assert!(dom.contains("class=\"attempt succeeded\""));
    assert!(dom.contains("class=\"attempt failed\""));
    assert_no_overlap_within_a_slot(&dom);
    assert!(dom.contains("deliberate failure for tests"));
    assert!(dom.contains("<pre class=\"stderr\">"));
    assert!(dom.contains("script_error"));
    dom::assert_readable(&dom, 2);
    assert_eq!(dom::rows(&dom)[0].id, "z_fail", "the failure comes first");
    screenshot(&page, "", &t.root().join("report-real.png"), 1400, 1000);
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
    if !here("chromium_renders_a_report_built_from_events_without_injection") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut reporter = EndOfRun::new(vec![Box::new(HtmlExporter::new(dir.path().to_path_buf()))]);
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

#[test]
fn the_hostile_scripts_detail_opens_as_text() {
    if !here("the_hostile_scripts_detail_opens_as_text") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut reporter = EndOfRun::new(vec![Box::new(HtmlExporter::new(dir.path().to_path_buf()))]);
    for e in events() {
        reporter.handle(&e).unwrap();
    }
    let page = dir.path().join("report.html");
    let dom = dump_dom_at(&page, &format!("#script={}", percent(HOSTILE_ID)));
    assert_rendered(&dom);
    assert!(!body_tag(&dom).contains("pwned"), "{}", body_tag(&dom));
    let panel = detail_panel(&dom);
    assert!(!panel.starts_with("<aside id=\"detail\" hidden"), "{panel}");
    assert!(panel.contains("evil&lt;img src=x"), "{panel}");
    assert!(!panel.contains("<img"), "{panel}");
}

// ---------------------------------------------------------------------------------
// Synthetic runs of 3, 41 and 1,000 scripts.

/// Every byte but unreserved ones percent-encoded, for a URL fragment.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The `<aside id="detail" …>…</aside>` of a dumped DOM.
fn detail_panel(dom: &str) -> &str {
    let start = dom.find("<aside id=\"detail\"").expect("a detail panel");
    &dom[start..start + dom[start..].find("</aside>").unwrap()]
}

/// Writes, dumps, screenshots and checks the report of `n` synthetic scripts.
fn check_synthetic(n: usize, jobs: usize) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let page = synth::write_report(dir.path(), n, jobs);
    let dom = dump_dom(&page);
    assert_rendered(&dom);
    dom::assert_readable(&dom, n);
    let png = dir.path().join(format!("report-{n}.png"));
    screenshot(&page, "", &png, 1400, 1800);
    if let Some(keep) = std::env::var_os("JAX_RUNNER_KEEP_SCREENSHOTS") {
        std::fs::copy(&page, Path::new(&keep).join(format!("report-{n}.html"))).unwrap();
    }
    (dir, page, dom)
}

#[test]
fn three_scripts_are_readable() {
    if !here("three_scripts_are_readable") {
        return;
    }
    let (_dir, _page, dom) = check_synthetic(3, 2);
    // Short bars of short ids: the labels are there.
    let labelled = dom::bars(&dom)
        .iter()
        .filter(|b| b.label_w.is_some())
        .count();
    assert!(labelled >= 2, "{labelled} labelled bars");
}

#[test]
fn forty_one_scripts_are_readable() {
    if !here("forty_one_scripts_are_readable") {
        return;
    }
    let (_dir, _page, dom) = check_synthetic(41, 4);
    let rows = dom::rows(&dom);
    assert!(
        rows[0].status != "succeeded",
        "failures first: {:?}",
        rows[0]
    );
    // The script stopped before it started is counted, listed, and has no bar.
    let unstarted = rows
        .iter()
        .find(|r| r.attempts == 0)
        .expect("an unstarted row");
    assert_eq!(unstarted.status, "interrupted");
    assert!(dom::bars(&dom).iter().all(|b| b.i != unstarted.i));
    assert!(dom.contains("not started (interrupted)"));
    // Of 41 long ids on 4 lanes, only bars wide enough keep theirs.
    let bars = dom::bars(&dom);
    let labelled = bars.iter().filter(|b| b.label_w.is_some()).count();
    assert!(labelled < bars.len(), "every bar labelled: {labelled}");
}

#[test]
fn a_thousand_scripts_are_readable_and_the_page_stays_small() {
    if !here("a_thousand_scripts_are_readable_and_the_page_stays_small") {
        return;
    }
    let (_dir, page, dom) = check_synthetic(1000, 8);
    let size = std::fs::metadata(&page).unwrap().len();
    let body = body_tag(&dom);
    eprintln!(
        "report.html of 1000 scripts: {size} bytes; script {} ms, ready {} ms after navigation",
        dom::attr_str(body, "data-script-ms").unwrap_or("?"),
        dom::attr_str(body, "data-ready-ms").unwrap_or("?"),
    );
    assert!(
        size < 2 << 20,
        "report.html of 1000 scripts is {size} bytes"
    );
    // Sparklines only for scripts with samples, never a placeholder.
    let sparks = dom.matches("<svg class=\"spark\"").count();
    assert!(sparks > 0 && sparks < 1000, "{sparks} sparklines");
}

#[test]
fn the_filter_in_the_url_hides_what_does_not_match() {
    if !here("the_filter_in_the_url_hides_what_does_not_match") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = synth::write_report(dir.path(), 41, 4);
    let all = dom::rows(&dump_dom(&page));

    let dom = dump_dom_at(&page, "#q=timed_out");
    let rows = dom::rows(&dom);
    let shown: Vec<&str> = rows
        .iter()
        .filter(|r| !r.hidden)
        .map(|r| r.id.as_str())
        .collect();
    let want: Vec<&str> = all
        .iter()
        .filter(|r| r.status == "timed_out")
        .map(|r| r.id.as_str())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(shown, want);
    assert!(dom.contains(&format!("data-shown=\"{}\"", want.len())));
    assert!(
        dom.contains(" class=\"bar dim\""),
        "non-matching bars are dimmed"
    );

    // Every word must match, in any case: the first failed script's model and "FAILED".
    let model = &all.iter().find(|r| r.status == "failed").unwrap().id[..8];
    let dom = dump_dom_at(&page, &format!("#q=FAILED+{}", percent(model)));
    let shown: Vec<String> = dom::rows(&dom)
        .into_iter()
        .filter(|r| !r.hidden)
        .map(|r| r.id)
        .collect();
    let want: Vec<String> = all
        .iter()
        .filter(|r| r.status == "failed" && r.id.contains(model))
        .map(|r| r.id.clone())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(shown, want);
}

#[test]
fn a_scripts_detail_opens_from_the_url() {
    if !here("a_scripts_detail_opens_from_the_url") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = synth::write_report(dir.path(), 41, 4);
    let rows = dom::rows(&dump_dom(&page));
    let failed = rows.iter().find(|r| r.status == "failed").unwrap();
    let fragment = format!("#script={}", percent(&failed.id));
    let dom = dump_dom_at(&page, &fragment);
    let panel = detail_panel(&dom);
    assert!(
        panel.starts_with("<aside id=\"detail\" aria-live"),
        "{panel}"
    );
    assert!(panel.contains(&format!(">{}</h3>", failed.id)), "{panel}");
    assert!(panel.contains("exit code 1: ValueError: belief does not sum to &lt;1&gt;"));
    assert!(panel.contains("<td>script_error</td>") || panel.contains("<td>failed</td>"));
    assert!(
        panel.contains(">stderr</a>") && panel.contains(">data</a>"),
        "{panel}"
    );
    assert!(panel.contains(">failure details</a>"), "{panel}");
    // The row and its bars are selected.
    assert!(dom.contains(&format!("data-i=\"{}\" class=\"failed sel\"", failed.i)));
    let png = dir.path().join("report-41-detail.png");
    screenshot(&page, &fragment, &png, 1400, 1000);
}
