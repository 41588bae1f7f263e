//! The live check: in a subprocess with a time limit, initialise one backend, run a
//! tiny jitted computation, and report the device it really ran on.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::model::doctor::LiveCheck;
use crate::model::FailureClass;
use crate::model::Platform;
use crate::runner::classify::{classify, Ending, StderrScan};

const LIVE: &str = include_str!("live.py");
const LIMIT: Duration = Duration::from_secs(180);

/// Runs the live check for `platform` with `python`.
pub fn check(python: &Path, platform: Platform) -> LiveCheck {
    let started = Instant::now();
    let mut cmd = Command::new(python);
    cmd.arg("-c")
        .arg(LIVE)
        .env("JAX_PLATFORMS", platform.jax_platforms())
        .env("JAX_TRACEBACK_FILTERING", "off")
        .env_remove("JAX_PLATFORM_NAME")
        .stdin(Stdio::null());
    if platform == Platform::Gpu {
        cmd.env("XLA_PYTHON_CLIENT_PREALLOCATE", "false");
    }
    let outcome = crate::python::capture(cmd, LIMIT);
    let total_s = started.elapsed().as_secs_f64();
    let failed = |class, error: String| LiveCheck {
        platform,
        ok: false,
        device: None,
        init_s: None,
        total_s,
        class: Some(class),
        error: Some(error),
    };
    let (status, stdout, stderr) = match outcome {
        Ok(o) => o,
        Err(e) => {
            return failed(
                FailureClass::ScriptError,
                format!("failed to start {}: {e}", python.display()),
            )
        }
    };
    let report = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    if let Some(r) = report.filter(|r| r["ok"] == true) {
        let device = r["device"].as_str().map(str::to_string);
        let ran_on = r["platform"].as_str().unwrap_or("");
        let ok =
            ran_on == platform.jax_platforms() || (platform == Platform::Gpu && ran_on == "gpu");
        return LiveCheck {
            platform,
            ok,
            device,
            init_s: r["init_s"].as_f64(),
            total_s,
            class: (!ok).then_some(FailureClass::GpuEnvironment),
            error: (!ok).then(|| {
                format!(
                    "asked for {} but jax ran on {ran_on}",
                    platform.jax_platforms()
                )
            }),
        };
    }
    let mut scan = StderrScan::default();
    for line in stderr.lines() {
        scan.line(line.as_bytes());
    }
    let verdict = classify(&Ending {
        platform,
        code: Some(1),
        signal: None,
        timed_out: status.starts_with("timed out"),
        interrupted: false,
        memory_limit_hit: false,
        process_limit_hit: false,
        kernel_oom_kill: false,
        memory_cgroup_hit: false,
        peak: Default::default(),
        scan: &scan,
    });
    let error = verdict
        .matched_line
        .or_else(|| {
            stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or(status);
    failed(verdict.class, error)
}
