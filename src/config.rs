//! The validated run configuration: what the CLI becomes before the core sees it.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ConfigError;
use crate::model::FailureClass;
use crate::model::{Device, Reuse, SandboxMode};
use crate::retry::RetryPolicy;

/// Where the persistent XLA compilation cache lives, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompilationCache {
    Off,
    Dir(PathBuf),
}

impl CompilationCache {
    /// The folder used when `--compilation-cache` names none (unsandboxed runs; a
    /// sandboxed run keeps its own beside it).
    pub fn default_dir() -> PathBuf {
        crate::paths::cache_dir().join("jax-compilation-cache")
    }
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The pipeline output tree to search (absolute).
    pub output_dir: PathBuf,
    /// Where results, logs and metrics go (absolute, created).
    pub results_dir: PathBuf,
    /// The folders this run created for `results_dir` (innermost first): a run that
    /// finds nothing to run removes them again rather than leave empty reports.
    pub created_dirs: Vec<PathBuf>,
    pub device: Device,
    pub recursive: bool,
    /// Parallel scripts; `None` picks the default for the platform.
    pub jobs: Option<NonZeroUsize>,
    /// Wall-clock limit of one attempt.
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping a script.
    pub grace: Duration,
    /// `--python`, when given.
    pub python: Option<PathBuf>,
    pub compilation_cache: CompilationCache,
    pub retry: RetryPolicy,
    /// Move GPU scripts to the CPU when the GPU environment fails (`--fallback cpu`).
    pub fallback_to_cpu: bool,
    /// Cap on each log file, keeping head and tail.
    pub max_log_bytes: Option<u64>,
    /// Inspect the environment (doctor) once before the run.
    pub preflight: bool,
    pub sandbox: SandboxMode,
    /// `--memory-limit`, bytes.
    pub memory_limit: Option<u64>,
    /// `--max-procs`.
    pub max_procs: Option<u32>,
    /// `--env KEY=VALUE`.
    pub extra_env: Vec<(String, String)>,
    /// `--env-pass NAME`.
    pub pass_env: Vec<String>,
    /// Also write GNN's step-12 layout.
    pub gnn_layout: bool,
    /// GNN's step-12 folder (`<tree>/12_execute_output`): beside `11_render_output`,
    /// also when `--output-dir` is the render folder itself. Never searched.
    pub step12_dir: PathBuf,
    pub warm_start: WarmStart,
    /// `--resume` / `--rerun-failed`.
    pub reuse: Reuse,
    /// `--profile`: a jax.profiler trace per script.
    pub profile: bool,
    /// `--backend ray`: the cluster's dashboard address and token.
    pub ray: Option<RayOptions>,
    /// This run's unique id (see [`crate::paths::run_id`]).
    pub run_id: String,
    /// The runner's command line, as it was started.
    pub argv: Vec<String>,
}

/// Where a Ray cluster is.
#[derive(Debug, Clone)]
pub struct RayOptions {
    /// `http://HOST:8265`.
    pub address: String,
    /// Bearer token for clusters with token authentication.
    pub token: Option<String>,
    /// `--ray-max-return`: the largest data folder a job sends back, bytes.
    pub max_return: u64,
}

/// `--warm-start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmStart {
    /// Wherever it can be done, inside the sandbox too.
    Auto,
    On,
    Off,
}

/// The raw choices from the edge, before validation.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub output_dir: PathBuf,
    pub results_dir: Option<PathBuf>,
    pub device: Device,
    pub recursive: bool,
    pub jobs: Option<usize>,
    pub timeout: Duration,
    pub grace: Duration,
    pub python: Option<PathBuf>,
    /// `None` means the default folder in the user cache; `Some("off")` disables it.
    pub compilation_cache: Option<String>,
    /// Retries after the first attempt.
    pub retries: u32,
    /// Failure class names to retry; `None` keeps the default set.
    pub retry_on: Option<Vec<String>>,
    /// Delay before the first retry (doubles after each).
    pub retry_delay: Duration,
    /// `--fallback cpu` (or `none`).
    pub fallback_to_cpu: bool,
    pub max_log_bytes: Option<u64>,
    pub preflight: bool,
    pub sandbox: SandboxMode,
    pub memory_limit: Option<u64>,
    pub max_procs: Option<u32>,
    /// `KEY=VALUE` strings.
    pub env: Vec<String>,
    pub env_pass: Vec<String>,
    /// `Some(true)`: GNN layout; `Some(false)`: plain; `None`: when the tree holds
    /// `11_render_output`.
    pub gnn_layout: Option<bool>,
    pub warm_start: WarmStart,
    pub reuse: Reuse,
    pub profile: bool,
    /// `Some(address)` for `--backend ray`.
    pub ray_address: Option<String>,
    pub ray_token: Option<String>,
    /// `--ray-max-return`, bytes.
    pub ray_max_return: u64,
}

impl RunConfig {
    /// Validates the options; creates the results folder.
    pub fn from_options(opts: RunOptions) -> Result<Self, ConfigError> {
        let output_dir = validate_output_dir(&opts.output_dir)?;
        let tree = PipelineTree::of(&output_dir);
        let (results_dir, created_dirs) = results_dir(opts.results_dir.as_deref(), &tree)?;
        let jobs = match opts.jobs {
            None => None,
            Some(n) => Some(
                NonZeroUsize::new(n).ok_or_else(|| invalid("--jobs", n, "must be at least 1"))?,
            ),
        };
        validate_limits(&opts)?;
        let compilation_cache = match opts.compilation_cache.as_deref() {
            Some("off") | Some("none") => CompilationCache::Off,
            Some(dir) => CompilationCache::Dir(absolute(Path::new(dir))),
            None => CompilationCache::Dir(CompilationCache::default_dir()),
        };
        Ok(RunConfig {
            run_id: crate::paths::run_id(std::time::SystemTime::now()),
            argv: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            retry: RetryPolicy {
                retries: opts.retries,
                retry_on: retry_on(opts.retry_on.as_deref())?,
                base_delay: opts.retry_delay,
                ..RetryPolicy::default()
            },
            extra_env: extra_env(&opts.env)?,
            ray: ray_options(&opts)?,
            sandbox: opts.sandbox,
            memory_limit: opts.memory_limit,
            max_procs: opts.max_procs,
            pass_env: opts.env_pass,
            warm_start: opts.warm_start,
            reuse: opts.reuse,
            profile: opts.profile,
            gnn_layout: opts.gnn_layout.unwrap_or(tree.is_gnn),
            step12_dir: tree.step12_dir(),
            fallback_to_cpu: opts.fallback_to_cpu,
            max_log_bytes: opts.max_log_bytes,
            preflight: opts.preflight,
            output_dir,
            results_dir,
            created_dirs,
            device: opts.device,
            recursive: opts.recursive,
            jobs,
            timeout: opts.timeout,
            grace: opts.grace,
            python: opts.python.map(|p| absolute(&p)),
            compilation_cache,
        })
    }
}

/// A value an option cannot take, and why.
fn invalid(option: &'static str, value: impl ToString, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `--results-dir`, or the tree's default: created, and canonical.
fn results_dir(
    given: Option<&Path>,
    tree: &PipelineTree,
) -> Result<(PathBuf, Vec<PathBuf>), ConfigError> {
    let dir = given.map_or_else(|| tree.default_results_dir(), absolute);
    let failed = |source| ConfigError::ResultsDir {
        path: dir.clone(),
        source,
    };
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let created = missing
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .collect();
    Ok((dir.canonicalize().map_err(failed)?, created))
}

/// Limits that cannot work: a zero timeout, a tiny log cap or memory limit, no
/// processes, variable names that are not names.
fn validate_limits(opts: &RunOptions) -> Result<(), ConfigError> {
    if opts.timeout.is_zero() {
        return Err(invalid(
            "--timeout",
            "0s",
            "must be longer than zero, for example 90s or 30m",
        ));
    }
    if let Some(b) = opts.max_log_bytes.filter(|b| *b < 1024) {
        return Err(invalid("--max-log-size", b, "must be at least 1KiB"));
    }
    if let Some(m) = opts.memory_limit.filter(|m| *m < 16 << 20) {
        return Err(invalid(
            "--memory-limit",
            m,
            "a Python process with jax needs far more than 16MiB; use e.g. 2G",
        ));
    }
    if opts.max_procs == Some(0) {
        return Err(invalid("--max-procs", "0", "must be at least 1"));
    }
    if let Some(bad) = opts.env_pass.iter().find(|n| !valid_env_name(n)) {
        return Err(invalid(
            "--env-pass",
            bad,
            "name a variable: letters, digits and _",
        ));
    }
    Ok(())
}

/// `--retry-on`: failure class names, comma-separated or repeated.
fn retry_on(names: Option<&[String]>) -> Result<BTreeSet<FailureClass>, ConfigError> {
    let Some(names) = names else {
        return Ok(RetryPolicy::default_retry_on());
    };
    let retryable =
        |c: &FailureClass| !matches!(c, FailureClass::Succeeded | FailureClass::Interrupted);
    names
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            FailureClass::parse(n).filter(retryable).ok_or_else(|| {
                let classes: Vec<&str> = FailureClass::ALL
                    .into_iter()
                    .filter(retryable)
                    .map(FailureClass::as_str)
                    .collect();
                invalid(
                    "--retry-on",
                    n,
                    &format!(
                        "not a failure class that can be retried; use one of {}",
                        classes.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// `--env KEY=VALUE`.
fn extra_env(pairs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    pairs
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if valid_env_name(k) => Ok((k.to_string(), v.to_string())),
            _ => Err(invalid(
                "--env",
                kv,
                "use KEY=VALUE with a name of letters, digits and _",
            )),
        })
        .collect()
}

/// `--backend ray`: the dashboard URL and token.
fn ray_options(opts: &RunOptions) -> Result<Option<RayOptions>, ConfigError> {
    match &opts.ray_address {
        None => Ok(None),
        Some(a) if a.starts_with("http://") || a.starts_with("https://") => Ok(Some(RayOptions {
            address: a.clone(),
            token: opts.ray_token.clone(),
            max_return: opts.ray_max_return,
        })),
        Some(a) => Err(invalid(
            "--ray-address",
            a,
            "use the dashboard URL, e.g. http://head-node:8265",
        )),
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks that the output folder exists, is a directory and can be listed; returns
/// it canonical. A folder that cannot be read is a bad input (exit 2), not an empty
/// tree (exit 3).
pub fn validate_output_dir(path: &Path) -> Result<PathBuf, ConfigError> {
    let unreadable = |source| ConfigError::OutputDirUnreadable {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ConfigError::OutputDirMissing {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(unreadable(source)),
        Ok(m) if !m.is_dir() => Err(ConfigError::OutputDirNotADirectory {
            path: path.to_path_buf(),
        }),
        Ok(_) => {
            std::fs::read_dir(path).map_err(unreadable)?;
            path.canonicalize().map_err(unreadable)
        }
    }
}

/// Where a pipeline tree's outputs go. `--output-dir` is either the pipeline's output
/// folder (holding `11_render_output/`) or, as GNN's own step 12 is pointed, the
/// render folder itself; either way the runner's outputs go beside the render folder,
/// never inside it, so both commands write the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineTree {
    /// The folder the outputs go in.
    pub root: PathBuf,
    /// Whether the tree is a GNN pipeline output (it has a render folder).
    pub is_gnn: bool,
}

impl PipelineTree {
    /// The tree around `output_dir` (canonical).
    pub fn of(output_dir: &Path) -> PipelineTree {
        use crate::discovery::manifest::{MANIFEST_NAME, RENDER_DIR};
        let is_render_folder = output_dir.join(MANIFEST_NAME).is_file()
            || output_dir.file_name().is_some_and(|n| n == RENDER_DIR);
        match output_dir.parent() {
            Some(parent) if is_render_folder => PipelineTree {
                root: parent.to_path_buf(),
                is_gnn: true,
            },
            _ => PipelineTree {
                root: output_dir.to_path_buf(),
                is_gnn: output_dir.join(RENDER_DIR).is_dir(),
            },
        }
    }

    /// `<root>/execution_results/jax`.
    pub fn default_results_dir(&self) -> PathBuf {
        self.root.join("execution_results").join("jax")
    }

    /// `<root>/12_execute_output`.
    pub fn step12_dir(&self) -> PathBuf {
        self.root.join(crate::discovery::manifest::STEP12_DIR)
    }
}

/// Makes a path absolute against the current directory without touching the filesystem.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Options as a test starts from: CPU, no cache, no sandbox, one retry.
#[cfg(test)]
pub(crate) fn test_options(dir: &Path) -> RunOptions {
    RunOptions {
        output_dir: dir.to_path_buf(),
        results_dir: None,
        device: Device::Cpu,
        recursive: true,
        jobs: None,
        timeout: Duration::from_secs(60),
        grace: Duration::from_secs(1),
        python: None,
        compilation_cache: Some("off".into()),
        retries: 1,
        retry_on: None,
        retry_delay: Duration::from_secs(1),
        fallback_to_cpu: true,
        max_log_bytes: None,
        preflight: false,
        sandbox: SandboxMode::Off,
        memory_limit: None,
        max_procs: None,
        env: vec![],
        env_pass: vec![],
        gnn_layout: None,
        warm_start: WarmStart::Off,
        reuse: Reuse::None,
        profile: false,
        ray_address: None,
        ray_token: None,
        ray_max_return: 50 << 20,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn auto_resolves_by_gpu_count() {
        assert_eq!(Device::Auto.resolve(0), Platform::Cpu);
        assert_eq!(Device::Auto.resolve(2), Platform::Gpu);
        assert_eq!(Device::Gpu.resolve(0), Platform::Gpu);
        assert_eq!(Platform::Gpu.jax_platforms(), "cuda");
    }
}
