//! The retry and fallback loop against a fake backend: no Python, no processes, only
//! the decisions (retries by class, the GPU→CPU fallback latching for the run,
//! interruption).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::*;
use crate::config::{test_options, RunConfig};
use crate::model::{DiscoveredBy, Status};
use crate::plan::Plan;
use crate::runner::attempt::{AttemptFuture, AttemptOutcome, Attempted, Backend, Start};
use crate::runner::output::Drained;
use crate::runner::slots::Slots;
use crate::runner::sys::Exit;

/// How the fake ends an attempt.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ending {
    Exit(i32),
    Signal(i32),
    /// Exit 1 with jax's "cannot initialise cuda" line on stderr.
    GpuBroken,
    /// Killed by SIGKILL (retried by default) while its stdout log hit a full disk.
    DiskFull,
    /// Exit 1 with XLA's out-of-GPU-memory line on stderr.
    GpuOom,
    /// Leaves `kept.txt`, a FIFO `pipe` and a symlink `sub/link` to `/etc/passwd` in
    /// its data folder, then is killed by SIGKILL (retried by default).
    LeavesSpecials,
    /// A job the cluster lost before its record came back, as its backend reports it:
    /// killed by SIGKILL, the Slurm job (`NODE_FAIL` on `node7`) beside it.
    SlurmLost,
    /// The same on Ray: the job `FAILED` with `JOB_SUPERVISOR_ACTOR_DIED`.
    RayLost,
}

/// Plays a list of endings per script id, one per attempt, and remembers what it was
/// asked for.
#[derive(Debug, Default)]
pub(super) struct Fake {
    plays: Mutex<std::collections::HashMap<String, Vec<Ending>>>,
    pub(super) asked: Mutex<Vec<(String, u32, Platform)>>,
    /// The GPU each attempt was given, in the same order.
    pub(super) gpus: Mutex<Vec<Option<crate::gpu::share::GpuSlot>>>,
    /// Raised to `Graceful` when an attempt of this script starts.
    interrupt_on: Option<(String, watch::Sender<Stop>)>,
    /// How long each attempt takes (none: it ends at once) and the wall time it
    /// reports (5 ms unless set).
    pace: Option<(Duration, Duration)>,
    /// Attempts running now, and the most that ran at once.
    running: std::sync::atomic::AtomicUsize,
    pub(super) most_at_once: std::sync::atomic::AtomicUsize,
}

impl Backend for Fake {
    fn run<'a>(
        &'a self,
        req: AttemptRequest<'a>,
        _stop: watch::Receiver<Stop>,
    ) -> AttemptFuture<'a> {
        Box::pin(async move {
            let id = req.script.id.clone();
            self.asked
                .lock()
                .unwrap()
                .push((id.clone(), req.number, req.platform));
            self.gpus.lock().unwrap().push(req.gpu.cloned());
            if let Some((victim, tx)) = &self.interrupt_on {
                if *victim == id {
                    tx.send_replace(Stop::Graceful);
                }
            }
            let ending = self.plays.lock().unwrap().get_mut(&id).unwrap().remove(0);
            let now = self
                .running
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1;
            self.most_at_once
                .fetch_max(now, std::sync::atomic::Ordering::SeqCst);
            if let Some((takes, _)) = self.pace {
                tokio::time::sleep(takes).await;
            }
            self.running
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            let mut stderr = Drained::default();
            let mut stdout = Drained::default();
            let (code, signal) = match ending {
                Ending::DiskFull => {
                    stdout.disk_full = true;
                    stdout.write_error = Some("No space left on device (os error 28)".into());
                    (None, Some(9))
                }
                Ending::Exit(c) => (Some(c), None),
                Ending::LeavesSpecials => {
                    std::fs::create_dir_all(req.data_dir.join("sub")).unwrap();
                    std::fs::write(req.data_dir.join("kept.txt"), "x").unwrap();
                    rustix::fs::mkfifoat(
                        rustix::fs::CWD,
                        req.data_dir.join("pipe"),
                        rustix::fs::Mode::from(0o644),
                    )
                    .unwrap();
                    std::os::unix::fs::symlink("/etc/passwd", req.data_dir.join("sub/link"))
                        .unwrap();
                    (None, Some(9))
                }
                Ending::Signal(s) => (None, Some(s)),
                Ending::SlurmLost | Ending::RayLost => (None, Some(9)),
                Ending::GpuOom => {
                    let line = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB.";
                    stderr.scan.line(line.as_bytes());
                    stderr.tail.push(line.into());
                    (Some(1), None)
                }
                Ending::GpuBroken => {
                    let line = "RuntimeError: Unable to initialize backend 'cuda': no device";
                    stderr.scan.line(line.as_bytes());
                    stderr.tail.push(line.into());
                    (Some(1), None)
                }
            };
            let outcome = AttemptOutcome {
                started_at: SystemTime::now(),
                duration: self.pace.map_or(Duration::from_millis(5), |p| p.1),
                exit: Exit {
                    code,
                    signal,
                    user_cpu: Duration::ZERO,
                    system_cpu: Duration::ZERO,
                    max_rss_bytes: 0,
                },
                stopped_by: None,
                peak_rss_bytes: 0,
                memory_source: crate::model::MemorySource::Pss,
                peak_scratch_bytes: 0,
                stdout,
                stderr,
                leaks: Vec::new(),
                kernel_oom_kill: false,
                refused_forks: 0,
                sampled_cpu: (0.0, 0.0),
                capabilities: None,
                gpu_device_opened: None,
                gpu: None,
                start: Start::Cold,
            };
            Ok(Attempted {
                outcome,
                jax: Default::default(),
                ray: matches!(ending, Ending::RayLost).then(|| crate::model::RayJob {
                    job_id: format!("{id}-{}", req.number),
                    status: "FAILED".into(),
                    error_type: Some("JOB_SUPERVISOR_ACTOR_DIED".into()),
                    message: Some("Job supervisor actor died: gone.\nlog".into()),
                    ..Default::default()
                }),
                slurm: matches!(ending, Ending::SlurmLost).then(|| crate::model::SlurmJob {
                    job_id: "7".into(),
                    state: "NODE_FAIL".into(),
                    node: Some("node7".into()),
                    ..Default::default()
                }),
                enforced: Default::default(),
            })
        })
    }
}

pub(super) fn script(id: &str) -> Script {
    Script {
        id: id.into(),
        path: format!("/nonexistent/{id}.py").into(),
        relative_path: format!("{id}.py").into(),
        discovered_by: DiscoveredBy::JaxFolder,
        size_bytes: 1,
    }
}

/// A context over `fake`: `retries` retries, GPU or CPU, no delay.
fn context(dir: &std::path::Path, fake: Arc<Fake>, platform: Platform, retries: u32) -> RunContext {
    let mut opts = test_options(dir);
    opts.retries = retries;
    opts.retry_delay = Duration::ZERO;
    context_with(opts, fake, platform)
}

pub(super) fn context_with(
    opts: crate::config::RunOptions,
    fake: Arc<Fake>,
    platform: Platform,
) -> RunContext {
    let config = RunConfig::from_options(opts).unwrap();
    RunContext {
        config: Arc::new(config),
        plan: Arc::new(Plan {
            platform,
            jobs: 1,
            spare: 0,
            gpu_unusable: None,
            reason: "test".into(),
            gpu: None,
        }),
        backend: fake,
        gpu_broken: Mutex::new(None),
        sandbox_info: Default::default(),
        data_dirs: Default::default(),
        record_files: Default::default(),
        settings: Default::default(),
        fingerprints: Default::default(),
        device_times: Default::default(),
        families: Default::default(),
        earlier_logs: Default::default(),
        spare_opened: Default::default(),
        halt: Default::default(),
        fail_budget: crate::runner::budget::FailBudget::new(None),
    }
}

pub(super) async fn run(ctx: &RunContext, id: &str, stop: watch::Receiver<Stop>) -> ScriptResult {
    let (events, mut rx) = EventSender::channel();
    let slots = Slots::new(1);
    let lease = slots.acquire().await;
    run_script(ctx, &script(id), lease, &slots, &events, stop).await;
    drop(events);
    let mut last = None;
    while let Some(e) = rx.recv().await {
        if let RunEvent::ScriptFinished { result } = e {
            last = Some(*result);
        }
    }
    last.expect("the script finished")
}

pub(super) fn fake(plays: &[(&str, &[Ending])]) -> Fake {
    Fake {
        plays: Mutex::new(
            plays
                .iter()
                .map(|(id, e)| (id.to_string(), e.to_vec()))
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn retries_only_the_classes_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("killed", &[Ending::Signal(9), Ending::Exit(0)]),
        ("broken", &[Ending::Exit(3), Ending::Exit(0)]),
    ]));
    let ctx = context(tmp.path(), f.clone(), Platform::Cpu, 2);
    let (_tx, stop) = watch::channel(Stop::Run);
    // Killed by a signal: retried by default, and the retry succeeded.
    let killed = run(&ctx, "killed", stop.clone()).await;
    assert_eq!(killed.status, Status::Succeeded);
    assert_eq!(killed.attempts.len(), 2);
    assert_eq!(killed.attempts[0].class, FailureClass::KilledBySignal);
    // A script error is not retried by default: one attempt, failed, exit code kept.
    let broken = run(&ctx, "broken", stop).await;
    assert_eq!(broken.attempts.len(), 1);
    assert_eq!(broken.class, FailureClass::ScriptError);
    assert_eq!(broken.return_code, Some(3));
}

/// A job its cluster lost (a Slurm node failure, a Ray supervisor's death) is retried as
/// a killed script is, and its attempt names what the cluster said.
#[tokio::test]
async fn a_job_the_cluster_lost_is_retried_and_names_what_the_cluster_said() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("slurm", &[Ending::SlurmLost, Ending::Exit(0)]),
        ("ray", &[Ending::RayLost, Ending::Exit(0)]),
    ]));
    let ctx = context(tmp.path(), f, Platform::Cpu, 1);
    let (_tx, stop) = watch::channel(Stop::Run);
    for (id, line) in [
        ("slurm", "Slurm job 7 ended NODE_FAIL on node7"),
        (
            "ray",
            "Ray job ray-1 failed on the cluster (JOB_SUPERVISOR_ACTOR_DIED): Job supervisor \
             actor died: gone.",
        ),
    ] {
        let r = run(&ctx, id, stop.clone()).await;
        assert_eq!(r.status, Status::Succeeded, "{id}");
        assert_eq!(r.attempts.len(), 2, "{id}");
        assert_eq!(r.attempts[0].class, FailureClass::KilledBySignal, "{id}");
        assert_eq!(r.attempts[0].matched_line.as_deref(), Some(line), "{id}");
    }
}

#[tokio::test]
async fn a_broken_gpu_falls_back_once_and_for_the_rest_of_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("first", &[Ending::GpuBroken, Ending::Exit(0)]),
        ("second", &[Ending::Exit(0)]),
    ]));
    let ctx = context(tmp.path(), f.clone(), Platform::Gpu, 0);
    let (_tx, stop) = watch::channel(Stop::Run);
    let first = run(&ctx, "first", stop.clone()).await;
    assert_eq!(first.status, Status::Succeeded, "the CPU attempt worked");
    let fell = first.fallback.expect("a fallback is recorded");
    assert_eq!((fell.from, fell.to), (Platform::Gpu, Platform::Cpu));
    assert!(
        fell.reason.contains("Unable to initialize backend"),
        "{}",
        fell.reason
    );
    // The fallback is not a retry: retries are 0, yet a second attempt ran.
    assert_eq!(first.attempts.len(), 2);
    // Latched: the next script starts on the CPU without trying the GPU.
    let second = run(&ctx, "second", stop).await;
    assert_eq!(second.attempts.len(), 1);
    assert_eq!(second.attempts[0].device, Platform::Cpu);
    assert!(second.fallback.is_some());
    let asked = f.asked.lock().unwrap().clone();
    let platforms: Vec<Platform> = asked.iter().map(|(_, _, p)| *p).collect();
    assert_eq!(platforms, vec![Platform::Gpu, Platform::Cpu, Platform::Cpu]);
}

#[tokio::test]
async fn an_interrupted_run_does_not_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let (tx, stop) = watch::channel(Stop::Run);
    let mut f = fake(&[("killed", &[Ending::Signal(9), Ending::Exit(0)])]);
    f.interrupt_on = Some(("killed".into(), tx));
    let f = Arc::new(f);
    let ctx = context(tmp.path(), f.clone(), Platform::Cpu, 3);
    let r = run(&ctx, "killed", stop).await;
    assert_eq!(r.attempts.len(), 1, "no retry after the stop request");
    assert_eq!(f.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_script_waiting_for_its_retry_gives_its_slot_to_the_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("flaky", &[Ending::Signal(9), Ending::Exit(0)]),
        ("next", &[Ending::Exit(0)]),
    ]));
    let mut opts = test_options(tmp.path());
    opts.retries = 1;
    // Long enough that the queued script surely starts inside the wait.
    opts.retry_delay = Duration::from_millis(400);
    let ctx = Arc::new(context_with(opts, f.clone(), Platform::Cpu));
    let (_tx, stop) = watch::channel(Stop::Run);
    let (events, _rx) = EventSender::channel();
    let lines =
        crate::runner::run_all(ctx, vec![script("flaky"), script("next")], events, stop).await;
    assert!(lines.iter().all(|l| l.status == Status::Succeeded));
    let order: Vec<(String, u32)> = f
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(id, n, _)| (id.clone(), *n))
        .collect();
    // One job: `next` ran while `flaky` waited for its retry, not after it.
    assert_eq!(
        order,
        vec![("flaky".into(), 1), ("next".into(), 1), ("flaky".into(), 2)]
    );
}

#[tokio::test]
async fn a_full_disk_starts_nothing_more_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[
        ("full", &[Ending::DiskFull, Ending::Exit(0)]),
        ("later", &[Ending::Exit(0)]),
        ("last", &[Ending::Exit(0)]),
    ]));
    let ctx = Arc::new(context(tmp.path(), f.clone(), Platform::Cpu, 1));
    let (_tx, stop) = watch::channel(Stop::Run);
    let (events, mut rx) = EventSender::channel();
    let scripts = vec![script("full"), script("later"), script("last")];
    let lines = crate::runner::run_all(ctx.clone(), scripts, events, stop).await;
    assert_eq!(
        f.asked.lock().unwrap().len(),
        1,
        "no retry, nothing else started"
    );
    assert!(ctx.halt.reason().unwrap().path.ends_with("full.stdout.log"));
    assert_eq!(lines[1].status, Status::Interrupted);
    assert_eq!(lines[1].attempts, 0);
    while let Some(e) = rx.recv().await {
        if let RunEvent::ScriptFinished { result } = e {
            if result.id == "last" {
                let why = result.stderr_tail.join("\n");
                assert!(why.contains("not started") && why.contains("full"), "{why}");
            }
        }
    }
}

/// Every path below `dir` that is neither a regular file nor a folder (not followed).
fn specials_below(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.extend(specials_below(&entry.path()));
        } else if !kind.is_file() {
            out.push(entry.path());
        }
    }
    out
}

/// Each attempt's data folder is tidied as the attempt ends, a failed one too: what
/// the retry moves to the history, and what the last attempt leaves, hold only
/// regular files and folders, and each removal is named once.
#[tokio::test]
async fn every_attempt_leaves_only_regular_files_and_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Arc::new(fake(&[(
        "leaves",
        &[Ending::LeavesSpecials, Ending::LeavesSpecials],
    )]));
    let ctx = context(tmp.path(), f, Platform::Cpu, 1);
    let (_tx, stop) = watch::channel(Stop::Run);
    let r = run(&ctx, "leaves", stop).await;
    assert_eq!(r.attempts.len(), 2);
    assert_eq!(specials_below(tmp.path()), Vec::<std::path::PathBuf>::new());
    let history = ctx.ledger().history().join("attempts/leaves/attempt1");
    assert!(history.join("kept.txt").is_file(), "{history:?}");
    assert_eq!(r.data_files, vec!["kept.txt".to_string()]);
    let kept = "from the data folder: only regular files and folders are kept";
    assert_eq!(
        r.problems,
        vec![
            format!("removed fifo `pipe` {kept}"),
            format!("removed symlink `sub/link` {kept}"),
        ]
    );
}

/// Runs `n` scripts that each take 20 ms and report `reported` as their wall time, on
/// one planned slot that may open `spare` more; returns the most that ran at once and
/// the spare slots the run says it opened.
async fn run_many(n: usize, reported: Duration, spare: usize) -> (usize, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let plays: Vec<(&str, &[Ending])> = ids
        .iter()
        .map(|id| (id.as_str(), &[Ending::Exit(0)][..]))
        .collect();
    let mut f = fake(&plays);
    f.pace = Some((Duration::from_millis(20), reported));
    let f = Arc::new(f);
    let mut ctx = context(tmp.path(), f.clone(), Platform::Cpu, 0);
    ctx.plan = Arc::new(Plan {
        spare,
        ..(*ctx.plan).clone()
    });
    let ctx = Arc::new(ctx);
    let (_tx, stop) = watch::channel(Stop::Run);
    let (events, _rx) = EventSender::channel();
    let scripts = ids.iter().map(|id| script(id)).collect();
    let lines = crate::runner::run_all(ctx.clone(), scripts, events, stop).await;
    assert!(lines.iter().all(|l| l.status == Status::Succeeded));
    let opened = ctx.spare_opened.load(std::sync::atomic::Ordering::SeqCst);
    (
        f.most_at_once.load(std::sync::atomic::Ordering::SeqCst),
        opened,
    )
}

#[tokio::test]
async fn short_scripts_open_the_spare_slot_and_run_one_more_at_once() {
    // One slot: a window is 4 ended scripts, then the spare opens with 16 left.
    let (most, opened) = run_many(20, Duration::from_millis(5), 1).await;
    assert_eq!(opened, 1);
    assert_eq!(most, 2, "the planned slot and the spare ran side by side");
}

#[tokio::test]
async fn long_scripts_or_a_plan_without_leave_keep_to_the_planned_slots() {
    let (most, opened) = run_many(20, Duration::from_millis(300), 1).await;
    assert_eq!((most, opened), (1, 0), "scripts of 300 ms do not open it");
    let (most, opened) = run_many(20, Duration::from_millis(5), 0).await;
    assert_eq!(
        (most, opened),
        (1, 0),
        "no spare where the plan allows none"
    );
}
