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
