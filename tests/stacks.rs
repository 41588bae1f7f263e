//! Where a stopped script's time ran out, whatever it does with SIGTERM. Before the
//! runner's SIGTERM, each process of the script that catches it is asked for its
//! Python stacks on a signal of their own (`src/runner/child/stop.rs`), so a script
//! that handles SIGTERM (and saves on its way out), ignores it, blocks it, or hangs in
//! C code that holds the GIL still names its own line; warm and cold, with bubblewrap,
//! with the built-in layer alone, and unsandboxed.

mod common;

use common::*;

/// The fixture's modes (its file's name), and the line and function each hangs at.
const MODES: [(&str, u32, &str); 4] = [
    ("handles", 17, "spin"),
    ("ignores", 17, "spin"),
    ("blocks", 17, "spin"),
    ("in_c", 21, "in_c"),
];

#[test]
fn a_stopped_script_names_the_line_its_time_ran_out_at() {
    for (sandbox, bwrap) in [("on", true), ("on", false), ("off", true)] {
        for warm in ["on", "off"] {
            let case = format!("--sandbox {sandbox} (bwrap on PATH: {bwrap}) --warm-start {warm}");
            let t = Tree::new();
            for (mode, ..) in MODES {
                t.fixture("guards_sigterm.py", &format!("m/jax/{mode}.py"));
            }
            let mut cmd = t.cmd();
            cmd.args(["--sandbox", sandbox, "--warm-start", warm])
                .args(["--timeout", "3s", "--grace", "2s", "--jobs", "4"]);
            if !bwrap {
                // The runner finds bwrap through PATH alone; `--python` is given.
                cmd.env("PATH", "/nonexistent");
            }
            let out = cmd.output().unwrap();
            assert_eq!(code(&out), 1, "{case}: {}", stderr(&out));
            for (mode, line, function) in MODES {
                let r = t.result(mode);
                assert_eq!(r["class"], "timed_out", "{case}: {r}");
                assert_eq!(
                    r["reason"],
                    format!(
                        "no exit within 3s (timed out) at m/jax/{mode}.py:{line} in {function}"
                    ),
                    "{case}: {r}"
                );
                // Asked once, and SIGTERM does not ask again: one thread, one dump.
                let log = std::fs::read_to_string(r["stderr_log"].as_str().unwrap()).unwrap();
                assert_eq!(
                    log.matches("(most recent call first):").count(),
                    1,
                    "{case}: {mode}: {log}"
                );
            }
            // The stacks came first, then SIGTERM, whose handler saved and exited
            // within the grace period.
            let handles = t.result("handles");
            let out = std::fs::read_to_string(handles["stdout_log"].as_str().unwrap()).unwrap();
            assert_eq!(out, "started\nsaved\n", "{case}: {handles}");
        }
    }
}
