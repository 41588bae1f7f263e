//! One attempt of one script: the single place children are spawned. The child gets
//! null stdin, piped output streamed to log files, its own process group, a death
//! signal tied to the runner, and is stopped as a group: its stacks, SIGTERM, a grace
//! period, then SIGKILL (`child/stop.rs`). After it exits, whatever it left running is
//! killed and reported.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant as TokioInstant};

use super::attempt::{AttemptError, AttemptOutcome, AttemptSpec, Start, StoppedBy};
use super::output::{drain, DrainOptions, Drained, Drainer, LineEcho};
use super::reaper;
use super::scratch::ScratchGauge;
use super::sys::{self, Exit};
use super::telemetry::{self, Telemetry};
use super::tree::TreeSampler;
use super::zygote::Zygote;
use super::Stop;
use crate::events::Stream;
use crate::gpu::sample::GpuSampler;
use crate::model::{Leak, MemorySource};

/// Samples go out every this many memory samples (100 ms each).
const SAMPLES_PER_EVENT: u32 = 10;
/// Open files are looked through for a GPU device, and NVML read, every this many
/// samples.
const GPU_LOOK_EVERY: u32 = 5;
/// How often the tree's memory is sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long to wait, after the script exits, for its output pipes to close.
const PIPE_CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Lines of stderr kept for the result.
const STDERR_TAIL_LINES: usize = 40;

mod start;
pub(crate) mod stop;

use start::start;
use stop::Stopping;

/// A log made anew: whatever a script left at its name (a link, a FIFO, a hard link
/// to another file) is removed first, never followed, truncated or waited on.
fn open_log(path: &Path) -> Result<std::fs::File, AttemptError> {
    crate::confined::create_file(path).map_err(|source| AttemptError::Prepare {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs one attempt to its end, honouring the timeout and stop requests; returns its
/// outcome and the telemetry shim's report.
pub async fn run_attempt(
    spec: &AttemptSpec,
    zygote: Option<&Arc<Zygote>>,
    mut stop: watch::Receiver<Stop>,
) -> Result<(AttemptOutcome, Telemetry), AttemptError> {
    let stdout_file = open_log(&spec.stdout_log)?;
    let stderr_file = open_log(&spec.stderr_log)?;
    let oom_before = reaper::oom_kill_count();
    let started_at = SystemTime::now();
    let started = Instant::now();
    let (pid, child_stdout, child_stderr, start) = start(spec, zygote).await?;
    // Warm in a view of its own, the process started is the namespace's init, a fork
    // of the zygote whose pages are the zygote's; warm on the host's view (Landlock
    // alone, or no sandbox) it is the script itself, and its memory is the script's.
    let plumbing =
        (start == Start::Warm && zygote.is_some_and(|z| z.starts_init())).then_some(pid as u32);
    let echo = |stream: Stream| {
        spec.samples
            .as_ref()
            .filter(|_| spec.echo)
            .map(|s| LineEcho {
                events: s.events.clone(),
                id: s.id.clone(),
                attempt: s.attempt,
                stream,
            })
    };
    let out_opts = DrainOptions {
        max_bytes: spec.max_log_bytes,
        echo: echo(Stream::Stdout),
        ..Default::default()
    };
    let err_opts = DrainOptions {
        tail_lines: STDERR_TAIL_LINES,
        max_bytes: spec.max_log_bytes,
        scan: true,
        echo: echo(Stream::Stderr),
        warm_frames: start == Start::Warm,
    };
    let out_task = drain(child_stdout, stdout_file, out_opts);
    let err_task = drain(child_stderr, stderr_file, err_opts);
    // A slot's zygote forked the script as its own child: it says how it ended.
    let resident = zygote.filter(|z| start == Start::Warm && z.resident());
    let waiter = match resident {
        Some(z) => {
            let z = z.clone();
            tokio::task::spawn_blocking(move || z.wait_exit(pid))
        }
        None => tokio::task::spawn_blocking(move || sys::wait4(pid)),
    };
    let (exit, stopped_by, mut sampler, capabilities, gpu) = supervise(
        pid,
        spec,
        &mut stop,
        waiter,
        started,
        plumbing,
        resident.is_some(),
    )
    .await?;
    let duration = started.elapsed();
    let stopped_by = match &spec.cgroup {
        Some(cg) if stopped_by.is_none() && cg.oom_killed() => Some(StoppedBy::MemoryCgroup),
        _ => stopped_by,
    };
    // Killed at the limit, the kernel's own peak counts all the attempt held there,
    // tmpfs pages too, which two samples may straddle.
    let cgroup_peak = match (&spec.cgroup, stopped_by) {
        (Some(cg), Some(StoppedBy::MemoryCgroup)) => cg.memory_peak(),
        _ => None,
    };
    let exit = if spec.sandbox.as_ref().is_some_and(|sb| sb.bwrap.is_some()) {
        let (code, signal) = crate::sandbox::bwrap::decode_exit(exit.code, exit.signal);
        Exit {
            code,
            signal,
            ..exit
        }
    } else {
        exit
    };
    // Whatever is left in the group goes, then anything that escaped it.
    sys::kill_group(pid, libc::SIGKILL);
    // A slot's script in the sandbox's namespaces leaves its orphans to the slot's
    // zygote, the init of its PID namespace: none can be among the runner's children.
    let adopted = !resident.is_some_and(|z| z.holds_orphans());
    let mut leaks = sweep(spec, sampler.seen.clone(), adopted).await;
    let (stdout, stderr, held_open) = collect_output(out_task, err_task).await;
    if held_open {
        leaks.push(Leak {
            pid: 0,
            command: "an unknown process outside the script's tree held its output open".into(),
        });
    }
    // What the samples' pace left unread at the end, the script read as it exited.
    let jax = telemetry::take(&spec.telemetry);
    if let Some(pss) = jax.exit_pss_bytes {
        sampler.count_exit(pss, exit.max_rss_bytes);
    }
    // The kernel's figures where the samples fall short: the cgroup's own peak, and
    // for a script too short to be sampled, the largest process's resident size.
    let sampled = sampler.peak.total();
    let (peak, memory_source) = match (cgroup_peak, sampled) {
        (Some(p), _) if p > sampled => (p, MemorySource::Cgroup),
        _ if !sampler.measured => (exit.max_rss_bytes, MemorySource::Rss),
        (_, 0) if exit.max_rss_bytes > 0 => (exit.max_rss_bytes, MemorySource::Rss),
        _ => (sampled, sampler.peak_source),
    };
    let outcome = AttemptOutcome {
        started_at,
        duration,
        peak_rss_bytes: peak,
        memory_source,
        peak_scratch_bytes: sampler.peak.scratch,
        exit,
        stopped_by,
        stdout,
        stderr,
        leaks,
        kernel_oom_kill: matches!((oom_before, reaper::oom_kill_count()), (Some(a), Some(b)) if b > a),
        refused_forks: spec.cgroup.as_ref().map_or(0, |c| c.refused_forks()),
        sampled_cpu: sampler.cpu_seconds(),
        capabilities,
        gpu_device_opened: sampler.gpu_looked.then_some(sampler.gpu_opened),
        gpu: gpu.as_ref().and_then(GpuSampler::usage),
        start,
    };
    Ok((outcome, jax))
}

/// Kills what the attempt left running outside its group, found by its token, and
/// names it.
async fn sweep(spec: &AttemptSpec, seen: Vec<u32>, adopted: bool) -> Vec<Leak> {
    let token = spec.token.clone();
    let init = spec
        .sandbox
        .as_ref()
        .and_then(|sb| sb.bwrap_path())
        .map(|p| p.to_string_lossy().into_owned());
    let cgroup = spec.cgroup.clone();
    tokio::task::spawn_blocking(move || {
        let mut leaks = reaper::sweep(&token, &seen, adopted, init.as_deref());
        // What the sweep cannot see (a process that cleared its token and left the
        // group and session) is still in the attempt's cgroup.
        if let Some(cg) = cgroup {
            leaks.extend(reaper::cgroup_leftovers(&cg, &leaks, init.as_deref()));
        }
        leaks
    })
    .await
    .unwrap_or_default()
}

/// Watches a running attempt until it exits: samples its tree, enforces the time
/// limit, the memory and process watchdogs, and stop requests. Returns how it exited,
/// why the runner stopped it (if it did) and the sampler's figures.
async fn supervise(
    pid: libc::pid_t,
    spec: &AttemptSpec,
    stop: &mut watch::Receiver<Stop>,
    mut waiter: tokio::task::JoinHandle<std::io::Result<Exit>>,
    started: Instant,
    plumbing: Option<u32>,
    fresh_fork: bool,
) -> Result<Supervised, AttemptError> {
    let mut sampler = TreeSampler::default();
    sampler.scratch = spec.scratch.clone().map(ScratchGauge::new);
    sampler.cgroup = spec.cgroup.clone();
    let mut gpu = spec.gpu.clone().map(GpuSampler::start);
    let mut gpu_now = None;
    sampler.plumbing = plumbing;
    sampler.watch_limit = spec.memory_limit;
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    let deadline = TokioInstant::now() + spec.timeout;
    let mut stopped_by = None;
    let mut stopping = Stopping::Running;
    let far = TokioInstant::now() + Duration::from_secs(365 * 24 * 3600);

    let mut ticks: u32 = 0;
    let mut caps: Option<u64> = None;
    let exit = loop {
        tokio::select! {
            res = &mut waiter => {
                break res
                    .map_err(|e| AttemptError::Wait(std::io::Error::other(e)))?
                    .map_err(AttemptError::Wait)?;
            }
            _ = ticker.tick() => {
                ticks += 1;
                // A slot's fork at its first tick holds the zygote's pages and nothing
                // of the script's yet: its processes are read, its memory is not (a
                // walk of the zygote's page tables, 4 ms of the runner's CPU for each
                // script; one that ends before the next tick has the kernel's peak,
                // less those pages).
                let held = match ticks == 1 && fresh_fork {
                    true => {
                        sampler.observe(pid as u32);
                        None
                    }
                    false => Some(sampler.sample(pid as u32)),
                };
                if ticks % GPU_LOOK_EVERY == 0 {
                    sampler.look_for_gpu();
                }
                // The first sample too, so a short script still gets a GPU reading.
                if ticks % GPU_LOOK_EVERY == 1 {
                    if let Some(g) = gpu.as_mut() {
                        gpu_now = g.sample(&sampler.last_pids);
                    }
                }
                if let Some(seen) = script_capabilities(&sampler.last_pids, spec, plumbing) {
                    caps = Some(caps.unwrap_or(0) | seen);
                }
                let Some(held) = held else { continue };
                if let Some(sink) = spec.samples.as_ref().filter(|_| ticks % SAMPLES_PER_EVENT == 0) {
                    sink.events.emit(crate::events::RunEvent::Sample {
                        id: sink.id.clone(),
                        attempt: sink.attempt,
                        elapsed_s: started.elapsed().as_secs_f64(),
                        rss_mb: held.rss as f64 / (1024.0 * 1024.0),
                        processes: sampler.last_count,
                        gpu_memory_mb: gpu_now.map(|g| g.memory_mb),
                        gpu_utilization_pct: gpu_now.and_then(|g| g.utilization_pct),
                    });
                }
                // The watchdogs stand in only for limits the kernel does not enforce.
                let kernel = |f: fn(&super::limits::AttemptCgroup) -> bool| spec.cgroup.as_deref().is_some_and(f);
                // A scratch the cgroup is not charged for (the private folder on the
                // host's disk) is the watchdog's to count even under a cgroup.
                let uncharged = spec.scratch.as_ref().is_some_and(|p| !p.charged_to_cgroup());
                let over_memory = (!kernel(super::limits::AttemptCgroup::enforces_memory) || uncharged)
                    && spec.memory_limit.is_some_and(|limit| held.total() > limit);
                let over_procs = !kernel(super::limits::AttemptCgroup::enforces_pids)
                    && spec.max_procs.is_some_and(|max| sampler.last_tasks > max as usize);
                if (over_memory || over_procs) && stopped_by.is_none() {
                    stopped_by = Some(if over_memory { StoppedBy::MemoryLimit } else { StoppedBy::ProcessLimit });
                    tracing::debug!(pid, rss = held.rss, scratch = held.scratch, count = sampler.last_count, "limit reached: SIGKILL to the process group");
                    sys::kill_group(pid, libc::SIGKILL);
                }
            }
            _ = sleep_until(deadline), if stopped_by.is_none() => {
                tracing::debug!(pid, "timeout: the script is stopped");
                stopped_by = Some(StoppedBy::Timeout);
                stopping = Stopping::begin(pid, spec, plumbing);
            }
            _ = sleep_until(stopping.due().unwrap_or(far)), if stopping.due().is_some() => {
                stopping.advance(pid, spec);
            }
            changed = stop.changed() => {
                if changed.is_err() {
                    continue; // the controller is gone; nothing more will come
                }
                let level = *stop.borrow_and_update();
                // A script that exited before the stop reached it keeps its own
                // outcome: the waiter reaps it on the next turn.
                if level != Stop::Run && stopped_by.is_none() && sys::has_exited(pid) {
                    continue;
                }
                match level {
                    Stop::Run => {}
                    Stop::Graceful if stopped_by.is_none() => {
                        stopped_by = Some(StoppedBy::Interrupt);
                        stopping = Stopping::begin(pid, spec, plumbing);
                    }
                    Stop::Graceful => {}
                    Stop::Kill => {
                        stopped_by.get_or_insert(StoppedBy::Interrupt);
                        stopping = stop::kill(pid);
                    }
                }
            }
        }
    };
    Ok((exit, stopped_by, sampler, caps, gpu))
}

/// What [`supervise`] brings back: how the attempt exited, why the runner stopped it
/// (if it did), the tree's and the GPU's samplers, and the capabilities seen.
type Supervised = (
    Exit,
    Option<StoppedBy>,
    TreeSampler,
    Option<u64>,
    Option<GpuSampler>,
);

/// The effective capabilities of the script's processes (bwrap's own and the
/// `__sandbox-exec` helper's aside), OR-ed, from the kernel's view in `/proc`: what the
/// script could really do, whatever it reports about itself. `None` while none of its
/// processes is visible. `init`, a warm sandbox's namespace init, is the runner's
/// plumbing, not the script.
fn script_capabilities(tree: &[u32], spec: &AttemptSpec, init: Option<u32>) -> Option<u64> {
    let plumbing: Vec<&std::path::Path> = spec
        .sandbox
        .iter()
        .flat_map(|sb| sb.bwrap_path().into_iter().chain([sb.helper.as_path()]))
        .collect();
    let mut seen = None;
    for &p in tree.iter().filter(|p| Some(**p) != init) {
        let exe = std::fs::read_link(format!("/proc/{p}/exe")).ok();
        if exe.is_some_and(|e| plumbing.contains(&e.as_path())) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/status")) else {
            continue;
        };
        if let Some(cap) = sys::status_mask(&status, "CapEff:") {
            seen = Some(seen.unwrap_or(0) | cap);
        }
    }
    seen
}

/// Waits for both pipes to reach end-of-file. Leftovers were killed already; a pipe
/// still open after that is held by a process outside the tree, so reading stops,
/// what the pipe still holds is read, and the rest is left.
async fn collect_output(out: Drainer, err: Drainer) -> (Drained, Drained, bool) {
    let deadline = TokioInstant::now() + PIPE_CLOSE_WAIT;
    let finish = |d: Drainer| {
        let mut handle = d.handle;
        async move {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(r) => r.unwrap_or_default(),
                Err(_) => {
                    let _ = d.stop.send(true);
                    handle.await.unwrap_or_default()
                }
            }
        }
    };
    let (o, e) = tokio::join!(finish(out), finish(err));
    let held_open = o.held_open || e.held_open;
    (o, e, held_open)
}
