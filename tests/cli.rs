//! The command line itself: help, exit codes, `list`, and the default subcommand.

mod common;

use common::*;

#[test]
fn help_documents_exit_codes() {
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Exit codes",
        "130",
        "no scripts found",
        "--device",
        "--timeout",
    ] {
        assert!(text.contains(needle), "help lacks {needle}: {text}");
    }
}

#[test]
fn list_shows_scripts_without_running_them() {
    let t = Tree::new();
    t.fixture("fail_exception.py", "m/jax/fail_exception.py");
    t.write("m/helper.py", "import jax.numpy as jnp\n");
    t.write("m/other.py", "import numpy\n");
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["list", "--json", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let scripts = doc["scripts"].as_array().unwrap();
    assert_eq!(scripts.len(), 2);
    // Path order: m/helper.py sorts before m/jax/….
    assert_eq!(scripts[0]["id"], "helper");
    assert_eq!(scripts[0]["discovered_by"], "imports_jax");
    assert_eq!(scripts[1]["id"], "fail_exception");
    assert_eq!(scripts[1]["discovered_by"], "jax_folder");
    assert!(!t.results_dir().exists(), "list writes nothing");

    let table = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["list", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("ID") && text.contains("m/helper.py") && text.contains("2 script(s)"),
        "{text}"
    );
}

#[test]
fn list_of_an_empty_tree_exits_3() {
    let t = Tree::new();
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["list", "--output-dir"])
        .arg(t.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 3);
}

#[cfg(feature = "integration")]
#[test]
fn the_run_subcommand_and_the_default_are_the_same() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("run")
        .arg("--output-dir")
        .arg(t.dir.path())
        .arg("--python")
        .arg(python())
        .args(["--device", "cpu", "-q"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.result("ok_plain")["discovered_by"], "jax_folder");
    // -q: the summary line alone (issue 27), as nextest's final line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("1 of 1 succeeded"), "{stdout}");
}

#[cfg(feature = "integration")]
#[test]
fn python_without_jax_is_exit_2_with_the_fix() {
    let t = Tree::new();
    t.fixture("ok_jax.py", "m/jax/ok_jax.py");
    let nojax = bare_venv(&t.root().join("nojax-venv"));
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--output-dir")
        .arg(t.dir.path())
        .arg("--python")
        .arg(&nojax)
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains("cannot import jax") && err.contains("-m pip install 'jax==0.10.2'"),
        "{err}"
    );
}

#[test]
fn option_values_are_checked_before_anything_runs() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    for bad in [["--fallback", "tpu"], ["--sandbox", "maybe"]] {
        let out = assert_cmd::Command::cargo_bin("jax-runner")
            .unwrap()
            .arg("--output-dir")
            .arg(t.dir.path())
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(bad[1]), "{}", stderr(&out));
        assert!(!t.results_dir().exists(), "nothing was written");
    }
}

#[test]
fn a_negative_duration_says_it_must_be_positive() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    for option in ["--timeout", "--grace", "--retry-delay"] {
        let out = assert_cmd::Command::cargo_bin("jax-runner")
            .unwrap()
            .arg("--output-dir")
            .arg(t.dir.path())
            .args([option, "-5s"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{option}: {err}");
        assert!(
            err.contains(option) && err.contains("must be positive"),
            "{option}: {err}"
        );
        assert!(!err.contains("unexpected argument"), "{err}");
    }
}

/// `--jobs` past what the machine's descriptors and memory hold is lowered, and the
/// run says so (before, 10,000 jobs ran out of descriptors and failed scripts).
#[cfg(feature = "integration")]
#[test]
fn too_many_jobs_are_lowered_with_a_warning() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = t.cmd().args(["--jobs", "10000000"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--jobs 10000000 lowered to"), "{err}");
    assert_eq!(t.result("ok_plain")["status"], "succeeded");
}

/// `--device cuda` is what jax users type: it means the GPU, not a typo to correct.
#[cfg(feature = "integration")]
#[test]
fn cuda_is_an_alias_of_gpu() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = t
        .cmd()
        .args(["--device", "cuda", "--fallback", "cpu"])
        .env("JAX_RUNNER_GPU_COUNT", "0")
        .output()
        .unwrap();
    assert_ne!(code(&out), 2, "accepted: {}", stderr(&out));
    assert_eq!(t.result("ok_plain")["device_requested"], "gpu");
}

/// Warnings and errors carry cargo's tags, without colour codes when `NO_COLOR` is set
/// or `--color never` is given, and never Rust debug text.
#[cfg(feature = "integration")]
#[test]
fn terminal_lines_are_tagged_like_cargo_and_colourless_on_request() {
    let t = Tree::new();
    t.fixture("signal_death.py", "m/jax/signal_death.py");
    for (flag, env) in [("--color=never", None), ("--color=auto", Some("1"))] {
        let mut cmd = t.cmd();
        cmd.args([flag, "-v", "--retries", "0"]);
        if let Some(v) = env {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains('\x1b'), "{flag}: colour codes: {err:?}");
        assert!(!err.contains(" INFO ") && !err.contains("DEBUG "), "{err}");
        assert!(!err.contains("Some("), "Rust debug text: {err}");
        assert!(err.contains("debug: attempt 1 of signal_death"), "{err}");
        assert!(err.contains("killed by SIGSEGV"), "{err}");
    }
    let out = t.cmd().args(["--color=always", "-v"]).output().unwrap();
    assert!(stderr(&out).contains("\x1b["), "--color always colours");
}

/// A `--python` that is no Python gets a short error that says what to do, not the
/// probe's whole program echoed back.
#[test]
fn a_python_that_is_not_one_gets_a_short_error() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/ok_plain.py");
    let out = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .arg("--output-dir")
        .arg(t.root())
        .args(["--python", "/bin/ls"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("is it a Python 3 interpreter?"), "{err}");
    assert!(
        !err.contains("interpreter probe"),
        "the probe's text: {err}"
    );
    assert!(err.len() < 600, "{err}");
}

/// Every long option the man page names: the man page renders every option clap knows,
/// whether `-h` shows it or not, so it is a list this test does not keep by hand.
fn every_option() -> Vec<String> {
    let man = help_text(&["man"]).replace("\\-", "-");
    let synopsis = man
        .lines()
        .skip_while(|l| !l.starts_with(".SH SYNOPSIS"))
        .nth(1)
        .unwrap()
        .to_string();
    let mut options: Vec<String> = synopsis
        .split("\\fB")
        .filter_map(|s| s.strip_prefix("--"))
        .map(|s| format!("--{}", s.split("\\fR").next().unwrap()))
        .collect();
    options.dedup();
    assert!(options.len() > 30, "{synopsis}");
    options
}

#[test]
fn short_help_fits_a_screen_and_long_help_lists_every_option() {
    let short = help_text(&["-h"]);
    let lines = short.lines().count();
    assert!(lines <= 48, "`-h` is {lines} lines (at most 48):\n{short}");
    // The options of the README's daily commands.
    for daily in [
        "--output-dir",
        "--filter",
        "--exclude",
        "--device",
        "--jobs",
        "--dry-run",
        "--resume",
        "--rerun-failed",
        "--fail-fast",
        "-x,",
        "-q,",
        "--no-capture",
        "--profile",
        "--export-csv",
        "--export-json",
        "--export-markdown",
        "--export-junit",
    ] {
        assert!(short.contains(daily), "`-h` lacks {daily}:\n{short}");
    }
    assert!(
        short.contains("Exit codes") && short.contains("130"),
        "{short}"
    );
    assert!(
        !short.contains("--ray-token"),
        "`-h` keeps to daily options:\n{short}"
    );

    let long = help_text(&["--help"]);
    let run = help_text(&["run", "--help"]);
    for option in every_option() {
        assert!(long.contains(&option), "`--help` lacks {option}");
        if !["--help", "--version"].contains(&option.as_str()) {
            assert!(run.contains(&option), "`run --help` lacks {option}");
        }
    }
}

#[test]
fn the_man_page_describes_every_option() {
    let man = help_text(&["man"]);
    let lines: Vec<&str> = man.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        // An option's entry: `.TP`, the option's line, then its description.
        if *line == ".TP" && lines[i + 1].starts_with("\\fB\\-") {
            let text = lines.get(i + 2).copied().unwrap_or_default();
            assert!(
                !text.is_empty() && !text.starts_with('.'),
                "the man page has no text for {}",
                lines[i + 1]
            );
        }
    }
}

/// A reader that stops early (`list --json | head -1`) ends the listing quietly and
/// successfully: no panic, no exit 101, nothing on stderr.
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    use std::io::Read;
    let t = Tree::new();
    for i in 0..400 {
        t.write(&format!("m{i:03}/jax/model_{i:03}.py"), "import jax\n");
    }
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
        .args(["list", "--json", "--output-dir"])
        .arg(t.root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe's read end is closed here: the rest of the listing has no reader.
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `-k` speaks pytest's language: and, or, not, parentheses, any case.
#[test]
fn k_takes_and_or_not_in_any_case() {
    let t = Tree::new();
    for name in ["pomdp_small", "pomdp_large", "general"] {
        t.write(&format!("m/jax/{name}.py"), "import jax\n");
    }
    let listed = |k: &str| -> Vec<String> {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
            .args(["list", "--json", "-k", k, "--output-dir"])
            .arg(t.root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{k}: {}", stderr(&out));
        script_ids(&serde_json::from_slice(&out.stdout).unwrap())
    };
    assert_eq!(listed("POMDP and not large"), ["pomdp_small"]);
    assert_eq!(listed("general or large"), ["general", "pomdp_large"]);
    assert_eq!(listed("not (small or large)"), ["general"]);
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
        .args(["list", "-k", "pomdp and", "--output-dir"])
        .arg(t.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ends where a word was expected"),
        "{}",
        stderr(&out)
    );
}
