use super::*;

fn ending(status: Status, class: FailureClass) -> Ending {
    Ending {
        status,
        class,
        return_code: None,
        signal: None,
        timeout_s: 30.0,
        memory_mb: 1024.0,
        started: true,
    }
}

#[test]
fn each_ending_has_its_words() {
    let mut e = ending(Status::Failed, FailureClass::ScriptError);
    e.return_code = Some(3);
    assert_eq!(e.words().as_deref(), Some("exit code 3"));
    let mut e = ending(Status::Failed, FailureClass::KilledBySignal);
    e.signal = Some(libc::SIGABRT);
    assert_eq!(e.words().as_deref(), Some("killed by SIGABRT"));
    let e = ending(Status::TimedOut, FailureClass::TimedOut);
    assert_eq!(e.words().as_deref(), Some("no exit within 30s (timed out)"));
    let mut e = ending(Status::Failed, FailureClass::OutOfMemory);
    e.signal = Some(libc::SIGKILL);
    assert_eq!(e.words().as_deref(), Some("out of memory at 1.0 GiB"));
    let mut e = ending(Status::Interrupted, FailureClass::Interrupted);
    e.started = false;
    assert_eq!(e.words().as_deref(), Some("not started (interrupted)"));
    let mut ok = ending(Status::Succeeded, FailureClass::Succeeded);
    ok.return_code = Some(0);
    assert_eq!(ok.words(), None);
}

#[test]
fn sizes_durations_and_signals_read_like_people_write_them() {
    assert_eq!(size(512.0), "512 MiB");
    assert_eq!(size(1536.0), "1.5 GiB");
    assert_eq!(duration(300.0), "5m");
    assert_eq!(duration(5400.0), "1h 30m");
    assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV");
    assert_eq!(signal_name(63), "signal 63");
}

#[test]
fn the_line_ends_with_the_last_output_line_and_stdout_stands_in_for_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("x.stdout.log");
    let body: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&log, body).unwrap();
    let tail = last_lines(log.to_str().unwrap(), 3);
    assert_eq!(tail, vec!["line 2997", "line 2998", "line 2999"]);
    let mut reason = FailureReason {
        words: "exit code 3".into(),
        place: None,
        stopped: false,
        tail: vec!["ValueError: bad".into(), "  ".into()],
        stream: "stderr",
        hint: None,
        exception: None,
    };
    assert_eq!(reason.line(), "exit code 3: ValueError: bad");
    // The user's own line, where a traceback named one, comes before the output's.
    reason.place = Some(("m/jax/model.py:6 in efe".into(), None));
    assert_eq!(
        reason.line(),
        "exit code 3 at m/jax/model.py:6 in efe: ValueError: bad"
    );
    // A stopped script's output ends with its stack dump: the line ends at the place.
    reason.stopped = true;
    reason.words = "no exit within 3s (timed out)".into();
    assert_eq!(
        reason.line(),
        "no exit within 3s (timed out) at m/jax/model.py:6 in efe"
    );
    assert!(last_lines("/no/such/log", 3).is_empty());
}

/// A missing module's reason says how to add it, by its top-level name.
#[test]
fn a_missing_module_says_how_to_add_it() {
    let x = |kind: &str, message: &str| crate::model::ExceptionInfo {
        kind: kind.into(),
        message: message.into(),
    };
    let hint = missing_module_hint(&x(
        "ModuleNotFoundError",
        "No module named 'matplotlib.pyplot'",
    ));
    assert_eq!(
        hint.as_deref(),
        Some(
            "add it: jax-runner setup --with matplotlib, or pip install it into the run's --python"
        )
    );
    assert_eq!(
        missing_module_hint(&x("ImportError", "No module named 'a'")),
        None
    );
    assert_eq!(missing_module_hint(&x("ModuleNotFoundError", "odd")), None);
}

use crate::model::test_failed_result as failed;

/// The exception ends the line where the output shows it, below which a message of
/// several lines (or jax's link) goes on; a later line of the script's own stays last.
#[test]
fn the_line_ends_with_the_exception_the_output_shows() {
    let frame = serde_json::json!({"file": "/out/m/jax/model.py", "line": 3,
        "function": "<module>", "source": "raise ValueError(msg)"});
    let several = failed(serde_json::json!({
        "stderr_tail": ["Traceback (most recent call last):",
            "  File \"/out/m/jax/model.py\", line 3, in <module>",
            "ValueError: line one", "line two", "line three"],
        "exception": {"type": "ValueError", "message": "line one"},
        "user_frame": frame,
        "jax": {"jax_imported": false, "uncaught_exception": "ValueError"},
    }));
    let r = FailureReason::of(&several).unwrap();
    assert_eq!(
        r.line(),
        "exit code 1 at m/jax/model.py:3 in <module>: ValueError: line one"
    );
    // jax's own, named with its module, and a link below it.
    let jax_error = failed(serde_json::json!({
        "stderr_tail": ["jax.errors.TracerBoolConversionError: Attempted boolean conversion",
            "See https://docs.jax.dev/en/latest/errors.html"],
        "exception": {"type": "jax.errors.TracerBoolConversionError",
            "message": "Attempted boolean conversion"},
        "jax": {"jax_imported": true, "uncaught_exception": "TracerBoolConversionError"},
    }));
    assert_eq!(
        FailureReason::of(&jax_error).unwrap().line(),
        "exit code 1: jax.errors.TracerBoolConversionError: Attempted boolean conversion"
    );
    // An exception only logged, then the script's own last words and `sys.exit(1)`
    // (no uncaught exception): the last line stays.
    let logged = failed(serde_json::json!({
        "stderr_tail": ["Traceback (most recent call last):", "ValueError: retried", "giving up"],
        "exception": {"type": "ValueError", "message": "retried"},
        "jax": {"jax_imported": false, "uncaught_exception": null},
    }));
    assert_eq!(
        FailureReason::of(&logged).unwrap().line(),
        "exit code 1: giving up"
    );
    // Nothing on stderr or stdout (a script that closed them): the hook's type.
    let closed = failed(serde_json::json!({"exception": {"type": "ValueError", "message": ""}}));
    assert_eq!(
        FailureReason::of(&closed).unwrap().line(),
        "exit code 1: ValueError"
    );
}

/// A SyntaxError's place has no function; a crash's comes from its dump, which ends
/// its output.
#[test]
fn a_syntax_error_and_a_crash_are_placed() {
    let syntax = failed(serde_json::json!({
        "stderr_tail": ["  File \"/out/m/jax/model.py\", line 3", "    x = (", "        ^",
            "SyntaxError: '(' was never closed"],
        "exception": {"type": "SyntaxError", "message": "'(' was never closed"},
        "user_frame": {"file": "/out/m/jax/model.py", "line": 3, "function": "", "source": "x = ("},
    }));
    assert_eq!(
        FailureReason::of(&syntax).unwrap().line(),
        "exit code 1 at m/jax/model.py:3: SyntaxError: '(' was never closed"
    );
    let crash = failed(serde_json::json!({
        "class": "killed_by_signal", "return_code": null, "signal": libc::SIGSEGV,
        "stderr_tail": ["Fatal Python error: Segmentation fault", "",
            "Current thread 0x00007f0000000002 (most recent call first):",
            "  File \"/out/m/jax/model.py\", line 6 in <module>",
            "", "Extension modules: numpy (total: 1)"],
        "user_frame": {"file": "/out/m/jax/model.py", "line": 6, "function": "<module>",
            "source": "ctypes.string_at(0)"},
    }));
    let r = FailureReason::of(&crash).unwrap();
    assert_eq!(
        r.line(),
        "killed by SIGSEGV at m/jax/model.py:6 in <module>"
    );
}
