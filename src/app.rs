//! The run pipeline: discovered scripts and a chosen interpreter in, results and
//! metrics out, with every reporter subscribed to the event stream.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

use crate::config::{CompilationCache, Device, Platform, RunConfig, WarmStart};
use crate::discovery::{DiscoverOptions, Discovery};
use crate::doctor::{self, DoctorReport, Live};
use crate::error::{ConfigError, DiscoveryError, ReportError};
use crate::events::{EventSender, RunEvent};
use crate::lock::FileLock;
use crate::model::SandboxInfo;
use crate::model::{PerformanceMetrics, RunInfo};
use crate::paths::rfc3339;
use crate::python::Interpreter;
use crate::report::{self, Reporter};
use crate::runner::sandbox::{self, Bwrap, SandboxMode};
use crate::runner::zygote::Zygote;
use crate::runner::{self, telemetry, RunContext, SandboxSetup, Stop};

/// Takes the results folder's lock, so two runners never write the same folder.
pub fn lock_results(config: &RunConfig) -> Result<FileLock, ConfigError> {
    let path = config.results_dir.join(".jax-runner.lock");
    let locked = |source| ConfigError::ResultsDir {
        path: path.clone(),
        source,
    };
    match FileLock::try_acquire(&path).map_err(locked)? {
        Some(lock) => {
            // Best effort: the PID tells the next runner who holds it.
            let _ = std::fs::write(&path, format!("{}\n", std::process::id()));
            Ok(lock)
        }
        None => Err(ConfigError::ResultsLocked {
            path: config.results_dir.clone(),
            holder: std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }),
    }
}

/// Whether scripts run sandboxed: bwrap when it works (`auto`, `on`), else why not.
/// `--sandbox on` without a working bwrap is an error that says how to install it.
pub fn choose_sandbox(config: &RunConfig) -> Result<Result<Bwrap, String>, ConfigError> {
    match config.sandbox {
        SandboxMode::Off => Ok(Err("--sandbox off".into())),
        mode => match sandbox::detect() {
            Ok(b) => Ok(Ok(b)),
            Err(reason) if mode == SandboxMode::On => Err(ConfigError::SandboxUnavailable {
                reason,
                hint: sandbox::INSTALL_HINT,
            }),
            Err(reason) => Ok(Err(reason)),
        },
    }
}

/// Discovers scripts for `config`.
pub fn discover(config: &RunConfig) -> Result<Discovery, DiscoveryError> {
    discover_in(&config.output_dir, config.recursive, &config.results_dir)
}

/// Discovers scripts under `output_dir`, never entering the runner's own outputs (the
/// results folder and GNN's `12_execute_output`).
pub fn discover_in(
    output_dir: &std::path::Path,
    recursive: bool,
    results_dir: &std::path::Path,
) -> Result<Discovery, DiscoveryError> {
    crate::discovery::discover(
        output_dir,
        &DiscoverOptions {
            recursive,
            exclude: vec![
                results_dir.to_path_buf(),
                output_dir.join(report::gnn::STEP12_DIR),
            ],
        },
    )
}

/// Where and how wide a run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The platform scripts are set up for.
    pub platform: Platform,
    pub jobs: usize,
    /// Why a GPU request will run on the CPU from the start, if it will.
    pub gpu_unusable: Option<String>,
    /// How the platform was chosen, in words.
    pub reason: String,
}

/// The pre-flight: doctor's inspection with a live check of only the accelerator the
/// run may use (the CPU needs none: the scripts themselves show whether it works).
pub fn preflight(config: &RunConfig, interp: &Interpreter) -> DoctorReport {
    let live: &'static [Platform] = match config.device {
        Device::Auto | Device::Gpu => &[Platform::Gpu],
        Device::Tpu => &[Platform::Tpu],
        Device::Cpu => &[],
    };
    doctor::inspect(interp, config.device, Live::Only(live))
}

/// The platform, the GPU verdict and the number of parallel jobs. With a pre-flight
/// report the GPU counts only when it really works; without one, when NVML sees it.
pub fn plan(config: &RunConfig, env: Option<&DoctorReport>) -> Plan {
    let nvml = env.map_or_else(crate::gpu::inspect, |e| e.nvml.clone());
    let gpus = nvml.gpu_count();
    let gpu_works = match env {
        Some(e) => e.verdict(Platform::Gpu).is_some_and(|v| v.works),
        None => gpus > 0,
    };
    let why_not = || match env {
        Some(e) => e
            .why_not(Platform::Gpu)
            .unwrap_or_else(|| "the GPU does not work".into()),
        None if nvml.available => "NVML reports no NVIDIA GPU".into(),
        None => format!(
            "no NVIDIA driver: {}",
            nvml.error.as_deref().unwrap_or("NVML unavailable")
        ),
    };
    let (platform, reason) = match config.device {
        Device::Auto if gpu_works => (Platform::Gpu, "auto: the GPU works".to_string()),
        Device::Auto => (
            Platform::Cpu,
            format!("auto: the CPU, because {}", why_not()),
        ),
        Device::Cpu => (Platform::Cpu, "requested".into()),
        Device::Gpu => (Platform::Gpu, "requested".into()),
        Device::Tpu => (Platform::Tpu, "requested".into()),
    };
    let gpu_unusable = (platform == Platform::Gpu && !gpu_works).then(why_not);
    let on_cpu = platform == Platform::Cpu || (gpu_unusable.is_some() && config.fallback_to_cpu);
    let jobs = config.jobs.map(|j| j.get()).unwrap_or(if on_cpu {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else if platform == Platform::Gpu {
        // One script per GPU by default: scripts on one GPU fight over its memory.
        gpus.max(1)
    } else {
        1
    });
    Plan {
        platform,
        jobs,
        gpu_unusable,
        reason,
    }
}

/// What a finished run hands back to the edge.
#[derive(Debug)]
pub struct RunReport {
    pub metrics: PerformanceMetrics,
    /// Reports that could not be written.
    pub report_errors: Vec<ReportError>,
}

/// Runs the scripts, feeding every event to `reporters`, and returns the metrics.
/// `stop` lets the caller interrupt (signals are wired at the edge).
pub async fn run(
    config: &RunConfig,
    interpreter: Option<&Interpreter>,
    bwrap: Result<Bwrap, String>,
    discovery: Discovery,
    mut reporters: Vec<Box<dyn Reporter>>,
    stop: watch::Receiver<Stop>,
) -> RunReport {
    reporters.insert(
        0,
        Box::new(report::JsonReporter::new(config.results_dir.clone())),
    );
    reporters.push(Box::new(report::HtmlReporter::new(
        config.results_dir.clone(),
    )));
    reporters.push(Box::new(report::MarkdownReporter::new(
        config.results_dir.clone(),
    )));
    reporters.push(Box::new(report::JunitReporter::new(
        config.results_dir.clone(),
    )));
    let gnn = config
        .gnn_layout
        .then(|| report::gnn::plan(&config.output_dir, &discovery.scripts));
    if let Some(entries) = &gnn {
        reporters.push(Box::new(report::GnnReporter::new(
            &config.output_dir,
            config.results_dir.clone(),
            entries.clone(),
        )));
    }
    let (events, rx) = EventSender::channel();
    let dispatcher = tokio::spawn(report::dispatch(rx, reporters));
    let environment = match interpreter {
        Some(interp) if config.preflight && !discovery.scripts.is_empty() => {
            let (config, interp) = (config.clone(), interp.clone());
            tokio::task::spawn_blocking(move || preflight(&config, &interp))
                .await
                .ok()
        }
        _ => None,
    };
    let plan = plan(config, environment.as_ref());
    let started_at = SystemTime::now();
    let started = Instant::now();
    let warn = |message: String| events.emit(RunEvent::Warning { message });

    for message in &discovery.warnings {
        warn(message.clone());
    }
    for missing in &discovery.missing {
        warn(format!(
            "the render manifest lists {missing}, which does not exist"
        ));
    }
    let compilation_cache = match &config.compilation_cache {
        CompilationCache::Off => None,
        CompilationCache::Dir(dir) => match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.clone()),
            Err(e) => {
                warn(format!(
                    "compilation cache disabled: failed to create {}: {e}",
                    dir.display()
                ));
                None
            }
        },
    };
    let shim_dir = match telemetry::install(&crate::paths::cache_dir()) {
        Ok(dir) => Some(dir),
        Err(e) => {
            warn(format!(
                "device telemetry disabled: failed to install the shim: {e}"
            ));
            None
        }
    };
    if let (Err(reason), SandboxMode::Auto) = (&bwrap, config.sandbox) {
        warn(format!(
            "scripts run without a sandbox: {reason} (install it with `{}`)",
            sandbox::INSTALL_HINT
        ));
    }
    if let (Some(reason), false) = (&plan.gpu_unusable, config.fallback_to_cpu) {
        warn(format!(
            "GPU requested but unusable ({reason}) and --fallback none: scripts will fail"
        ));
    }

    let zygote = match (interpreter, config.warm_start, bwrap.is_ok()) {
        (Some(interp), WarmStart::On | WarmStart::Auto, false) if !discovery.scripts.is_empty() => {
            let env = zygote_env(shim_dir.as_deref());
            let python = interp.path.clone();
            match tokio::task::spawn_blocking(move || Zygote::start(&python, &env)).await {
                Ok(Ok(z)) => Some(Arc::new(z)),
                Ok(Err(reason)) => {
                    warn(format!(
                        "warm start unavailable, scripts start cold: {reason}"
                    ));
                    None
                }
                Err(e) => {
                    warn(format!("warm start unavailable, scripts start cold: {e}"));
                    None
                }
            }
        }
        (_, WarmStart::On, true) => {
            warn("warm start is off for sandboxed runs: each script needs its own mounts".into());
            None
        }
        _ => None,
    };
    let results = match interpreter {
        Some(interp) if !discovery.scripts.is_empty() => {
            events.emit(RunEvent::RunStarted {
                total: discovery.scripts.len(),
                jobs: plan.jobs,
                device: plan.platform,
                interpreter: interp.path.display().to_string(),
            });
            let ctx = Arc::new(RunContext {
                python: interp.path.clone(),
                device_requested: config.device,
                platform: plan.platform,
                jobs: plan.jobs,
                timeout: config.timeout,
                grace: config.grace,
                results_dir: config.results_dir.clone(),
                compilation_cache: compilation_cache.clone(),
                retry: config.retry.clone(),
                fallback_to_cpu: config.fallback_to_cpu,
                max_log_bytes: config.max_log_bytes,
                shim_dir,
                run_token: format!("{}-{}", std::process::id(), rfc3339(started_at)),
                gpu_broken: Mutex::new(plan.gpu_unusable.clone()),
                sandbox_info: sandbox_info(config, &bwrap),
                sandbox: bwrap.ok().map(|bwrap| SandboxSetup {
                    bwrap,
                    home: std::env::var_os("HOME").map(std::path::PathBuf::from),
                    python_paths: sandbox::python_paths(
                        &interp.path,
                        &interp.info.prefix,
                        &interp.info.base_prefix,
                    ),
                }),
                memory_limit: config.memory_limit,
                max_procs: config.max_procs,
                extra_env: config.extra_env.clone(),
                pass_env: config.pass_env.clone(),
                zygote: zygote.clone(),
                // GNN's layout points GNN_OUTPUT_DIR at 12_execute_output/…/simulation_data.
                data_dirs: gnn
                    .iter()
                    .flatten()
                    .map(|(id, e)| (id.clone(), e.data_dir.clone()))
                    .collect(),
            });
            runner::run_all(ctx, discovery.scripts, events.clone(), stop.clone()).await
        }
        _ => Vec::new(),
    };

    let info = |f: fn(&Interpreter) -> Option<String>| interpreter.and_then(f);
    let run = RunInfo {
        started_at: rfc3339(started_at),
        finished_at: rfc3339(SystemTime::now()),
        wall_time_s: started.elapsed().as_secs_f64(),
        device_requested: config.device,
        device: if plan.gpu_unusable.is_some() && config.fallback_to_cpu {
            Platform::Cpu
        } else {
            plan.platform
        },
        jobs: plan.jobs,
        interpreter: info(|i| Some(i.path.display().to_string())),
        interpreter_source: info(|i| Some(i.source.as_str().to_string())),
        python_version: info(|i| Some(i.info.python_version.clone())),
        jax_version: info(|i| i.info.jax_version.clone()),
        jaxlib_version: info(|i| i.info.jaxlib_version.clone()),
        output_dir: config.output_dir.display().to_string(),
        results_dir: config.results_dir.display().to_string(),
        compilation_cache: compilation_cache.map(|p| p.display().to_string()),
        interrupted: *stop.borrow() != Stop::Run,
        retries: config.retry.retries,
        retry_on: config.retry.retry_on.iter().copied().collect(),
        fallback: if config.fallback_to_cpu {
            "cpu"
        } else {
            "none"
        }
        .into(),
        device_fallback_reason: plan
            .gpu_unusable
            .filter(|_| config.fallback_to_cpu && config.device != Device::Cpu),
        runner_peak_rss_mb: runner_peak_rss_mb(),
        device_choice: plan.reason.clone(),
    };
    let mut metrics = PerformanceMetrics::build(
        run,
        results,
        discovery.missing.clone(),
        discovery.warnings.clone(),
    );
    metrics.environment = environment;
    events.emit(RunEvent::RunFinished {
        metrics: Box::new(metrics.clone()),
    });
    drop(events);
    let report_errors = dispatcher.await.unwrap_or_default();
    RunReport {
        metrics,
        report_errors,
    }
}

/// The zygote's own environment: the parent's, with the telemetry shim on
/// `PYTHONPATH` (each script's own variables are applied in its process).
fn zygote_env(shim_dir: Option<&std::path::Path>) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<_> = std::env::vars_os()
        .filter(|(k, _)| k != "PYTHONPATH" && k != "JAX_PLATFORM_NAME")
        .collect();
    if let Some(dir) = shim_dir {
        env.push(("PYTHONPATH".into(), telemetry::python_path(dir)));
    }
    // Importing jax must not reach for a GPU; scripts set their own platform.
    env.push(("JAX_PLATFORMS".into(), "cpu".into()));
    env
}

/// What every result says about isolation.
fn sandbox_info(config: &RunConfig, bwrap: &Result<Bwrap, String>) -> SandboxInfo {
    let on = bwrap.is_ok();
    SandboxInfo {
        kind: if on { "bwrap" } else { "none" }.into(),
        reason: bwrap.as_ref().err().cloned(),
        network: !on,
        home_visible: !on,
        environment: if on { "allowlist" } else { "inherited" }.into(),
        memory_limit_mb: config.memory_limit.map(|b| b as f64 / (1024.0 * 1024.0)),
        max_procs: config.max_procs,
        max_procs_enforced_by: None,
    }
}

/// The runner's own peak RSS, from the kernel.
fn runner_peak_rss_mb() -> f64 {
    // SAFETY: getrusage fills a plain struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    usage.ru_maxrss as f64 / 1024.0
}
