use std::path::PathBuf;

use super::*;
use crate::config::profile::{Entry, Origin};

fn origin(line: usize) -> Origin {
    Origin {
        file: PathBuf::from("jax-runner.toml"),
        line,
        profile: "ci".into(),
    }
}

fn table(filter: &str, entries: &[(&str, Value)]) -> OverrideEntry {
    OverrideEntry {
        filter: filter.into(),
        entries: entries
            .iter()
            .enumerate()
            .map(|(i, (k, v))| Entry {
                key: k.to_string(),
                value: v.clone(),
                origin: origin(10 + i),
            })
            .collect(),
        origin: origin(9),
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

fn config(overrides: &[OverrideEntry]) -> (tempfile::TempDir, crate::config::RunConfig) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = crate::config::test_options(dir.path());
    opts.layered.overrides = overrides.to_vec();
    opts.env = vec!["BASE=1".into(), "SEED=0".into()];
    let config = crate::config::RunConfig::from_options(opts).unwrap();
    (dir, config)
}

#[test]
fn the_first_match_wins_per_setting() {
    let (_d, c) = config(&[
        table("*slow*", &[("timeout", text("1h"))]),
        table("model", &[("timeout", text("5s")), ("retries", text("3"))]),
    ]);
    let s = settings_for(&c, "model_slow", Path::new("m/jax/model_slow.py"));
    assert_eq!(s.timeout, Duration::from_secs(3600));
    assert_eq!(s.retries, 3, "a later match still sets what the first left");
    assert!(s.overridden["timeout"].source.contains("\"*slow*\""));
    assert!(s.overridden["retries"].source.contains("\"model\""));
    let s = settings_for(&c, "other", Path::new("o/jax/other.py"));
    assert_eq!(s.timeout, c.timeout);
    assert!(s.overridden.is_empty());
}

#[test]
fn env_merges_over_the_runs_and_device_picks_the_platform() {
    let env = Value::Map(vec![("SEED".into(), "7".into())]);
    let (_d, c) = config(&[table("a", &[("env", env), ("device", text("cpu"))])]);
    let s = settings_for(&c, "a", Path::new("a.py"));
    assert_eq!(
        s.env,
        vec![("BASE".into(), "1".into()), ("SEED".into(), "7".into())]
    );
    assert_eq!(s.platform(Platform::Gpu), Platform::Cpu);
    let s = settings_for(&c, "b", Path::new("b.py"));
    assert_eq!(s.platform(Platform::Gpu), Platform::Gpu);
}

#[test]
fn a_higher_layer_beats_an_override() {
    let (_d, mut c) = config(&[table("a", &[("timeout", text("1s"))])]);
    c.settings.insert(
        "timeout".into(),
        Setting {
            value: "30m".into(),
            source: "command line".into(),
        },
    );
    let s = settings_for(&c, "a", Path::new("a.py"));
    assert_eq!(s.timeout, c.timeout);
    assert!(s.overridden.is_empty());
}

#[test]
fn bad_override_values_name_the_line() {
    for (key, value, want) in [
        ("timeout", text("soon"), "duration"),
        ("retries", text("-1"), "whole number"),
        ("device", text("npu"), "auto, cpu, gpu"),
        ("memory-limit", text("lots"), "unit"),
        ("env", text("A=1"), "table"),
        ("jobs", text("2"), "cannot be set per script"),
    ] {
        let err = Override::parse(&table("x", &[(key, value)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("jax-runner.toml:10") && err.contains(key) && err.contains(want),
            "{key}: {err}"
        );
    }
    let err = Override::parse(&table("[", &[])).unwrap_err().to_string();
    assert!(err.contains(":9:") && err.contains("glob"), "{err}");
}
