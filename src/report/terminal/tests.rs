use super::*;

#[test]
fn a_line_is_the_tag_the_time_and_the_id() {
    assert_eq!(
        script_line(Status::Succeeded, Some(1.234), "a.b", false),
        "   PASS [    1.23s] a.b"
    );
    assert_eq!(
        script_line(Status::TimedOut, Some(2.0), "h", false),
        "TIMEOUT [    2.00s] h"
    );
    assert_eq!(
        script_line(Status::Skipped, None, "s", false),
        "   SKIP [         ] s"
    );
    assert_eq!(slow_line(60.0, "x", false), "   SLOW [   60.00s] x");
}

#[test]
fn colours_follow_the_status() {
    let pass = script_line(Status::Succeeded, Some(1.0), "a", true);
    assert!(pass.contains("\u{1b}[32m"), "{pass:?}");
    let fail = script_line(Status::Failed, Some(1.0), "a", true);
    assert!(fail.contains("\u{1b}[31m"), "{fail:?}");
    let skip = script_line(Status::Skipped, None, "a", true);
    assert!(skip.contains("\u{1b}[33m"), "{skip:?}");
}

#[test]
fn a_slow_line_comes_once_per_multiple_of_the_threshold() {
    let mut t = TerminalReporter::new(Detail::Silent, false, Duration::from_secs(2), false);
    let marks = |t: &mut TerminalReporter, s: f64| {
        t.sample("x", s);
        t.slow_marks["x"]
    };
    assert_eq!(marks(&mut t, 1.0), 0);
    assert_eq!(marks(&mut t, 2.1), 1);
    assert_eq!(marks(&mut t, 3.9), 1);
    assert_eq!(marks(&mut t, 4.0), 2);
}

#[test]
fn quiet_is_the_summary_line_alone() {
    let run = crate::model::test_run_info(serde_json::json!({}));
    let m = PerformanceMetrics::build(run, vec![], vec![], vec![]);
    let out = end_of_run(&m, &[], Detail::Quiet, false);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("Summary ["), "{out}");
    assert!(out.ends_with("; report: /r/report.html\n"), "{out}");
    assert_eq!(end_of_run(&m, &[], Detail::Silent, false), "");
}

#[test]
fn a_reason_cannot_steer_the_terminal() {
    let run = crate::model::test_run_info(serde_json::json!({}));
    let m = PerformanceMetrics::build(run, vec![], vec!["gone/\u{1b}]0;t\u{7}.py".into()], vec![]);
    let failure = Failure {
        status: Status::Failed,
        id: "x\u{9b}2K".into(),
        execution_time_s: 1.0,
        reason: Some("exit code 1: E: \u{1b}[2K\r\u{1b}[32mPASS\0\u{202e}".into()),
        stderr_log: Some("/r/logs/x\n.stderr.log".into()),
        since: None,
    };
    let out = end_of_run(&m, &[failure], Detail::Normal, false);
    assert!(
        out.contains("   FAIL [    1.00s] x\\x9b2K: exit code 1: E: \\x1b[2K\\r\\x1b[32mPASS\\x00\\u{202e}\n"),
        "{out}"
    );
    assert!(out.contains("stderr: /r/logs/x\\n.stderr.log\n"), "{out}");
    assert!(out.contains("missing: gone/\\x1b]0;t\\x07.py"), "{out}");
    assert!(
        !out.contains(['\u{1b}', '\u{9b}', '\r', '\0', '\u{202e}']),
        "{out:?}"
    );
}

/// Carried scripts are one line per reason with a count, naming the failing ones (at
/// most three, then how many more).
#[test]
fn carried_scripts_are_one_line_naming_the_failing() {
    let ids: Vec<(String, Status)> = (0..499)
        .map(|i| {
            let status = match i % 100 {
                0 => Status::Failed,
                _ => Status::Succeeded,
            };
            (format!("s{i:03}"), status)
        })
        .collect();
    assert_eq!(
        carried_line("not selected by -k x", &ids, false),
        "CARRIED 499 from earlier runs (not selected by -k x), 5 of them failing: \
         s000, s100, s200 and 2 more"
    );
    let ok = [("a".to_string(), Status::Succeeded)];
    assert_eq!(
        carried_line("not started", &ok, false),
        "CARRIED 1 from earlier runs (not started)"
    );
}

#[test]
fn scripts_never_started_are_counted_not_listed_but_a_refused_one_is_a_failure() {
    let line = |id: &str, status: &str, attempts: usize| -> crate::model::ScriptSummary {
        serde_json::from_value(serde_json::json!({
            "id": id, "status": status, "execution_time_s": 0.0, "cpu_user_s": 0.0,
            "cpu_system_s": 0.0, "peak_memory_mb": 0.0, "attempts": attempts,
            "class": "script_error", "reason": format!("{id} reason"),
            "device_requested": "cpu", "device_used": null, "fallback": false,
            "device_mismatch": false, "leaks": 0, "results_file": format!("{id}_results.json")
        }))
        .expect("a summary line")
    };
    let lines = vec![
        line("refused", "failed", 0),
        line("stopped_before", "interrupted", 0),
        line("skipped", "skipped", 0),
        line("stopped_while", "interrupted", 1),
        line("bad", "failed", 1),
    ];
    let run = crate::model::test_run_info(serde_json::json!({}));
    let m = PerformanceMetrics::build(run, lines, vec![], vec![]);
    let listed: Vec<String> = failures(&m, &HashMap::new())
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(listed, ["refused", "stopped_while", "bad"]);
    assert!(never_started(0, Status::Skipped) && never_started(0, Status::Interrupted));
    assert!(!never_started(0, Status::Failed) && !never_started(1, Status::Interrupted));
}
