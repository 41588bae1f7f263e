//! An attempt's outcome from what the job left: the wrapper's report when it sent one
//! (separate streams, CPU time, peak memory, telemetry, the data folder), else the
//! job's whole log.

use std::time::Duration;

use super::returned::Returned;
use super::JobSpec;
use crate::model::{JaxTelemetry, MemorySource, RayJob, SourceFrame};
use crate::runner::attempt::{AttemptOutcome, StoppedBy};
use crate::runner::output::Drained;
use crate::runner::sys::Exit;

/// stderr lines kept for the result, as for local runs.
const STDERR_TAIL_LINES: usize = 40;

/// The wrapper reported: its streams, figures and telemetry are the attempt's, and
/// the data folder is unpacked where a local run would have written it.
pub fn reported(
    mut r: Returned,
    spec: &JobSpec<'_>,
    outcome: &mut AttemptOutcome,
    job: &mut RayJob,
) -> Option<JaxTelemetry> {
    let rep = &r.report;
    outcome.exit = Exit {
        code: rep.code,
        signal: rep.signal,
        user_cpu: Duration::from_secs_f64(rep.user_cpu_s.max(0.0)),
        system_cpu: Duration::from_secs_f64(rep.system_cpu_s.max(0.0)),
        max_rss_bytes: rep.max_rss_bytes,
    };
    // As locally: the samples' figure, or for a script too short for a sample the
    // kernel's resident peak of its largest process.
    (outcome.peak_rss_bytes, outcome.memory_source) = match rep.peak_rss_bytes {
        0 if rep.max_rss_bytes > 0 => (rep.max_rss_bytes, MemorySource::Rss),
        peak => (peak, rep.memory_source.unwrap_or(MemorySource::Rss)),
    };
    outcome.gpu_device_opened = rep.gpu_device_opened;
    // The wrapper's watchdog, as the local one: a kill at a limit is the limit's.
    let hit = match rep.limit_hit.as_deref() {
        Some("process_limit") => Some(StoppedBy::ProcessLimit),
        Some("memory_limit") => Some(StoppedBy::MemoryLimit),
        _ => None,
    };
    outcome.stopped_by = outcome.stopped_by.or(hit);
    let _ = write_log(spec.stdout_log, &r.stdout);
    let _ = write_log(spec.stderr_log, &r.stderr);
    outcome.stdout = Drained {
        bytes: r.stdout.len() as u64 + rep.stdout_cut_bytes,
        cut_bytes: rep.stdout_cut_bytes,
        ..Default::default()
    };
    outcome.stderr = Drained {
        bytes: r.stderr.len() as u64 + rep.stderr_cut_bytes,
        cut_bytes: rep.stderr_cut_bytes,
        tail: crate::runner::output::last_lines(&r.stderr, STDERR_TAIL_LINES),
        ..Default::default()
    };
    for line in r.stderr.split(|b| *b == b'\n') {
        outcome.stderr.scan.line(line);
    }
    let scan = &mut outcome.stderr.scan;
    for frame in [&mut scan.user_frame, &mut scan.hung_at]
        .into_iter()
        .flatten()
    {
        relocate(frame, spec.script);
    }
    job.reported = true;
    job.shared_filesystem = rep.shared_filesystem;
    job.data_bytes = rep.data_bytes;
    job.data_files = rep.data_files;
    job.data_left_at = rep
        .data_left_at
        .as_ref()
        .map(|path| format!("{}:{path}", rep.node));
    job.data_note = if rep.shared_filesystem {
        None
    } else if !rep.data_returned {
        Some(format!(
            "the data folder ({} bytes) is over --ray-max-return ({} bytes): nothing was copied",
            rep.data_bytes, spec.max_return
        ))
    } else {
        (rep.data_left_out > 0).then(|| {
            format!(
                "{} links or special files were left on the cluster",
                rep.data_left_out
            )
        })
    };
    if rep.data_returned {
        match r.unpack_data(spec.data_dir, spec.max_return) {
            Ok(_) => job.data_returned = true,
            Err(e) => job.data_note = Some(e.to_string()),
        }
    }
    r.report.telemetry()
}

/// No report came back (the job was stopped, or never ran the wrapper): the job's
/// log holds stdout and stderr together, so the attempt is classified from all of it.
pub fn whole_log(logs: &str, nonce: &str, spec: &JobSpec<'_>, outcome: &mut AttemptOutcome) {
    // A block cut short by the job's end is no use to anyone reading the log.
    let logs = super::returned::without_block(logs, nonce);
    let _ = write_log(spec.stdout_log, logs.as_bytes());
    let _ = write_log(spec.stderr_log, b"");
    let mut stdout = Drained {
        bytes: logs.len() as u64,
        ..Default::default()
    };
    for line in logs.lines() {
        stdout.scan.line(line.as_bytes());
    }
    stdout.tail = crate::runner::output::last_lines(logs.as_bytes(), STDERR_TAIL_LINES);
    outcome.stderr = Drained {
        tail: stdout.tail.clone(),
        scan: stdout.scan.clone(),
        ..Default::default()
    };
    outcome.stdout = stdout;
}

/// An attempt's outcome as the job's status alone tells it, before its log is read.
pub fn from_status(
    status: &serde_json::Value,
    started_at: std::time::SystemTime,
    duration: Duration,
    stopped_by: Option<StoppedBy>,
) -> AttemptOutcome {
    AttemptOutcome {
        started_at,
        duration,
        exit: driver_exit(status),
        stopped_by,
        peak_rss_bytes: 0,
        // Until the wrapper's report says what it counted.
        memory_source: MemorySource::Rss,
        peak_scratch_bytes: 0,
        stdout: Drained::default(),
        stderr: Drained::default(),
        leaks: Vec::new(),
        kernel_oom_kill: false,
        refused_forks: 0,
        sampled_cpu: (0.0, 0.0),
        gpu_device_opened: None,
        capabilities: None,
        gpu: None,
        start: crate::runner::attempt::Start::Cold,
    }
}

/// How the job's driver ended, until the wrapper's report says how the script did:
/// Ray's exit code, where a negative one is Python's way of saying "killed by that
/// signal", as a local attempt records it.
fn driver_exit(status: &serde_json::Value) -> Exit {
    let code = status["driver_exit_code"].as_i64().map(|c| c as i32);
    let (code, signal) = match code {
        Some(c) if c < 0 => (None, Some(-c)),
        Some(c) => (Some(c), None),
        None if status["status"] == "SUCCEEDED" => (Some(0), None),
        None => (Some(1), None),
    };
    Exit {
        code,
        signal,
        user_cpu: Duration::ZERO,
        system_cpu: Duration::ZERO,
        max_rss_bytes: 0,
    }
}

/// Ray's error types for a job the cluster failed itself (its runtime environment, its
/// supervisor, its node), as against `JOB_ENTRYPOINT_COMMAND_ERROR`, the wrapper's own
/// non-zero exit.
fn failed_by_cluster(job: &RayJob) -> bool {
    job.status == "FAILED"
        && !job.reported
        && (job.error_type.as_deref()).is_some_and(|t| t != "JOB_ENTRYPOINT_COMMAND_ERROR")
}

/// A job the cluster failed before its script's end was reported reads as a Slurm
/// job whose node failed: killed, which the default `--retry-on` tries again, with
/// Ray's words ending the stderr tail, where the reason takes its last line from.
pub fn lost(job: &RayJob, outcome: &mut AttemptOutcome) {
    if !failed_by_cluster(job) {
        return;
    }
    outcome.exit.code = None;
    outcome.exit.signal = Some(libc::SIGKILL);
    (outcome.stderr.tail).push(format!("[jax-runner] {}", lost_line(job)));
}

/// The line that names what the cluster did, for the attempt's `matched_line`; `None`
/// for a job it did not fail.
pub fn lost_line_of(job: &RayJob) -> Option<String> {
    failed_by_cluster(job).then(|| lost_line(job))
}

fn lost_line(job: &RayJob) -> String {
    let kind = job.error_type.as_deref().unwrap_or_default();
    let mut line = format!("Ray job {} failed on the cluster ({kind})", job.job_id);
    // Ray's message: its first line, which says what; the rest is detail and log.
    if let Some(first) = (job.message.as_deref()).and_then(|m| m.lines().next()) {
        let first: String = first.chars().take(300).collect();
        line += &format!(": {}", first.trim());
    }
    line
}

/// A log made anew: a link or FIFO left at its name is replaced, not followed.
fn write_log(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    std::io::Write::write_all(&mut crate::confined::create_file(path)?, bytes)
}

/// A frame as the local run names it: the cluster ran the script from a copy of its
/// folder (Ray's working directory), so the script's own file there is the script
/// here. (A module beside it keeps the cluster's path.)
fn relocate(frame: &mut SourceFrame, script: &std::path::Path) {
    let copy = std::path::Path::new(&frame.file);
    if script.file_name().is_some() && copy.file_name() == script.file_name() {
        frame.file = script.display().to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(status: &str, error_type: Option<&str>, reported: bool) -> RayJob {
        RayJob {
            job_id: "j-1".into(),
            status: status.into(),
            error_type: error_type.map(str::to_string),
            message: Some("Job supervisor actor died: the actor died.\n\tpid: 7".into()),
            reported,
            ..Default::default()
        }
    }

    fn failed() -> AttemptOutcome {
        let status = json!({"status": "FAILED"});
        from_status(
            &status,
            std::time::SystemTime::UNIX_EPOCH,
            Duration::ZERO,
            None,
        )
    }

    #[test]
    fn a_negative_driver_exit_code_is_the_signal_that_killed_it() {
        let exit = |s: serde_json::Value| {
            let e = driver_exit(&s);
            (e.code, e.signal)
        };
        let failed = |code: i64| json!({"status": "FAILED", "driver_exit_code": code});
        assert_eq!(exit(failed(-9)), (None, Some(9)));
        assert_eq!(exit(failed(3)), (Some(3), None));
        assert_eq!(exit(json!({"status": "SUCCEEDED"})), (Some(0), None));
        assert_eq!(exit(json!({"status": "FAILED"})), (Some(1), None));
    }

    /// Only a job the cluster failed, whose wrapper never reported, reads as killed;
    /// the wrapper's own non-zero exit, a job that reported, or one stopped, do not.
    #[test]
    fn a_job_the_cluster_failed_reads_as_killed_and_says_by_whom() {
        for kind in [
            "JOB_SUPERVISOR_ACTOR_DIED",
            "RUNTIME_ENV_SETUP_FAILURE",
            "JOB_SUPERVISOR_ACTOR_START_TIMEOUT",
        ] {
            let j = job("FAILED", Some(kind), false);
            let mut o = failed();
            lost(&j, &mut o);
            assert_eq!((o.exit.code, o.exit.signal), (None, Some(libc::SIGKILL)));
            let line = lost_line_of(&j).unwrap();
            assert_eq!(
                line,
                format!(
                    "Ray job j-1 failed on the cluster ({kind}): Job supervisor actor died: \
                     the actor died."
                )
            );
            assert_eq!(o.stderr.tail.last(), Some(&format!("[jax-runner] {line}")));
        }
        for j in [
            job("FAILED", Some("JOB_ENTRYPOINT_COMMAND_ERROR"), false),
            job("FAILED", Some("JOB_SUPERVISOR_ACTOR_DIED"), true),
            job("STOPPED", Some("JOB_SUPERVISOR_ACTOR_DIED"), false),
            job("FAILED", None, false),
        ] {
            let mut o = failed();
            lost(&j, &mut o);
            assert_eq!((o.exit.code, o.exit.signal), (Some(1), None), "{j:?}");
            assert!(o.stderr.tail.is_empty() && lost_line_of(&j).is_none());
        }
    }
}
