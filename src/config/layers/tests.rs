use std::sync::Arc;

use clap::{Args, Command, FromArgMatches};

use super::*;
use crate::config::profile::ConfigFile;
use crate::config::{RunConfig, RunOptions};

/// A run's options from `args`, `vars` and the profile `text` (its `default`), with
/// every option's source.
fn layered(args: &[&str], vars: &[(&str, &str)], text: &str) -> Result<RunOptions, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jax-runner.toml");
    std::fs::write(&file, text).unwrap();
    let profile = ConfigFile::load(&file)?.profile("default")?;
    let env = Environment::from_pairs(vars.iter().copied());
    let cmd = RunOptions::augment_args(Command::new("run"));
    let known: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    check_keys(&profile, &known)?;
    let matches = cmd
        .try_get_matches_from(std::iter::once("run").chain(args.iter().copied()))
        .unwrap();
    let mut opts = RunOptions::from_arg_matches(&matches).unwrap();
    let mut layers = Layers::new(&matches, &env, Some(&profile), &known);
    opts.layer(&mut layers)?;
    let (settings, sources) = layers.finish();
    opts.layered.settings = settings;
    opts.layered.sources = sources;
    opts.layered.environment = Arc::new(env);
    Ok(opts)
}

fn setting(o: &RunOptions, long: &str) -> (String, String) {
    let s = &o.layered.settings[long];
    (s.value.clone(), s.source.clone())
}

#[test]
fn command_line_beats_variable_beats_profile_beats_default() {
    let profile = "[profile.default]\ntimeout = \"2m\"\nretries = 0\n";
    let o = layered(&[], &[], profile).unwrap();
    assert_eq!(o.timeout.as_secs(), 120);
    assert_eq!(setting(&o, "timeout").0, "2m");
    assert!(setting(&o, "timeout").1.ends_with("jax-runner.toml:2)"));
    assert_eq!(setting(&o, "grace"), ("10s".into(), "default".into()));
    let o = layered(&[], &[("JAX_RUNNER_TIMEOUT", "5m")], profile).unwrap();
    assert_eq!(o.timeout.as_secs(), 300);
    let source = "environment (JAX_RUNNER_TIMEOUT)".to_string();
    assert_eq!(setting(&o, "timeout"), ("5m".into(), source));
    let o = layered(
        &["--timeout", "7m"],
        &[("JAX_RUNNER_TIMEOUT", "5m")],
        profile,
    )
    .unwrap();
    assert_eq!(o.timeout.as_secs(), 420);
    assert_eq!(setting(&o, "timeout"), ("7m".into(), "command line".into()));
    assert_eq!(o.retries, 0);
}

#[test]
fn every_source_parses_with_the_same_types() {
    let profile =
        "[profile.default]\npreflight = false\nsandbox = \"landlock\"\nenv = { A = \"1\" }\n";
    let vars = [
        ("JAX_RUNNER_DEVICE", "cuda"),
        ("JAX_RUNNER_MEMORY_LIMIT", "2G"),
        ("JAX_RUNNER_ENV_PASS", "HOME,USER"),
        ("JAX_RUNNER_FAIL_FAST", "off"),
        ("JAX_RUNNER_RAY_TOKEN", "secret"),
    ];
    let o = layered(&[], &vars, profile).unwrap();
    assert_eq!(o.device, crate::model::Device::Gpu);
    assert_eq!(o.memory_limit, Some(2 << 30));
    assert_eq!(o.env_pass, ["HOME", "USER"]);
    assert_eq!(o.env, ["A=1"]);
    assert!(o.no_preflight && (o.fail_fast == crate::config::FailFast::Off));
    assert_eq!(o.sandbox, crate::model::SandboxMode::Landlock);
    assert_eq!(setting(&o, "no-preflight").0, "true");
    assert_eq!(setting(&o, "ray-token").0, "(hidden)");
    assert_eq!(o.cluster.ray_token.as_deref(), Some("secret"));
}

#[test]
fn the_slurm_options_come_from_variables_and_profiles_too() {
    let profile = "[profile.default]\nbackend = \"slurm\"\nslurm-qos = \"short\"\nslurm-arg = [\"--constraint=a100\", \"--exclusive\"]\n";
    let vars = [
        ("JAX_RUNNER_SLURM_PARTITION", "gpu"),
        ("JAX_RUNNER_SLURM_ACCOUNT", "lab"),
    ];
    let o = layered(&[], &vars, profile).unwrap();
    let c = &o.cluster;
    assert_eq!(c.backend, crate::config::Backend::Slurm);
    assert_eq!(c.slurm_partition.as_deref(), Some("gpu"));
    assert_eq!(c.slurm_account.as_deref(), Some("lab"));
    assert_eq!(c.slurm_qos.as_deref(), Some("short"));
    assert_eq!(c.slurm_arg, ["--constraint=a100", "--exclusive"]);
    assert_eq!(
        setting(&o, "slurm-partition").1,
        "environment (JAX_RUNNER_SLURM_PARTITION)"
    );
    // The command line wins, as for every option.
    let o = layered(&["--slurm-partition", "debug"], &vars, profile).unwrap();
    assert_eq!(o.cluster.slurm_partition.as_deref(), Some("debug"));
}

#[test]
fn a_bad_value_is_blamed_on_its_variable_or_its_line() {
    let err = layered(&[], &[("JAX_RUNNER_JOBS", "many")], "").unwrap_err();
    assert!(err.to_string().contains("JAX_RUNNER_JOBS"), "{err}");
    let err = layered(&[], &[], "[profile.default]\n\ntimeout = \"soon\"\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("jax-runner.toml:3: `timeout`") && text.contains("soon"),
        "{text}"
    );
    let err = layered(&[], &[("JAX_RUNNER_SANDBOX", "tight")], "").unwrap_err();
    assert!(
        err.to_string().contains("auto, on, bwrap, landlock, off"),
        "{err}"
    );
}

#[test]
fn zero_jobs_from_a_variable_names_the_variable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let args = ["--output-dir", dir, "--dry-run"];
    let o = layered(&args, &[("JAX_RUNNER_JOBS", "0")], "").unwrap();
    let err = RunConfig::from_options(o).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid value \"0\" in the variable JAX_RUNNER_JOBS: must be at least 1 (for --jobs)"
    );
    let o = layered(&args, &[], "[profile.default]\nmax-procs = 0\n").unwrap();
    let err = RunConfig::from_options(o).unwrap_err().to_string();
    assert!(err.contains("jax-runner.toml:2: `max-procs`"), "{err}");
    let o = layered(&["--output-dir", dir, "--dry-run", "--jobs", "0"], &[], "").unwrap();
    let err = RunConfig::from_options(o).unwrap_err().to_string();
    assert!(err.contains("for --jobs"), "{err}");
}

#[test]
fn a_profile_gives_way_to_a_conflicting_higher_option() {
    let profile = "[profile.default]\nfail-fast = true\n";
    let o = layered(&["--max-fail", "3"], &[], profile).unwrap();
    assert_eq!(o.fail_fast, crate::config::FailFast::Off);
    assert_eq!(o.max_fail, Some(3));
    assert!(setting(&o, "fail-fast")
        .1
        .starts_with("default (a higher layer"));
    let o = layered(&[], &[("JAX_RUNNER_MAX_FAIL", "2")], profile).unwrap();
    assert_eq!(o.fail_fast, crate::config::FailFast::Off);
    let err = layered(&["--fail-fast"], &[("JAX_RUNNER_MAX_FAIL", "2")], "").unwrap_err();
    assert!(err.to_string().contains("JAX_RUNNER_MAX_FAIL"), "{err}");
}

#[test]
fn a_misspelled_key_gets_the_nearest_option() {
    let err = layered(&[], &[], "[profile.default]\njobs = 2\ntimout = \"1s\"\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.ends_with(":3: `timout` is not an option of jax-runner; did you mean \"timeout\"?"),
        "{text}"
    );
    let err = layered(&[], &[], "[profile.default]\nsparkle = 1\n").unwrap_err();
    assert!(err.to_string().contains("by their long name"), "{err}");
}

#[test]
fn a_bad_duration_names_its_source_and_a_bare_number_is_seconds() {
    let err = layered(&[], &[("JAX_RUNNER_TIMEOUT", "banana")], "").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("JAX_RUNNER_TIMEOUT") && text.contains("90s"),
        "{text}"
    );
    let err = layered(&[], &[], "[profile.default]\ntimeout = \"banana\"\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("jax-runner.toml:2") && text.contains("`timeout`"),
        "{text}"
    );
    let o = layered(&[], &[("JAX_RUNNER_TIMEOUT", "90")], "").unwrap();
    assert_eq!(o.timeout.as_secs(), 90);
}

#[test]
fn fail_fast_records_its_value_from_any_source() {
    use crate::config::FailFast;
    let o = layered(&["--fail-fast=now"], &[], "").unwrap();
    assert_eq!(o.fail_fast, FailFast::Now);
    assert_eq!(
        setting(&o, "fail-fast"),
        ("now".into(), "command line".into())
    );
    let o = layered(&["-x"], &[], "").unwrap();
    assert_eq!(setting(&o, "fail-fast").0, "wait");
    let o = layered(&[], &[("JAX_RUNNER_FAIL_FAST", "1")], "").unwrap();
    assert_eq!(
        (o.fail_fast, setting(&o, "fail-fast").0),
        (FailFast::Wait, "wait".into())
    );
    let o = layered(&[], &[], "[profile.default]\nfail-fast = \"now\"\n").unwrap();
    assert_eq!(o.fail_fast, FailFast::Now);
    assert_eq!(setting(&o, "fail-fast").0, "now");
    assert_eq!(
        setting(&layered(&[], &[], "").unwrap(), "fail-fast").0,
        "off"
    );
}
