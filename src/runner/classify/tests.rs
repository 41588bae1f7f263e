//! Every signature in the table, and the precedence between classes.

use super::*;

fn scan(text: &str) -> StderrScan {
    let mut s = StderrScan::default();
    for line in text.lines() {
        s.line(line.as_bytes());
    }
    s
}

fn ending<'a>(scan: &'a StderrScan, code: Option<i32>, signal: Option<i32>) -> Ending<'a> {
    Ending {
        platform: Platform::Gpu,
        code,
        signal,
        timed_out: false,
        interrupted: false,
        memory_limit_hit: false,
        process_limit_hit: false,
        kernel_oom_kill: false,
        memory_cgroup_hit: false,
        peak: Held::default(),
        scan,
    }
}

fn class_of(stderr: &str) -> Classification {
    let s = scan(stderr);
    classify(&ending(&s, Some(1), None))
}

#[test]
fn every_signature_maps_to_its_class() {
    let cases = [
        ("RuntimeError: jaxlib version 0.9.0 is newer than and incompatible with jax version 0.8.0. Please update", FailureClass::BrokenInstall),
        ("RuntimeError: This version of jax requires jaxlib version >= 0.10.0.", FailureClass::BrokenInstall),
        ("RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.", FailureClass::GpuEnvironment),
        ("ALREADY_EXISTS: PJRT_Api already exists for device type cuda", FailureClass::GpuEnvironment),
        ("E0000 Loaded runtime CuDNN library: 9.10.2 but source was compiled with: 9.12.0.", FailureClass::GpuEnvironment),
        ("FAILED_PRECONDITION: DNN library initialization failed.", FailureClass::GpuEnvironment),
        ("jax.errors.JaxRuntimeError: Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda12.initialize()", FailureClass::GpuEnvironment),
        ("RuntimeError: Unable to load CUDA. Is it installed?", FailureClass::GpuEnvironment),
        ("INTERNAL: CUDA error: Failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", FailureClass::GpuEnvironment),
        ("No visible GPU devices.", FailureClass::GpuEnvironment),
        ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.", FailureClass::OutOfMemory),
        ("E external/xla: CUDA_ERROR_OUT_OF_MEMORY: out of memory", FailureClass::OutOfMemory),
        ("terminate called after throwing an instance of 'std::bad_alloc'", FailureClass::OutOfMemory),
    ];
    assert_eq!(cases.len(), SIGNATURES.len(), "one case per signature");
    for (line, class) in cases {
        let c = class_of(line);
        assert_eq!(c.class, class, "{line}");
        assert_eq!(c.matched_line.as_deref(), Some(line.trim()), "{line}");
    }
}

#[test]
fn traceback_gives_script_error_with_the_exception() {
    let c = class_of(
        "Traceback (most recent call last):\n  File \"m.py\", line 3, in <module>\n    raise ValueError(\"bad A matrix\")\nValueError: bad A matrix\n",
    );
    assert_eq!(c.class, FailureClass::ScriptError);
    let x = c.exception.unwrap();
    assert_eq!(
        (x.kind.as_str(), x.message.as_str()),
        ("ValueError", "bad A matrix")
    );
    assert_eq!(c.matched_line.as_deref(), Some("ValueError: bad A matrix"));
}

#[test]
fn syntax_and_import_errors_are_script_errors() {
    let c =
        class_of("  File \"s.py\", line 2\n    def (\n        ^\nSyntaxError: invalid syntax\n");
    assert_eq!(c.class, FailureClass::ScriptError);
    assert_eq!(c.exception.unwrap().kind, "SyntaxError");
    let c = class_of("Traceback (most recent call last):\n  File \"m.py\", line 2, in <module>\nModuleNotFoundError: No module named 'xyz'\n");
    assert_eq!(c.exception.unwrap().kind, "ModuleNotFoundError");
}

#[test]
fn bare_assertion_in_xla_bridge_is_gpu_environment_only_for_gpu_runs() {
    let text = "Traceback (most recent call last):\n  File \"/x/jax/_src/xla_bridge.py\", line 857, in backends\n    assert _default_backend is not None\nAssertionError\n";
    let s = scan(text);
    assert_eq!(
        classify(&ending(&s, Some(1), None)).class,
        FailureClass::GpuEnvironment
    );
    let mut cpu = ending(&s, Some(1), None);
    cpu.platform = Platform::Cpu;
    assert_eq!(classify(&cpu).class, FailureClass::ScriptError);
    let user =
        scan("Traceback (most recent call last):\n  File \"m.py\", line 1\nAssertionError\n");
    assert_eq!(
        classify(&ending(&user, Some(1), None)).class,
        FailureClass::ScriptError
    );
}

#[test]
fn precedence_stop_reasons_then_success_then_signatures() {
    let s = scan("RESOURCE_EXHAUSTED: Out of memory\nNo visible GPU devices\n");
    assert_eq!(
        classify(&ending(&s, Some(1), None)).class,
        FailureClass::GpuEnvironment
    );
    assert_eq!(
        classify(&ending(&s, Some(0), None)).class,
        FailureClass::Succeeded
    );
    let mut e = ending(&s, None, Some(libc::SIGTERM));
    e.timed_out = true;
    assert_eq!(classify(&e).class, FailureClass::TimedOut);
    e.interrupted = true;
    assert_eq!(classify(&e).class, FailureClass::Interrupted);
    let mut m = ending(&s, None, Some(libc::SIGKILL));
    m.memory_limit_hit = true;
    assert_eq!(classify(&m).class, FailureClass::OutOfMemory);
}

#[test]
fn a_memory_reason_says_what_the_scratch_held() {
    let s = StderrScan::default();
    let mut m = ending(&s, None, Some(libc::SIGKILL));
    m.memory_limit_hit = true;
    let line = |e: &Ending<'_>| classify(e).matched_line.unwrap();
    assert_eq!(line(&m), "killed by the --memory-limit watchdog");
    m.peak = Held {
        rss: 112 << 20,
        scratch: 700 << 20,
    };
    assert_eq!(
        line(&m),
        "killed by the --memory-limit watchdog: 812 MB, of which 700 MB in its scratch \
         (/tmp, /dev/shm, $HOME)"
    );
    m.memory_limit_hit = false;
    m.memory_cgroup_hit = true;
    assert!(line(&m).ends_with("at least 700 MB of it in its scratch (/tmp, /dev/shm, $HOME)"));
}

#[test]
fn signals_memory_errors_and_the_oom_killer() {
    let empty = StderrScan::default();
    let c = classify(&ending(&empty, None, Some(libc::SIGSEGV)));
    assert_eq!(c.class, FailureClass::KilledBySignal);
    assert_eq!(c.matched_line.as_deref(), Some("killed by SIGSEGV"));
    let mut oom = ending(&empty, None, Some(libc::SIGKILL));
    assert_eq!(classify(&oom).class, FailureClass::KilledBySignal);
    oom.kernel_oom_kill = true;
    assert_eq!(classify(&oom).class, FailureClass::OutOfMemory);
    let s = scan("Traceback (most recent call last):\n  File \"m.py\"\nMemoryError\n");
    assert_eq!(
        classify(&ending(&s, Some(1), None)).class,
        FailureClass::OutOfMemory
    );
    let plain = classify(&ending(&empty, Some(3), None));
    assert_eq!(
        (plain.class, plain.exception),
        (FailureClass::ScriptError, None)
    );
}

#[test]
fn class_names_round_trip() {
    for c in FailureClass::ALL {
        assert_eq!(FailureClass::parse(c.as_str()), Some(c));
        assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
    }
    assert_eq!(FailureClass::parse("nope"), None);
}

/// The user's own frame is the innermost one outside the interpreter's installation,
/// with its source line, whatever jax prints below it; a chained exception's last
/// traceback decides.
#[test]
fn the_users_innermost_frame_is_kept_with_its_source() {
    let s = scan(
        "Traceback (most recent call last):\n  \
         File \"/t/m/jax/scan_shape.py\", line 15, in <module>\n    \
         print(rollout(a, xs))\n  \
         File \"/venv/lib/python3.11/site-packages/jax/_src/traceback_util.py\", line 180, in reraise\n    \
         return fun(*args)\n  \
         File \"/t/m/jax/scan_shape.py\", line 6, in efe\n    \
         y = jnp.dot(carry, x)\n        \
         ^^^^^^^^^^^^^^^^^^^\n  \
         File \"/venv/lib/python3.11/site-packages/jax/_src/numpy/lax_numpy.py\", line 9, in dot\n    \
         raise TypeError(msg)\n\
         TypeError: dot_general requires contracting dimensions to have the same shape\n",
    );
    let f = s.user_frame.expect("a user frame");
    assert_eq!((f.file.as_str(), f.line), ("/t/m/jax/scan_shape.py", 6));
    assert_eq!(f.function, "efe");
    assert_eq!(f.source.as_deref(), Some("y = jnp.dot(carry, x)"));
    // Only the interpreter's and the packages' frames: no user frame.
    let s = scan(
        "Traceback (most recent call last):\n  \
         File \"<frozen runpy>\", line 198, in _run_module_as_main\n  \
         File \"/usr/lib/python3.11/json/__init__.py\", line 346, in loads\n\
         json.decoder.JSONDecodeError: Expecting value\n",
    );
    assert!(s.user_frame.is_none());
}

/// faulthandler's dump before a stop: the current thread's innermost user frame,
/// most recent first, and no source line.
#[test]
fn a_stack_dump_names_where_the_current_thread_was() {
    let s = scan(
        "Thread 0x00007f0000000001 (most recent call first):\n  \
         File \"/t/m/jax/worker.py\", line 3 in loop\n\n\
         Current thread 0x00007f0000000002 (most recent call first):\n  \
         File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n  \
         File \"/t/m/jax/hang.py\", line 7 in spin\n  \
         File \"/t/m/jax/hang.py\", line 11 in main\n\n",
    );
    let f = s.hung_at.expect("where it hung");
    assert_eq!(
        (f.file.as_str(), f.line, f.function.as_str()),
        ("/t/m/jax/hang.py", 7, "spin")
    );
    assert_eq!(f.source, None);
    assert!(s.user_frame.is_none() && s.exception.is_none());
}

/// Python's report of a script that does not compile has no traceback header and no
/// function: its place is still the user's line, with its source.
#[test]
fn a_syntax_error_names_its_line() {
    let s = scan(
        "  File \"/t/m/jax/broken.py\", line 3\n    \
         x = (\n        \
         ^\n\
         SyntaxError: '(' was never closed\n",
    );
    let f = s.user_frame.expect("the line that does not compile");
    assert_eq!(
        (f.file.as_str(), f.line, f.function.as_str()),
        ("/t/m/jax/broken.py", 3, "")
    );
    assert_eq!(f.source.as_deref(), Some("x = ("));
    // Imported from the script: the traceback's last place is the module's line.
    let s = scan(
        "Traceback (most recent call last):\n  \
         File \"/t/m/jax/main.py\", line 1, in <module>\n    \
         import helper\n  \
         File \"/t/m/jax/helper.py\", line 2\n    \
         def (\n        \
         ^\n\
         SyntaxError: invalid syntax\n",
    );
    let f = s.user_frame.expect("the helper's line");
    assert_eq!((f.file.as_str(), f.line), ("/t/m/jax/helper.py", 2));
    assert_eq!(f.source.as_deref(), Some("def ("));
    // A place printed apart from any error is not one.
    let s = scan("  File \"/t/m/jax/x.py\", line 9\nsomething else\nValueError: later\n");
    assert!(s.user_frame.is_none());
}

/// faulthandler's dump after `Fatal Python error:` is a crash's: where the current
/// thread was is where the script died; a stop's dump is not a crash.
#[test]
fn a_crash_dump_names_where_the_script_died() {
    let s = scan(
        "Fatal Python error: Segmentation fault\n\n\
         Thread 0x00007f0000000001 (most recent call first):\n  \
         File \"/t/m/jax/worker.py\", line 3 in loop\n\n\
         Current thread 0x00007f0000000002 (most recent call first):\n  \
         File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at\n  \
         File \"/t/m/jax/crash.py\", line 6 in <module>\n\n\
         Extension modules: numpy.core._multiarray_umath (total: 1)\n",
    );
    let f = s.crashed_at.expect("where it died");
    assert_eq!((f.file.as_str(), f.line), ("/t/m/jax/crash.py", 6));
    let s = scan(
        "Current thread 0x00007f0000000002 (most recent call first):\n  \
         File \"/t/m/jax/hang.py\", line 7 in spin\n\n",
    );
    assert!(s.crashed_at.is_none() && s.hung_at.is_some());
}
