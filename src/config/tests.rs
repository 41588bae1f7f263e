use super::*;
use crate::model::FailureClass;
use crate::model::Platform;

fn opts(dir: &Path) -> RunOptions {
    test_options(dir)
}

#[test]
fn missing_output_dir_names_the_path() {
    let err = RunConfig::from_options(opts(Path::new("/no/such/folder"))).unwrap_err();
    assert!(matches!(err, ConfigError::OutputDirMissing { .. }));
    assert!(err.to_string().contains("/no/such/folder"));
}

#[test]
fn default_results_dir_is_created_inside_output() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RunConfig::from_options(opts(tmp.path())).unwrap();
    assert!(cfg.results_dir.ends_with("execution_results/jax"));
    assert!(cfg.results_dir.is_dir());
    assert_eq!(cfg.compilation_cache, CompilationCache::Off);
}

#[test]
fn a_link_on_the_results_path_is_refused_before_anything_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    for (link, folder) in [
        ("execution_results", "results folder"),
        ("12_execute_output", "GNN step-12 folder"),
    ] {
        let tree = tmp.path().join(link.replace('_', "-"));
        std::fs::create_dir(&tree).unwrap();
        let tree = tree.canonicalize().unwrap();
        std::os::unix::fs::symlink(outside.path(), tree.join(link)).unwrap();
        let err = RunConfig::from_options(opts(&tree)).unwrap_err();
        assert!(
            matches!(err, ConfigError::ResultsLink { ref link, .. } if link.parent() == Some(&tree)),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("failed to use the {folder}: `")),
            "{text}"
        );
        assert!(
            text.contains(&format!("(to `{}`)", outside.path().display())),
            "{text}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_dir(&tree).unwrap().count(),
            1,
            "made something"
        );
    }
}

#[test]
fn a_results_dir_the_user_names_is_followed_when_it_is_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tempfile::tempdir().unwrap();
    let named = tmp.path().join("named");
    std::os::unix::fs::symlink(real.path(), &named).unwrap();
    let tree = tmp.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let mut o = opts(&tree);
    o.discover.results_dir = Some(named);
    let cfg = RunConfig::from_options(o).unwrap();
    assert_eq!(cfg.results_dir, real.path().canonicalize().unwrap());
}

#[test]
fn zero_jobs_and_zero_timeout_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path());
    o.jobs = Some(0);
    assert!(RunConfig::from_options(o).is_err());
    let mut o = opts(tmp.path());
    o.timeout = Duration::ZERO;
    assert!(RunConfig::from_options(o).is_err());
}

#[test]
fn retry_classes_and_fallback_are_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path());
    o.retry_on = Some(vec!["timed_out,out_of_memory".into()]);
    let cfg = RunConfig::from_options(o).unwrap();
    assert!(cfg.retry.retry_on.contains(&FailureClass::TimedOut));
    assert!(!cfg.retry.retry_on.contains(&FailureClass::KilledBySignal));
    let mut o = opts(tmp.path());
    o.retry_on = Some(vec!["flaky".into()]);
    let err = RunConfig::from_options(o).unwrap_err().to_string();
    assert!(err.contains("script_error"), "{err}");
    // --fallback is a value enum now: clap refuses `tpu` (tests/cli.rs).
}

#[test]
fn env_options_are_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path());
    o.env = vec!["SEED=7".into(), "EMPTY=".into()];
    let cfg = RunConfig::from_options(o).unwrap();
    assert_eq!(
        cfg.extra_env,
        vec![("SEED".into(), "7".into()), ("EMPTY".into(), String::new())]
    );
    for bad in ["NOEQUALS", "1X=2", "A-B=1"] {
        let mut o = opts(tmp.path());
        o.env = vec![bad.into()];
        assert!(RunConfig::from_options(o).is_err(), "{bad}");
    }
    let mut o = opts(tmp.path());
    o.memory_limit = Some(1024);
    assert!(RunConfig::from_options(o).is_err());
}

#[test]
fn gpu_share_takes_a_number_or_auto() {
    use super::validate::gpu_share;
    assert_eq!(gpu_share(None).unwrap(), None);
    assert_eq!(gpu_share(Some("auto")).unwrap(), Some(GpuShare::Auto));
    assert_eq!(
        gpu_share(Some("4")).unwrap(),
        Some(GpuShare::Fixed(NonZeroUsize::new(4).unwrap()))
    );
    for bad in ["0", "-1", "65", "two"] {
        let err = gpu_share(Some(bad)).unwrap_err().to_string();
        assert!(err.contains("--gpu-share"), "{bad}: {err}");
    }
}

#[test]
fn auto_resolves_by_gpu_count() {
    assert_eq!(Device::Auto.resolve(0), Platform::Cpu);
    assert_eq!(Device::Auto.resolve(2), Platform::Gpu);
    assert_eq!(Device::Gpu.resolve(0), Platform::Gpu);
    assert_eq!(Platform::Gpu.jax_platforms(), "cuda");
}

#[test]
fn an_unwritable_results_folder_says_how_to_write_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a_file");
    std::fs::write(&file, "").unwrap();
    let mut o = opts(tmp.path());
    o.discover.results_dir = Some(file.join("results"));
    let err = RunConfig::from_options(o).unwrap_err().to_string();
    assert!(err.contains("pass --results-dir DIR"), "{err}");
    let lock = ConfigError::Lock {
        path: file.clone(),
        source: std::io::Error::from_raw_os_error(30),
    };
    assert!(
        lock.to_string().contains("pass --results-dir DIR"),
        "{lock}"
    );
}

#[test]
fn fail_fast_now_is_max_fail_one_that_stops_running_scripts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path());
    o.fail_fast = crate::config::FailFast::Now;
    let cfg = RunConfig::from_options(o).unwrap();
    assert_eq!(cfg.max_fail.map(NonZeroUsize::get), Some(1));
    assert!(cfg.fail_now);
}

/// `--python NAME` is found as a shell finds it: a bare name on `PATH` (the first
/// executable of that name), a path as given; a name found nowhere stays as given.
#[test]
fn a_bare_python_name_is_looked_up_on_path() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::write(a.join("py-x"), "not executable").unwrap();
    std::fs::write(b.join("py-x"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(b.join("py-x"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths([&a, &b]).unwrap();
    let found = crate::config::program_path(Path::new("py-x"), Some(&path));
    assert_eq!(found, b.join("py-x"));
    let missing = crate::config::program_path(Path::new("py-none"), Some(&path));
    assert_eq!(missing, Path::new("py-none"));
    let given = crate::config::program_path(Path::new("./py-x"), Some(&path));
    assert!(given.is_absolute() && given.ends_with("py-x"));
}

/// pytest's spelling of "only what failed last time" is accepted.
#[test]
fn last_failed_is_the_rerun_of_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_string_lossy().into_owned();
    for flag in ["--last-failed", "--lf", "--rerun-failed"] {
        let o = RunOptions::from_args(["--output-dir", &dir, flag]).unwrap();
        assert!(o.rerun_failed, "{flag}");
    }
}
