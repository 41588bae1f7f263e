//! A Slurm job's own side: `jax-runner __slurm-job REQUEST` on the compute node runs
//! one attempt as a local run would (the node's sandbox layers, the telemetry shim,
//! the kernel's figures, the time limit and the stop), and leaves the record beside
//! the request for the runner. Its exit code mirrors the script's, so `squeue` and
//! `sacct` tell the same story.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::watch;

use super::slurm::hostname;
use crate::config::{RunConfig, RunOptions, ScriptSettings};
use crate::discovery::Script;
use crate::environment::Environment;
use crate::events::EventSender;
use crate::model::DiscoveredBy;
use crate::runner::attempt::AttemptRequest;
use crate::runner::slurm::{to_record, write_new, NodeRecord, NodeRequest, NOT_SHARED_EXIT};
use crate::runner::Stop;

/// Runs the job's attempt; the job's exit code.
pub fn slurm_job(request: &Path) -> i32 {
    let req: NodeRequest = match std::fs::read(request)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "jax-runner on {}: failed to read the job's request {}: {e} (the results folder must be on a file system the nodes share)",
                hostname(),
                request.display()
            );
            return NOT_SHARED_EXIT;
        }
    };
    if !req.marker.exists() {
        eprintln!(
            "jax-runner on {}: failed to see {}: the data folder is not on a file system this node shares with the runner",
            hostname(),
            req.marker.display()
        );
        return NOT_SHARED_EXIT;
    }
    let record = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(attempt(&req)),
        Err(e) => Err(format!("failed to start the async runtime: {e}")),
    };
    let record = record.unwrap_or_else(|error| NodeRecord {
        node: hostname(),
        error: Some(error),
        ..Default::default()
    });
    let code = match (record.code, record.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    };
    let bytes = serde_json::to_vec(&record).expect("a record serializes");
    let written = write_new(&req.record, &bytes);
    if let Err(e) = written {
        eprintln!(
            "jax-runner on {}: failed to write {}: {e}",
            hostname(),
            req.record.display()
        );
        return 1;
    }
    code
}

/// The attempt, run by the local backend as the request describes it.
async fn attempt(req: &NodeRequest) -> Result<NodeRecord, String> {
    if req.version != env!("CARGO_PKG_VERSION") {
        return Err(format!(
            "this node runs jax-runner {}, the runner {}: put one binary on the shared file system",
            env!("CARGO_PKG_VERSION"),
            req.version
        ));
    }
    let chain = |e: &dyn std::error::Error| crate::error::chain(e).join(": ");
    let mut opts = RunOptions::from_args(req.argv.iter().map(String::as_str))
        .map_err(|e| format!("failed to read the node's options: {e}"))?;
    opts.layered.environment = Arc::new(Environment::capture());
    let config = Arc::new(RunConfig::from_options(opts).map_err(|e| chain(&e))?);
    let sandboxing = super::choose_sandbox(&config).map_err(|e| chain(&e))?;
    let (flag, env) = (config.python.clone(), config.environment.clone());
    let interp = tokio::task::spawn_blocking(move || {
        crate::python::Resolver::from_env(flag, &env).resolve()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| chain(&e))?;
    let mut warnings = Vec::new();
    let cache = super::surroundings::compilation_cache(&config, sandboxing.is_ok(), &mut warnings);
    let begun = super::local::begin(&config, &interp, sandboxing, &cache, &mut warnings)
        .map_err(|e| chain(&e))?;
    let layers = begun.sandbox_info().layers.clone();
    // A node's share of a run: one jax script (the run decided which to send), which
    // starts at once: nothing made ahead repays its wait.
    let ahead = super::ahead::ahead(true, 1, 1);
    let backend = super::local::backend(begun, &mut warnings, true, ahead).await;
    for w in &warnings {
        eprintln!("jax-runner on {}: warning: {w}", hostname());
    }
    let script = Script {
        id: req.id.clone(),
        path: req.script.clone(),
        relative_path: req.relative_path.clone(),
        discovered_by: DiscoveredBy::JaxFolder,
        size_bytes: 0,
    };
    let settings = ScriptSettings {
        timeout: std::time::Duration::from_secs_f64(req.timeout_s),
        retries: 0,
        device: config.device,
        memory_limit: req.memory_limit,
        env: req.env.clone(),
        overridden: Default::default(),
    };
    let (events, _samples) = EventSender::channel();
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    // Slurm's cancel and its time limit send SIGTERM: the attempt stops as a local one
    // stops at Ctrl-C (the script's tree ended, its record written).
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        if let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = stop_tx.send(Stop::Graceful);
        }
    });
    let request = AttemptRequest {
        script: &script,
        number: req.number,
        platform: req.platform,
        data_dir: &req.data_dir,
        stdout_log: &req.stdout_log,
        stderr_log: &req.stderr_log,
        events: &events,
        settings: &settings,
        gpu: None,
        slot: None,
    };
    let done = backend.run(request, stop_rx).await.map_err(|e| chain(&e))?;
    Ok(to_record(&done, &hostname(), layers))
}
