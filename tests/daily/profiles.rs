//! `jax-runner.toml`: profiles, overrides, `JAX_RUNNER_*` variables, precedence and
//! provenance, and errors that name the file and line.

use super::*;

const CONFIG: &str = r#"[profile.default]
timeout = "2m"
retries = 0

[profile.ci]
timeout = "3m"
fail-fast = true
env = { FROM_PROFILE = "ci" }

[[profile.ci.overrides]]
filter = "*sleeper*"
timeout = "1s"
env = { SEED = "42" }
"#;

/// A tree with a sleeper (which times out under the override) and a script that
/// reports two variables, with `jax-runner.toml` written in the folder the runner
/// starts in.
fn tree() -> (Tree, tempfile::TempDir) {
    let t = Tree::new();
    t.write("s/jax/sleeper.py", "import time\ntime.sleep(30)\n");
    t.write(
        "r/jax/reporter.py",
        "import os\nprint('SEED=%s FROM_PROFILE=%s' % (os.environ.get('SEED'), os.environ.get('FROM_PROFILE')))\n",
    );
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("jax-runner.toml"), CONFIG).unwrap();
    (t, cwd)
}

fn setting<'a>(m: &'a Value, key: &str) -> (&'a str, &'a str) {
    let s = &m["run"]["settings"][key];
    (s["value"].as_str().unwrap(), s["source"].as_str().unwrap())
}

#[test]
fn a_profile_and_its_overrides_apply_and_say_where_from() {
    let (t, cwd) = tree();
    let out = t
        .cmd()
        .current_dir(cwd.path())
        .args(["--profile", "ci", "--sandbox", "off"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "the sleeper times out: {}", stderr(&out));
    let m = t.metrics();
    assert_eq!(m["run"]["profile"], "ci");
    let (value, source) = setting(&m, "timeout");
    assert_eq!(value, "3m");
    assert!(
        source.starts_with("profile ci (") && source.ends_with("jax-runner.toml:6)"),
        "{source}"
    );
    let (_, source) = setting(&m, "retries");
    assert!(source.starts_with("profile default ("), "{source}");
    assert_eq!(setting(&m, "device").1, "command line");
    assert_eq!(setting(&m, "grace"), ("10s", "default"));
    // The override: the sleeper got 1s and SEED; the reporter neither.
    let sleeper = t.result("sleeper");
    assert_eq!(sleeper["status"], "timed_out");
    assert_eq!(sleeper["timeout_s"], 1.0);
    let o = &sleeper["overrides"]["timeout"];
    assert_eq!(o["value"], "1s");
    assert!(
        o["source"]
            .as_str()
            .unwrap()
            .contains("override \"*sleeper*\" in profile ci"),
        "{o}"
    );
    let reporter = t.result("reporter");
    assert_eq!(reporter["timeout_s"], 180.0);
    assert!(reporter.get("overrides").is_none());
    let log = std::fs::read_to_string(t.results_dir().join("logs/reporter.stdout.log")).unwrap();
    assert!(log.contains("SEED=None FROM_PROFILE=ci"), "{log}");
}

#[test]
fn command_line_beats_environment_beats_profile() {
    let (t, cwd) = tree();
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = t
            .cmd()
            .current_dir(cwd.path())
            .envs(env.iter().copied())
            .args(["-k", "reporter"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        t.metrics()
    };
    let m = run(&[], &[]);
    assert_eq!(setting(&m, "timeout").0, "2m");
    let m = run(&[("JAX_RUNNER_TIMEOUT", "5m")], &[]);
    assert_eq!(
        setting(&m, "timeout"),
        ("5m", "environment (JAX_RUNNER_TIMEOUT)")
    );
    assert_eq!(t.result("reporter")["timeout_s"], 300.0);
    let m = run(&[("JAX_RUNNER_TIMEOUT", "5m")], &["--timeout", "7m"]);
    assert_eq!(setting(&m, "timeout"), ("7m", "command line"));
    // A variable selects the profile too, and a flag takes a boolean.
    let m = run(
        &[
            ("JAX_RUNNER_PROFILE", "ci"),
            ("JAX_RUNNER_NO_PREFLIGHT", "true"),
        ],
        &[],
    );
    assert_eq!(m["run"]["profile"], "ci");
    assert_eq!(
        setting(&m, "no-preflight"),
        ("true", "environment (JAX_RUNNER_NO_PREFLIGHT)")
    );
    // A command-line option beats a profile's per-script override of the same option.
    let out = t
        .cmd()
        .current_dir(cwd.path())
        .args(["--profile", "ci", "-k", "sleeper", "--timeout", "2s"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    assert_eq!(t.result("sleeper")["timeout_s"], 2.0);
}

#[test]
fn bad_keys_and_values_name_their_file_and_line() {
    let (t, cwd) = tree();
    let cases = [
        (
            "[profile.default]\njobs = 2\ntimout = \"1s\"\n",
            ":3:",
            "timout",
        ),
        ("[profile.default]\ntimeout = \"soon\"\n", ":2:", "timeout"),
        (
            "[profile.default]\n[[profile.default.overrides]]\nfilter = \"x\"\njobs = 3\n",
            ":4:",
            "jobs",
        ),
        ("[profiles.default]\njobs = 1\n", ":1:", "profiles"),
    ];
    for (text, line, key) in cases {
        let file = cwd.path().join("bad.toml");
        std::fs::write(&file, text).unwrap();
        let out = t
            .cmd()
            .args(["--config", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{text}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("bad.toml{line}")) && err.contains(key),
            "{text}\n{err}"
        );
        assert!(!t.root().join("execution_results").exists(), "{text}");
    }
    let out = t.cmd().env("JAX_RUNNER_JOBS", "many").output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("JAX_RUNNER_JOBS"), "{}", stderr(&out));
    // A value the checks refuse after parsing is blamed on its variable too.
    let out = t.cmd().env("JAX_RUNNER_JOBS", "0").output().unwrap();
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains("\"0\" in the variable JAX_RUNNER_JOBS: must be at least 1"),
        "{err}"
    );
    assert!(!t.root().join("execution_results").exists());
}

#[test]
fn misspelled_keys_and_variables_get_the_nearest_name() {
    let (t, cwd) = tree();
    let file = cwd.path().join("typo.toml");
    std::fs::write(&file, "[profile.default]\njobs = 2\ntimout = \"1s\"\n").unwrap();
    let out = t
        .cmd()
        .args(["--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains(
            "typo.toml:3: `timout` is not an option of jax-runner; did you mean \"timeout\"?"
        ),
        "{err}"
    );
    // An unknown variable is a warning, and the run goes on.
    let out = t
        .cmd()
        .current_dir(cwd.path())
        .args(["-k", "reporter"])
        .env("JAX_RUNNER_TIMOUT", "5m")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "JAX_RUNNER_TIMOUT is not a jax-runner variable; did you mean JAX_RUNNER_TIMEOUT?"
        ),
        "{err}"
    );
}

#[test]
fn the_readme_sample_config_is_valid_for_every_profile() {
    let t = Tree::new();
    t.fixture("ok_plain.py", "m/jax/pomdp_solver.py");
    t.fixture("ok_plain.py", "m/jax/model_large.py");
    let sample = repo().join("docs/jax-runner.toml");
    for profile in ["default", "ci", "quick"] {
        let out = t
            .cmd()
            .args(["--config", sample.to_str().unwrap(), "--profile", profile])
            .args(["--dry-run", "--events", "-"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{profile}: {}", stderr(&out));
        let planned: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(planned.len(), 2, "{profile}");
        let large = planned.iter().find(|e| e["id"] == "model_large").unwrap();
        let timeout = large["script"]["timeout_s"].as_f64().unwrap();
        let want = match profile {
            "ci" => 3600.0,
            "quick" => 120.0,
            _ => 1200.0,
        };
        assert_eq!(timeout, want, "{profile}");
    }
}

#[test]
fn variables_and_profiles_take_every_documented_form() {
    let (t, cwd) = tree();
    std::fs::write(
        cwd.path().join("forms.toml"),
        "[profile.default]\npreflight = false\n",
    )
    .unwrap();
    let token = "not-to-be-written-anywhere";
    let out = t
        .cmd()
        .current_dir(cwd.path())
        .args(["--config", "forms.toml", "-k", "reporter"])
        // A repeatable option takes a comma-separated list; flags take on/off words.
        .env("JAX_RUNNER_ENV", "SEED=5,FROM_PROFILE=env")
        .env("JAX_RUNNER_FAIL_FAST", "off")
        .env("JAX_RUNNER_RAY_TOKEN", token)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let log = std::fs::read_to_string(t.results_dir().join("logs/reporter.stdout.log")).unwrap();
    assert!(log.contains("SEED=5 FROM_PROFILE=env"), "{log}");
    let m = t.metrics();
    // `preflight = false` is `--no-preflight`.
    let (value, source) = setting(&m, "no-preflight");
    assert_eq!(value, "true");
    assert!(
        source.starts_with("profile default (") && source.ends_with("forms.toml:2)"),
        "{source}"
    );
    assert_eq!(
        setting(&m, "fail-fast"),
        ("off", "environment (JAX_RUNNER_FAIL_FAST)")
    );
    assert_eq!(setting(&m, "ray-token").0, "(hidden)");
    let text = std::fs::read_to_string(t.results_dir().join("performance_metrics.json")).unwrap();
    assert!(!text.contains(token), "the token reached the metrics");
}
