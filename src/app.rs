//! The run pipeline: discovered scripts and a chosen interpreter in, results and
//! metrics out, with every reporter subscribed to the event stream.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

use crate::config::{CompilationCache, Platform, RunConfig};
use crate::discovery::{DiscoverOptions, Discovery};
use crate::error::{DiscoveryError, ReportError};
use crate::events::{EventSender, RunEvent};
use crate::model::{PerformanceMetrics, RunInfo};
use crate::paths::rfc3339;
use crate::python::Interpreter;
use crate::report::{self, Reporter};
use crate::runner::{self, RunContext, Stop};

/// Discovers scripts for `config`, never entering the results folder.
pub fn discover(config: &RunConfig) -> Result<Discovery, DiscoveryError> {
    crate::discovery::discover(
        &config.output_dir,
        &DiscoverOptions {
            recursive: config.recursive,
            exclude: vec![config.results_dir.clone()],
        },
    )
}

/// The platform and the number of parallel jobs for this host.
pub fn plan(config: &RunConfig) -> (Platform, usize) {
    let gpus = crate::gpu::nvidia_gpu_count().unwrap_or(0);
    let platform = config.device.resolve(gpus);
    let jobs = config.jobs.map(|j| j.get()).unwrap_or(match platform {
        Platform::Cpu => std::thread::available_parallelism().map_or(1, |n| n.get()),
        // One script per GPU by default: scripts on one GPU fight over its memory.
        Platform::Gpu => gpus.max(1),
        Platform::Tpu => 1,
    });
    (platform, jobs)
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
    discovery: Discovery,
    mut reporters: Vec<Box<dyn Reporter>>,
    stop: watch::Receiver<Stop>,
) -> RunReport {
    reporters.insert(
        0,
        Box::new(report::JsonReporter::new(config.results_dir.clone())),
    );
    let (events, rx) = EventSender::channel();
    let dispatcher = tokio::spawn(report::dispatch(rx, reporters));
    let (platform, jobs) = plan(config);
    let started_at = SystemTime::now();
    let started = Instant::now();

    for message in &discovery.warnings {
        events.emit(RunEvent::Warning {
            message: message.clone(),
        });
    }
    for missing in &discovery.missing {
        events.emit(RunEvent::Warning {
            message: format!("the render manifest lists {missing}, which does not exist"),
        });
    }
    let compilation_cache = match &config.compilation_cache {
        CompilationCache::Off => None,
        CompilationCache::Dir(dir) => match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.clone()),
            Err(e) => {
                events.emit(RunEvent::Warning {
                    message: format!(
                        "compilation cache disabled: failed to create {}: {e}",
                        dir.display()
                    ),
                });
                None
            }
        },
    };

    let results = match interpreter {
        Some(interp) if !discovery.scripts.is_empty() => {
            events.emit(RunEvent::RunStarted {
                total: discovery.scripts.len(),
                jobs,
                device: platform,
                interpreter: interp.path.display().to_string(),
            });
            let ctx = Arc::new(RunContext {
                python: interp.path.clone(),
                device_requested: config.device,
                platform,
                jobs,
                timeout: config.timeout,
                grace: config.grace,
                results_dir: config.results_dir.clone(),
                compilation_cache: compilation_cache.clone(),
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
        device: platform,
        jobs,
        interpreter: info(|i| Some(i.path.display().to_string())),
        interpreter_source: info(|i| Some(i.source.as_str().to_string())),
        python_version: info(|i| Some(i.info.python_version.clone())),
        jax_version: info(|i| i.info.jax_version.clone()),
        jaxlib_version: info(|i| i.info.jaxlib_version.clone()),
        output_dir: config.output_dir.display().to_string(),
        results_dir: config.results_dir.display().to_string(),
        compilation_cache: compilation_cache.map(|p| p.display().to_string()),
        interrupted: *stop.borrow() != Stop::Run,
    };
    let metrics = PerformanceMetrics::build(
        run,
        &results,
        discovery.missing.clone(),
        discovery.warnings.clone(),
    );
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
