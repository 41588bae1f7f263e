//! The HTML report from hand-made events: content, escaping, geometry, limits.

use super::svg::{sparkline, tick_step};
use super::*;
use crate::model::{PerformanceMetrics, ScriptResult, ScriptSummary};
use crate::report::Reporter;
use serde_json::json;

fn attempt(
    number: u32,
    slot: usize,
    started_at: &str,
    duration_s: f64,
    ok: bool,
) -> serde_json::Value {
    json!({
        "number": number,
        "device": "cpu",
        "slot": slot,
        "started_at": started_at,
        "duration_s": duration_s,
        "status": if ok { "succeeded" } else { "failed" },
        "return_code": if ok { 0 } else { 1 },
        "signal": null,
        "peak_memory_mb": 120.5,
        "cpu_user_s": 1.0,
        "cpu_system_s": 0.1,
        "class": if ok { "succeeded" } else { "script_error" },
        "stdout_log": "/r/x.stdout.log",
        "stderr_log": "/r/x.stderr.log"
    })
}

fn result(
    id: &str,
    attempts: Vec<serde_json::Value>,
    ok: bool,
    stderr_tail: &[&str],
) -> ScriptResult {
    let mut v = json!({
        "schema_version": 1,
        "id": id,
        "script_path": format!("/out/m/jax/{id}.py"),
        "relative_path": format!("m/jax/{id}.py"),
        "discovered_by": "jax_folder",
        "success": ok,
        "status": if ok { "succeeded" } else { "failed" },
        "class": if ok { "succeeded" } else { "script_error" },
        "return_code": if ok { 0 } else { 1 },
        "signal": null,
        "device_requested": "cpu",
        "device_used": "cpu",
        "device_mismatch": false,
        "jax": {"jax_imported": true, "backend": "cpu", "compile_time_s": 0.75, "uncaught_exception": null},
        "attempts": attempts,
        "execution_time_s": 2.5,
        "peak_memory_mb": 130.25,
        "cpu_user_s": 1.0,
        "cpu_system_s": 0.1,
        "timeout_s": 300.0,
        "started_at": "2026-11-22T07:40:35.693Z",
        "finished_at": "2026-11-22T07:40:38.193Z",
        "stdout_log": "/r/x.stdout.log",
        "stderr_log": "/r/x.stderr.log",
        "stdout_bytes": 10,
        "stderr_bytes": 10,
        "stderr_tail": stderr_tail,
        "log_truncated": false,
        "leaks": [],
        "data_dir": "/r/data",
        "sandbox": {"kind": "none", "network": true, "home_visible": true, "environment": "inherited"}
    });
    if !ok {
        v["matched_line"] = json!("ValueError: bad <value> & more");
        v["exception"] = json!({"type": "ValueError", "message": "bad <value>"});
    }
    serde_json::from_value(v).expect("a valid ScriptResult")
}

fn metrics(results: &[ScriptResult]) -> PerformanceMetrics {
    let run = crate::model::test_run_info(
        json!({"started_at": "2026-11-22T07:40:35.000Z", "finished_at": "2026-11-22T07:40:45.000Z", "wall_time_s": 10.0, "interpreter": "/venv/bin/python", "python_version": "3.11.2", "jax_version": "0.10.2", "jaxlib_version": "0.10.2", "results_dir": "/out/execution_results/jax", "retries": 1, "retry_on": ["timed_out"], "runner_peak_rss_mb": 20.0}),
    );
    PerformanceMetrics::build(
        run,
        results.iter().map(ScriptSummary::of).collect(),
        vec![],
        vec!["a <warning>".into()],
    )
}

fn feed(events: &[RunEvent]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut r =
        crate::report::EndOfRun::new(vec![Box::new(HtmlExporter::new(dir.path().to_path_buf()))]);
    for e in events {
        r.handle(e).unwrap();
    }
    let html = std::fs::read_to_string(dir.path().join(HTML_FILE)).unwrap();
    (dir, html)
}

fn sample_events() -> Vec<RunEvent> {
    let ok = result(
        "ok_model",
        vec![attempt(1, 0, "2026-11-22T07:40:35.693Z", 2.5, true)],
        true,
        &[],
    );
    let bad = result(
        "bad<b>&model",
        vec![
            attempt(1, 1, "2026-11-22T07:40:35.700Z", 1.0, false),
            attempt(2, 1, "2026-11-22T07:40:37.000Z", 1.5, false),
        ],
        false,
        &[
            "Traceback (most recent call last):",
            "<script>alert(1)</script>",
            "ValueError: bad <value>",
        ],
    );
    let mut events = vec![RunEvent::RunStarted {
        run_id: "r1".into(),
        total: 2,
        kept: 0,
        jobs: 2,
        device: crate::model::Platform::Cpu,
        interpreter: "/venv/bin/python".into(),
        expected_s: None,
    }];
    for i in 0..5 {
        events.push(RunEvent::Sample {
            id: "ok_model".into(),
            attempt: 1,
            elapsed_s: i as f64 * 0.5,
            rss_mb: 50.0 + i as f64 * 10.0,
            processes: 1,
            gpu_memory_mb: None,
            gpu_utilization_pct: None,
        });
    }
    let m = metrics(&[ok.clone(), bad.clone()]);
    events.push(RunEvent::ScriptFinished {
        result: Box::new(bad),
    });
    events.push(RunEvent::ScriptFinished {
        result: Box::new(ok),
    });
    events.push(RunEvent::RunFinished {
        metrics: Box::new(m),
    });
    events
}

#[test]
fn writes_the_report_with_every_script() {
    let (_d, html) = feed(&sample_events());
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100]);
    assert!(html.contains("ok_model"));
    // Ids are escaped wherever they appear.
    assert!(html.contains("bad&lt;b&gt;&amp;model"));
    assert!(!html.contains("bad<b>"));
    assert!(html.contains("0.10.2"));
    assert!(html.contains("/venv/bin/python") || html.contains("&#x2f;venv&#x2f;bin&#x2f;python"));
    assert!(html.contains("document.body.dataset.rendered"));
    assert!(html.contains("a &lt;warning&gt;"));
}

#[test]
fn escapes_stderr_and_failure_details() {
    let (_d, html) = feed(&sample_events());
    assert!(!html.contains("<script>alert(1)"), "stderr must be escaped");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(html.contains("ValueError: bad &lt;value&gt;"));
    assert!(html.contains("script_error"));
    // One script runs: the page's own. The other holds data, and nothing in it can
    // end its element.
    assert_eq!(html.matches("<script>").count(), 1);
    assert_eq!(html.matches("<script").count(), 2);
    assert_eq!(
        html.matches("<script type=\"application/json\" id=\"script-data\">")
            .count(),
        1
    );
    assert_eq!(html.matches("</script>").count(), 2);
}

#[test]
fn one_timeline_rect_per_attempt() {
    let (_d, html) = feed(&sample_events());
    assert_eq!(html.matches("<rect class=\"attempt").count(), 3);
    assert_eq!(html.matches("class=\"attempt succeeded\"").count(), 1);
    assert_eq!(html.matches("class=\"attempt failed\"").count(), 2);
    assert!(html.contains("<title>ok_model · attempt 1 · succeeded · 2.50 s"));
    // Two slots, two rows.
    assert!(html.contains(">slot 0<") && html.contains(">slot 1<"));
}

#[test]
fn a_slurm_jobs_queue_wait_is_drawn_apart_before_its_run() {
    let (_d, html) = feed(&sample_events());
    assert!(
        !html.contains("rect class=\"queue\""),
        "no queue on a local run"
    );
    assert!(!html.contains("waiting in Slurm's queue"));
    let mut events = sample_events();
    for e in &mut events {
        if let RunEvent::ScriptFinished { result } = e {
            if result.id == "ok_model" {
                result.attempts[0].slurm = Some(crate::model::SlurmJob {
                    job_id: "41".into(),
                    state: "COMPLETED".into(),
                    queued_s: 1.25,
                    reported: true,
                    ..Default::default()
                });
            }
        }
    }
    let (_d, html) = feed(&events);
    assert_eq!(html.matches("<rect class=\"queue\"").count(), 1);
    assert!(html.contains("waiting in Slurm's queue"));
    assert!(
        html.contains("queued 1.25 s before"),
        "the tooltip says how long"
    );
    // The queue ends where the run starts.
    let bar = html.split("<rect class=\"queue\"").nth(1).unwrap();
    let num = |k: &str, s: &str| -> f64 {
        let v = s.split(&format!("{k}=\"")).nth(1).unwrap();
        v[..v.find('"').unwrap()].parse().unwrap()
    };
    let (qx, qw) = (num("x", bar), num("width", bar));
    let attempt = bar.split("<rect class=\"attempt").nth(1).unwrap();
    assert!(
        (qx + qw - num("x", attempt)).abs() < 0.2,
        "{qx} + {qw} against {}",
        num("x", attempt)
    );
    assert!(qw > 0.0);
}

#[test]
fn memory_sparkline_from_samples() {
    let (_d, html) = feed(&sample_events());
    assert_eq!(
        html.matches("<polyline").count(),
        1,
        "only ok_model has samples"
    );
}

#[test]
fn gpu_columns_show_only_with_gpu_figures() {
    let (_d, html) = feed(&sample_events());
    assert!(!html.contains("GPU MiB"), "a CPU run has no GPU columns");
    let mut events = sample_events();
    // ok_model ran on GPU 1: its results record the peak, its samples the series.
    for e in &mut events {
        match e {
            RunEvent::Sample { gpu_memory_mb, .. } => *gpu_memory_mb = Some(700.0),
            RunEvent::RunFinished { metrics } => {
                let s = metrics
                    .scripts
                    .iter_mut()
                    .find(|s| s.id == "ok_model")
                    .unwrap();
                s.peak_gpu_memory_mb = Some(812.5);
                s.gpu_index = Some(1);
            }
            _ => {}
        }
    }
    let (_d, html) = feed(&events);
    assert!(html.contains("GPU MiB") && html.contains("GPU memory"));
    assert!(html.contains(">812.5<"), "the peak from the recorded data");
    assert!(
        html.contains("ok_model: GPU memory over"),
        "a GPU sparkline"
    );
    assert_eq!(
        html.matches("<polyline").count(),
        2,
        "memory and GPU memory"
    );
    assert!(
        !html.contains("no GPU samples") && !html.contains("no samples"),
        "a script without samples gets an empty cell, not a note"
    );
}

#[test]
fn self_contained() {
    let (_d, html) = feed(&sample_events());
    assert!(!html.contains("http://"), "remote reference in the report");
    assert!(!html.contains("https://"), "remote reference in the report");
    assert!(!html.contains("src="), "no external scripts or images");
    assert!(!html.contains("<link"), "no external stylesheets");
}

#[test]
fn samples_stay_bounded_and_even() {
    let mut s = Samples::default();
    for i in 0..100_000u32 {
        s.push(1 + i / 50_000, i as f64, i as f64);
    }
    assert!(s.points.len() < MAX_POINTS);
    assert!(s.points.len() >= MAX_POINTS / 2);
    let gaps: Vec<f32> = s.points.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(gaps.iter().all(|g| *g == gaps[0]), "evenly spaced");
    let spark = sparkline("x", Some(&s)).unwrap();
    assert_eq!(spark.lines.len(), 2, "one line per attempt");
}

#[test]
fn a_write_failure_is_an_error_not_a_panic() {
    let mut r = crate::report::EndOfRun::new(vec![Box::new(HtmlExporter::new(PathBuf::from(
        "/proc/no/such/place",
    )))]);
    let events = sample_events();
    let err = events
        .iter()
        .map(|e| r.handle(e))
        .find_map(Result::err)
        .expect("writing under /proc fails");
    assert!(err.to_string().contains("report.html"), "{err}");
}

#[test]
fn the_started_event_names_the_slot() {
    let r = result(
        "late",
        vec![attempt(1, 0, "2026-11-22T07:40:36.000Z", 1.0, true)],
        true,
        &[],
    );
    let m = metrics(std::slice::from_ref(&r));
    let (_d, html) = feed(&[
        RunEvent::ScriptStarted {
            id: "late".into(),
            attempt: 1,
            device: crate::model::Platform::Cpu,
            path: "m/jax/late.py".into(),
            slot: 1,
        },
        RunEvent::ScriptFinished {
            result: Box::new(r),
        },
        RunEvent::RunFinished {
            metrics: Box::new(m),
        },
    ]);
    // Row 1 starts at 4 + one lane; the bar sits below the room for a mark.
    let y = 4.0 + TL_ROW_H + TL_BAR_Y;
    assert!(html.contains(&format!("y=\"{y:.1}\"")), "{html}");
}

#[test]
fn tick_steps_are_round() {
    assert_eq!(tick_step(10.0, 10.0), 1.0);
    assert_eq!(tick_step(95.0, 10.0), 10.0);
    assert_eq!(tick_step(3.0, 10.0), 0.5);
    assert_eq!(tick_step(400.0, 10.0), 50.0);
}

#[test]
fn control_characters_from_a_script_never_reach_the_page() {
    let bad = result(
        "steers",
        vec![attempt(1, 0, "2026-11-22T07:40:35.700Z", 1.0, false)],
        false,
        &["ValueError: \u{1b}]52;c;eA==\u{7}\0\u{9b}\u{202e}\u{7f}"],
    );
    // A file name may hold a line break and a tab.
    let mut bad = bad;
    bad.relative_path = "m/jax/new\nline\tx.py".into();
    bad.script_path = "/out/m/jax/new\nline\tx.py".into();
    let m = metrics(std::slice::from_ref(&bad));
    let events = [
        RunEvent::ScriptFinished {
            result: Box::new(bad),
        },
        RunEvent::RunFinished {
            metrics: Box::new(m),
        },
    ];
    let (_d, html) = feed(&events);
    for raw in ['\u{1b}', '\u{7}', '\0', '\u{9b}', '\u{202e}', '\u{7f}'] {
        assert!(!html.contains(raw), "{raw:?} in the page");
    }
    // In the failure's card, and in the per-script data the page's script reads.
    assert!(
        html.contains("ValueError: \\x1b]52;c;eA==\\x07\\x00\\x9b\\u{202e}\\x7f"),
        "{html}"
    );
    assert!(html.contains("\\\\x1b]52;c;eA=="), "{html}");
    // The path on one line, in the row's title and the card, as every report words it.
    assert!(
        !html.contains("new\nline") && !html.contains("line\tx"),
        "{html}"
    );
    assert!(html.contains("new\\nline\\tx.py"), "{html}");
}

/// A writer that takes `room` bytes, then fails as a full disk does.
struct FullDisk {
    room: usize,
}

impl std::io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The page goes to its file as it is rendered; a write that fails partway is the
/// error the user sees (the disk's, not the template engine's).
#[test]
fn a_disk_that_fills_while_the_page_is_written_is_the_error() {
    let events = sample_events();
    let mut records = crate::report::record::Records::new();
    let mut results = Vec::new();
    for e in &events {
        if let RunEvent::ScriptFinished { result } = e {
            records.push(result);
            results.push((**result).clone());
        }
    }
    let metrics = metrics(&results);
    let run = RunRecord::new(&metrics, &records);
    let exporter = HtmlExporter::new(PathBuf::from("/r"));
    let mut whole = Vec::new();
    exporter.render(&run, &mut whole).unwrap();
    assert!(whole.len() > 4096, "a page of {} bytes", whole.len());
    let err = exporter
        .render(&run, &mut FullDisk { room: 4096 })
        .unwrap_err();
    let io = render_error(&err);
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull, "{io}");
}
