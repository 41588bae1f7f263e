//! An attempt's outcome from a job: the node's record when jax-runner on the node left
//! one (the same figures a local attempt has), else Slurm's own account of the job,
//! whose state decides the class (a node failure or a preemption is transient).

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::job::NodeRecord;
use crate::model::{MemorySource, SlurmJob};
use crate::runner::attempt::{AttemptOutcome, Attempted, Enforced, Start, StoppedBy};
use crate::runner::output::Drained;
use crate::runner::sys::Exit;
use crate::runner::telemetry::Telemetry;

/// Why every Slurm attempt starts cold.
const NODE_STARTS_COLD: &str = "a Slurm job starts its own interpreter on its node";

/// stderr lines kept for the result, as for local runs.
const STDERR_TAIL_LINES: usize = 40;
/// The most of a log read back for the scanner (the log itself is capped by
/// `--max-log-size`).
const MAX_SCANNED: u64 = 64 * 1024 * 1024;

/// The node's record of an attempt, as the node's own run took it.
pub fn to_record(done: &Attempted, node: &str, layers: Vec<String>) -> NodeRecord {
    let o = &done.outcome;
    NodeRecord {
        node: node.to_string(),
        error: None,
        started_at: o
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        duration_s: o.duration.as_secs_f64(),
        code: o.exit.code,
        signal: o.exit.signal,
        user_cpu_s: o.exit.user_cpu.as_secs_f64(),
        system_cpu_s: o.exit.system_cpu.as_secs_f64(),
        max_rss_bytes: o.exit.max_rss_bytes,
        stopped_by: o.stopped_by.map(|s| stopped_name(s).to_string()),
        peak_rss_bytes: o.peak_rss_bytes,
        memory_source: Some(o.memory_source),
        peak_scratch_bytes: o.peak_scratch_bytes,
        stdout_bytes: o.stdout.bytes,
        stdout_cut_bytes: o.stdout.cut_bytes,
        stderr_bytes: o.stderr.bytes,
        stderr_cut_bytes: o.stderr.cut_bytes,
        leaks: o.leaks.clone(),
        kernel_oom_kill: o.kernel_oom_kill,
        refused_forks: o.refused_forks,
        sampled_cpu: o.sampled_cpu,
        cold_reason: match &o.start {
            Start::ColdFallback(r) => Some(r.clone()),
            _ => None,
        },
        gpu_device_opened: o.gpu_device_opened,
        capabilities: o.capabilities,
        gpu_peak_mb: o.gpu.as_ref().map(|g| g.peak_memory_mb),
        gpu_memory_source: o.gpu.as_ref().map(|g| g.memory_source),
        gpu_utilization_pct: o.gpu.as_ref().and_then(|g| g.utilization_pct),
        jax: done.jax.report.clone(),
        jax_problem: done.jax.problem.clone(),
        max_procs_enforced_by: done.enforced.max_procs.map(str::to_string),
        memory_limit_enforced_by: done.enforced.memory_limit.map(str::to_string),
        sandbox_layers: layers,
    }
}

fn stopped_name(s: StoppedBy) -> &'static str {
    match s {
        StoppedBy::Timeout => "timeout",
        StoppedBy::Interrupt => "interrupt",
        StoppedBy::MemoryLimit => "memory_limit",
        StoppedBy::MemoryCgroup => "memory_cgroup",
        StoppedBy::ProcessLimit => "process_limit",
    }
}

fn stopped_from(name: &str) -> Option<StoppedBy> {
    [
        StoppedBy::Timeout,
        StoppedBy::Interrupt,
        StoppedBy::MemoryLimit,
        StoppedBy::MemoryCgroup,
        StoppedBy::ProcessLimit,
    ]
    .into_iter()
    .find(|s| stopped_name(*s) == name)
}

/// `Enforced`'s names are the two the runner uses.
fn enforcer(name: Option<&str>) -> Option<&'static str> {
    match name? {
        "cgroup" => Some("cgroup"),
        _ => Some("watchdog"),
    }
}

/// The attempt as the node recorded it; stderr is read back from its log (on the
/// shared file system) for the scanner and the tail, as a local attempt reads its pipe.
pub fn from_record(r: NodeRecord, stderr_log: &Path, mut job: SlurmJob) -> Attempted {
    let stderr = read_back(stderr_log);
    let mut err = Drained {
        bytes: r.stderr_bytes,
        cut_bytes: r.stderr_cut_bytes,
        tail: crate::runner::output::last_lines(&stderr, STDERR_TAIL_LINES),
        ..Default::default()
    };
    for line in stderr.split(|b| *b == b'\n') {
        err.scan.line(line);
    }
    job.reported = true;
    job.node = Some(r.node.clone());
    job.sandbox_layers = r.sandbox_layers.clone();
    let outcome = AttemptOutcome {
        started_at: SystemTime::UNIX_EPOCH + Duration::from_secs_f64(r.started_at.max(0.0)),
        duration: Duration::from_secs_f64(r.duration_s.max(0.0)),
        exit: Exit {
            code: r.code,
            signal: r.signal,
            user_cpu: Duration::from_secs_f64(r.user_cpu_s.max(0.0)),
            system_cpu: Duration::from_secs_f64(r.system_cpu_s.max(0.0)),
            max_rss_bytes: r.max_rss_bytes,
        },
        // Slurm's own cancel of a job the runner did not cancel is no interrupt of
        // this run: the node's stop then reads as the signal it was.
        stopped_by: r.stopped_by.as_deref().and_then(stopped_from),
        peak_rss_bytes: r.peak_rss_bytes,
        memory_source: r.memory_source.unwrap_or(MemorySource::Rss),
        peak_scratch_bytes: r.peak_scratch_bytes,
        stdout: Drained {
            bytes: r.stdout_bytes,
            cut_bytes: r.stdout_cut_bytes,
            ..Default::default()
        },
        stderr: err,
        leaks: r.leaks,
        kernel_oom_kill: r.kernel_oom_kill,
        refused_forks: r.refused_forks,
        sampled_cpu: r.sampled_cpu,
        // The node runs one script and needs no zygote (it starts it with warm start
        // off): that, not the node's option, is why it started cold.
        start: Start::ColdFallback(NODE_STARTS_COLD.into()),
        gpu_device_opened: r.gpu_device_opened,
        capabilities: r.capabilities,
        gpu: r.gpu_peak_mb.map(|mb| crate::gpu::sample::GpuUsage {
            peak_memory_mb: mb,
            memory_source: r
                .gpu_memory_source
                .unwrap_or(crate::model::GpuMemorySource::Process),
            utilization_pct: r.gpu_utilization_pct,
        }),
    };
    Attempted {
        outcome,
        jax: Telemetry {
            report: r.jax,
            problem: r.jax_problem,
            ..Telemetry::default()
        },
        ray: None,
        slurm: Some(job),
        enforced: Enforced {
            max_procs: enforcer(r.max_procs_enforced_by.as_deref()),
            memory_limit: enforcer(r.memory_limit_enforced_by.as_deref()),
        },
    }
}

/// No record came back: the job ended before jax-runner on the node could write one
/// (Slurm's time limit, its OOM kill, a node failure, a preemption, a cancel). The
/// state decides the class; Slurm's output file is the stderr the user gets.
pub fn from_state(
    job: SlurmJob,
    slurm_out: &Path,
    stderr_log: &Path,
    ran_for: Duration,
    started_at: SystemTime,
    cancelled: bool,
) -> Attempted {
    let out = read_back(slurm_out);
    // Made anew: a link or FIFO left at the log's name is replaced, not followed.
    if let Ok(mut f) = crate::confined::create_file(stderr_log) {
        let _ = std::io::Write::write_all(&mut f, &out);
    }
    let mut err = Drained {
        bytes: out.len() as u64,
        tail: crate::runner::output::last_lines(&out, STDERR_TAIL_LINES),
        ..Default::default()
    };
    for line in out.split(|b| *b == b'\n') {
        err.scan.line(line);
    }
    let (code, signal, stopped_by, oom) = by_state(&job, cancelled);
    let outcome = AttemptOutcome {
        started_at,
        duration: ran_for,
        exit: Exit {
            code,
            signal,
            user_cpu: Duration::ZERO,
            system_cpu: Duration::ZERO,
            max_rss_bytes: 0,
        },
        stopped_by,
        peak_rss_bytes: 0,
        memory_source: MemorySource::Rss,
        peak_scratch_bytes: 0,
        stdout: Drained::default(),
        stderr: err,
        leaks: Vec::new(),
        kernel_oom_kill: oom,
        refused_forks: 0,
        sampled_cpu: (0.0, 0.0),
        start: Start::ColdFallback(NODE_STARTS_COLD.into()),
        gpu_device_opened: None,
        capabilities: None,
        gpu: None,
    };
    Attempted {
        outcome,
        jax: Telemetry::default(),
        ray: None,
        slurm: Some(job),
        enforced: Enforced::default(),
    }
}

/// How Slurm's final state reads as a process's end: (code, signal, stopped by,
/// killed by the OOM killer).
fn by_state(
    job: &SlurmJob,
    cancelled: bool,
) -> (Option<i32>, Option<i32>, Option<StoppedBy>, bool) {
    let (code, sig) = exit_code(job.exit_code.as_deref());
    if cancelled {
        return (None, Some(libc::SIGTERM), Some(StoppedBy::Interrupt), false);
    }
    match job.state.as_str() {
        "TIMEOUT" | "DEADLINE" => (None, Some(libc::SIGKILL), Some(StoppedBy::Timeout), false),
        "OUT_OF_MEMORY" => (None, Some(libc::SIGKILL), None, true),
        // Transient: the default `--retry-on` (killed by a signal) retries them.
        "NODE_FAIL" | "PREEMPTED" | "BOOT_FAIL" | "CANCELLED" => (
            None,
            Some(sig.filter(|s| *s > 0).unwrap_or(libc::SIGKILL)),
            None,
            false,
        ),
        _ => match sig.filter(|s| *s > 0) {
            Some(s) => (None, Some(s), None, false),
            None => (Some(code.unwrap_or(1)), None, None, false),
        },
    }
}

/// Slurm's `ExitCode=code:signal`.
fn exit_code(s: Option<&str>) -> (Option<i32>, Option<i32>) {
    let Some((c, g)) = s.and_then(|s| s.split_once(':')) else {
        return (None, None);
    };
    (c.parse().ok(), g.parse().ok())
}

/// The line that names what Slurm did, for the result's reason.
pub fn slurm_line(job: &SlurmJob) -> String {
    let mut line = format!("Slurm job {} ended {}", job.job_id, job.state);
    if let Some(r) = job.reason.as_deref().filter(|r| *r != "None") {
        line += &format!(" ({r})");
    }
    if let Some(node) = &job.node {
        line += &format!(" on {node}");
    }
    line
}

fn read_back(path: &Path) -> Vec<u8> {
    crate::confined::read_in(path, MAX_SCANNED).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str, exit: &str) -> SlurmJob {
        SlurmJob {
            job_id: "7".into(),
            state: state.into(),
            exit_code: Some(exit.into()),
            ..Default::default()
        }
    }

    #[test]
    fn slurms_states_read_as_the_endings_that_decide_the_class() {
        assert_eq!(
            by_state(&job("FAILED", "3:0"), false),
            (Some(3), None, None, false)
        );
        assert_eq!(
            by_state(&job("TIMEOUT", "0:15"), false).2,
            Some(StoppedBy::Timeout)
        );
        assert!(by_state(&job("OUT_OF_MEMORY", "0:125"), false).3);
        // A node failure or a preemption: killed by a signal, which retries by default.
        for s in ["NODE_FAIL", "PREEMPTED"] {
            let (code, sig, stopped, _) = by_state(&job(s, "0:0"), false);
            assert_eq!(
                (code, sig, stopped),
                (None, Some(libc::SIGKILL), None),
                "{s}"
            );
        }
        assert_eq!(
            by_state(&job("CANCELLED", "0:15"), true).2,
            Some(StoppedBy::Interrupt)
        );
    }

    #[test]
    fn a_record_round_trips_its_stop() {
        for s in [
            "timeout",
            "interrupt",
            "memory_limit",
            "memory_cgroup",
            "process_limit",
        ] {
            assert_eq!(stopped_from(s).map(stopped_name), Some(s));
        }
        assert_eq!(stopped_from("other"), None);
    }
}
