use super::*;

fn file(text: &str) -> (tempfile::TempDir, Result<ConfigFile, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    std::fs::write(&path, text).unwrap();
    let loaded = ConfigFile::load(&path);
    (dir, loaded)
}

const SAMPLE: &str = r#"# a comment
[profile.default]
timeout = "10m"
jobs = 2
sandbox = "on"

[profile.ci]
jobs = 4
retries = 3
env = { SEED = "7" }
retry-on = ["timed_out", "out_of_memory"]
fail-fast = true

[[profile.ci.overrides]]
filter = "*slow*"
timeout = "1h"

[[profile.default.overrides]]
filter = "pomdp"
retries = 0
"#;

#[test]
fn a_named_profile_sits_on_default_and_keeps_lines() {
    let (_d, f) = file(SAMPLE);
    let f = f.unwrap();
    assert_eq!(f.profiles(), vec!["default", "ci"]);
    let p = f.profile("ci").unwrap();
    let get = |k: &str| p.entries.iter().find(|e| e.key == k).unwrap();
    assert_eq!(get("jobs").value, Value::Text("4".into()));
    assert_eq!(get("jobs").origin.line, 8);
    assert_eq!(get("jobs").origin.profile, "ci");
    assert_eq!(get("timeout").value, Value::Text("10m".into()));
    assert_eq!(get("timeout").origin.line, 3);
    assert_eq!(get("timeout").origin.profile, "default");
    assert_eq!(get("fail-fast").value, Value::Bool(true));
    assert_eq!(
        get("env").value,
        Value::Map(vec![("SEED".into(), "7".into())])
    );
    assert_eq!(
        get("retry-on").value,
        Value::List(vec!["timed_out".into(), "out_of_memory".into()])
    );
    // The named profile's overrides come first.
    let filters: Vec<&str> = p.overrides.iter().map(|o| o.filter.as_str()).collect();
    assert_eq!(filters, vec!["*slow*", "pomdp"]);
    assert_eq!(p.overrides[0].origin.line, 14);
    assert_eq!(p.overrides[0].entries[0].key, "timeout");
    assert_eq!(p.overrides[0].entries[0].origin.line, 16);
    // `default` alone has its own values only.
    let d = f.profile("default").unwrap();
    assert!(d.entries.iter().all(|e| e.origin.profile == "default"));
    assert_eq!(d.overrides.len(), 1);
}

#[test]
fn unknown_profiles_and_top_level_keys_are_named() {
    let (_d, f) = file(SAMPLE);
    let err = f.unwrap().profile("nightly").unwrap_err().to_string();
    assert!(
        err.contains("nightly") && err.contains("default, ci"),
        "{err}"
    );
    let (_d, f) = file("[profile.default]\njobs = 1\n\n[profiles.x]\njobs = 2\n");
    let err = f.unwrap_err().to_string();
    assert!(err.contains(":4:") && err.contains("`profiles`"), "{err}");
}

#[test]
fn syntax_errors_and_odd_values_say_where() {
    let (_d, f) = file("[profile.default]\ntimeout = \n");
    let err = f.unwrap_err().to_string();
    assert!(
        err.contains("jax-runner.toml") && err.contains("line 2"),
        "{err}"
    );
    let (_d, f) = file("[profile.default]\njobs = 1\nwhen = 1979-05-27\n");
    let err = f.unwrap().profile("default").unwrap_err().to_string();
    assert!(err.contains(":3:") && err.contains("`when`"), "{err}");
    let (_d, f) = file("[profile.default]\n[[profile.default.overrides]]\ntimeout = \"1s\"\n");
    let err = f.unwrap().profile("default").unwrap_err().to_string();
    assert!(err.contains(":2:") && err.contains("filter"), "{err}");
}

#[test]
fn a_file_without_default_still_gives_default() {
    let (_d, f) = file("[profile.ci]\njobs = 1\n");
    let p = f.unwrap().profile("default").unwrap();
    assert!(p.entries.is_empty() && p.overrides.is_empty());
}
