//! Stage 2, run: execute every discovered script in its own process group, in
//! parallel up to the job limit, and turn each into a [`ScriptResult`]. Progress goes
//! out as [`RunEvent`]s; nothing here prints.

pub mod attempt;
pub mod backends;
pub mod budget;
pub mod capacity;
mod child;
pub mod classify;
pub mod env;
pub mod families;
pub mod homes;
pub mod limits;
mod output;
pub mod pace;
pub mod ray;
pub mod reaper;
pub mod scratch;
mod script;
pub mod sentinel;
mod slots;
pub mod slurm;
pub mod spare;
pub mod sys;
pub mod telemetry;
pub mod tree;
pub mod zygote;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinSet;

pub use crate::retry::RetryPolicy;
pub use attempt::{AttemptError, AttemptOutcome, AttemptSpec, Backend, StoppedBy};

use crate::config::RunConfig;
use crate::discovery::Script;
use crate::events::{EventSender, RunEvent};
use crate::halt::Halt;
use crate::model::{ScriptResult, ScriptSummary};
use crate::plan::Plan;

/// A request to stop, escalating: the controller only ever raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    /// Keep going.
    Run,
    /// Start nothing new; SIGTERM running scripts, SIGKILL after the grace period.
    Graceful,
    /// SIGKILL running scripts now.
    Kill,
}

/// What every script of a run shares: the validated options and the plan, shared
/// rather than copied, and the backend that runs attempts.
#[derive(Debug)]
pub struct RunContext {
    pub config: Arc<RunConfig>,
    pub plan: Arc<Plan>,
    /// Runs each attempt (local processes or Ray jobs).
    pub backend: Arc<dyn Backend>,
    /// Set once the GPU environment is known to be broken in this run, with the
    /// reason, so later scripts start on the CPU instead of failing one by one.
    pub gpu_broken: Mutex<Option<String>>,
    /// What every result says about isolation (per-script details are filled in).
    pub sandbox_info: crate::model::SandboxInfo,
    /// Data folders other than `RESULTS/data/<id>` (GNN's layout), by script id.
    pub data_dirs: std::collections::HashMap<String, PathBuf>,
    /// Files of a script's record besides its result, logs and data folder (GNN's
    /// `execution_logs/` files), by script id: kept in the history with the rest.
    pub record_files: std::collections::HashMap<String, Vec<PathBuf>>,
    /// Each script's settings, as the schedule worked them out (by script id).
    pub settings: std::collections::HashMap<String, crate::config::ScriptSettings>,
    /// Each script's fingerprint (see [`crate::results::fingerprint`]).
    pub fingerprints: std::collections::HashMap<String, crate::results::fingerprint::Fingerprint>,
    /// Each script's seconds per device in earlier runs (`--device auto` learns).
    pub device_times: std::collections::HashMap<String, crate::model::DeviceTimes>,
    /// Raised when the runner's own files cannot be written: nothing starts after.
    pub halt: Halt,
    /// `--fail-fast`/`--max-fail`: spent, it lets no script start.
    pub fail_budget: budget::FailBudget,
    /// Scripts that wait for their family's first to fill the compilation cache, by
    /// id, with their family (see [`families`]).
    pub families: std::collections::HashMap<String, u64>,
    /// The logs earlier runs left, by script: read before the run writes any.
    pub earlier_logs: crate::results::archive::EarlierLogs,
    /// Spare slots the run opened (see [`spare`]), for its record.
    pub spare_opened: std::sync::atomic::AtomicUsize,
}

/// A script's data folder outside GNN's layout: `RESULTS/data/<id>`.
pub fn default_data_dir(results_dir: &std::path::Path, id: &str) -> PathBuf {
    results_dir.join("data").join(id)
}

impl RunContext {
    /// The settings of `script`: the schedule's, or (a context built without a
    /// schedule, as unit tests build one) worked out now.
    fn settings_of(&self, script: &Script) -> crate::config::ScriptSettings {
        self.settings.get(&script.id).cloned().unwrap_or_else(|| {
            crate::config::settings_for(&self.config, &script.id, &script.relative_path)
        })
    }

    fn logs_dir(&self) -> PathBuf {
        self.config
            .results_dir
            .join(crate::results::archive::LOGS_DIR)
    }

    fn data_dir(&self, id: &str) -> PathBuf {
        self.data_dirs
            .get(id)
            .cloned()
            .unwrap_or_else(|| default_data_dir(&self.config.results_dir, id))
    }

    /// Log files of attempt `n`: the first keeps the plain names.
    fn log_paths(&self, id: &str, n: u32) -> (PathBuf, PathBuf) {
        let stem = if n == 1 {
            id.to_string()
        } else {
            format!("{id}.attempt{n}")
        };
        let dir = self.logs_dir();
        (
            dir.join(format!("{stem}.stdout.log")),
            dir.join(format!("{stem}.stderr.log")),
        )
    }

    /// Where this run keeps the records it replaces.
    fn ledger(&self) -> crate::results::archive::Ledger {
        crate::results::archive::Ledger::of(&self.config)
    }

    /// Keeps a script's earlier record in the history (see
    /// [`crate::results::archive::Ledger::archive_record`]); what could not be kept is noted on
    /// `result`.
    fn archive_record(&self, id: &str, data_dir: &std::path::Path, result: &mut ScriptResult) {
        let extra = self.record_files.get(id).map_or(&[][..], Vec::as_slice);
        let ledger = self.ledger();
        for e in ledger.archive_record(id, data_dir, extra, &self.earlier_logs) {
            result.note_problem(crate::error::chain(&e).join(": "));
        }
    }

    fn gpu_unusable(&self) -> Option<String> {
        self.gpu_broken.lock().ok()?.clone()
    }

    fn mark_gpu_unusable(&self, reason: &str) {
        if let Ok(mut broken) = self.gpu_broken.lock() {
            broken.get_or_insert_with(|| {
                format!("the GPU environment failed earlier in this run: {reason}")
            });
        }
    }
}

/// Runs all scripts and returns their summary lines in the order given; whole
/// results go out through the events (and to disk) as each script finishes. After a
/// stop request or a [`Halt`] no script starts; those left get a result that says why.
pub async fn run_all(
    ctx: Arc<RunContext>,
    scripts: Vec<Script>,
    events: EventSender,
    stop: watch::Receiver<Stop>,
) -> Vec<ScriptSummary> {
    let slots = slots::Slots::new(ctx.plan.jobs);
    let budget = &ctx.fail_budget;
    // What running scripts obey: the run's stop, raised by `--fail-fast=now` too. The
    // loop below keeps the run's own, so the scripts left are skipped, not interrupted.
    let script_stop = budget::stop_for_scripts(&ctx, stop.clone());
    let mut tasks = JoinSet::new();
    let mut not_started = Vec::new();
    let mut skipped = Vec::new();
    let mut ends = Ends {
        gates: families::Gates::new(ctx.families.clone(), scripts.iter().map(|s| s.id.as_str())),
        results: vec![None; scripts.len()],
        spare: spare::Spare::new(ctx.plan.jobs, ctx.plan.spare),
        slots: &slots,
        ctx: &ctx,
    };
    let mut queue: std::collections::VecDeque<(usize, Script)> =
        scripts.into_iter().enumerate().collect();

    while !queue.is_empty() {
        let mut stop_rx = stop.clone();
        let lease = tokio::select! {
            lease = slots.acquire() => Some(lease),
            _ = stop_rx.wait_for(|s| *s != Stop::Run) => None,
            _ = ctx.halt.raised() => None,
            _ = budget.spent() => None,
        };
        let stopped = || *stop.borrow() != Stop::Run || ctx.halt.is_raised();
        let picked = match lease {
            Some(_) if stopped() || budget.is_spent() => None,
            Some(_) => next_to_start(&mut queue, &mut ends, &mut tasks, &stop).await,
            None => None,
        };
        let (Some(lease), Some((index, script))) = (lease, picked) else {
            // Nothing more starts: the stop or the halt leave the rest not started,
            // the spent budget skips them.
            let left = queue.drain(..);
            match !stopped() && budget.is_spent() {
                true => skipped.extend(left),
                false => not_started.extend(left),
            }
            break;
        };
        ends.gates.started(&script.id, std::time::Instant::now());
        let (task_ctx, events, task_slots) = (ctx.clone(), events.clone(), slots.clone());
        let stop = script_stop.clone();
        // Spawned tasks run on tokio's worker threads, which live as long as the run:
        // the children's death signal is tied to the thread that forked them.
        tasks.spawn(async move {
            let (ctx, slots) = (task_ctx, task_slots);
            let result = script::run_script(&ctx, &script, lease, &slots, &events, stop).await;
            (index, result)
        });
        // Finished tasks hold their whole future until joined: join them as we go so
        // memory stays flat however many scripts the run has.
        while let Some(joined) = tasks.try_join_next() {
            ends.joined(joined.expect("script task does not panic"), queue.len());
        }
    }
    let why = match ctx.halt.reason() {
        Some(reason) if *stop.borrow() == Stop::Run => match reason.kind {
            crate::halt::HaltKind::DiskFull => format!(
                "the runner's file system is full (writing {} failed)",
                reason.path.display()
            ),
            crate::halt::HaltKind::NotShared => reason.to_string(),
        },
        _ => "the run was interrupted".into(),
    };
    let skip_why = budget.reason();
    let unstarted = not_started
        .into_iter()
        .map(|s| (s, &why, false))
        .chain(skipped.into_iter().map(|s| (s, &skip_why, true)));
    let mut results = ends.results;
    for ((index, script), why, skip) in unstarted {
        results[index] = Some(not_run(&ctx, &script, why, skip, &events));
    }
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined.expect("script task does not panic");
        results[index] = Some(result);
    }
    results
        .into_iter()
        .map(|r| r.expect("every script has a result"))
        .collect()
}

/// The next script to start, now that a slot is free: the first in the queue that its
/// family's gate lets start. While every script left waits on its family's first,
/// the scripts running are joined as they end (which opens their families) until
/// one may start; `None` when the run stops, halts or spends its budget meanwhile.
async fn next_to_start(
    queue: &mut std::collections::VecDeque<(usize, Script)>,
    ends: &mut Ends<'_>,
    tasks: &mut JoinSet<(usize, ScriptSummary)>,
    stop: &watch::Receiver<Stop>,
) -> Option<(usize, Script)> {
    let ctx = ends.ctx;
    loop {
        let now = std::time::Instant::now();
        if let Some(pos) = queue
            .iter()
            .position(|(_, s)| ends.gates.may_start(&s.id, now))
        {
            return queue.remove(pos);
        }
        let mut stop_rx = stop.clone();
        let opening = ends
            .gates
            .next_opening()
            .map(tokio::time::Instant::from_std);
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => {
                    ends.joined(joined.expect("script task does not panic"), queue.len());
                }
                // Nothing running is left to wait for.
                None => ends.gates.open_all(),
            },
            _ = tokio::time::sleep_until(opening.unwrap_or(far)), if opening.is_some() => {}
            _ = stop_rx.wait_for(|s| *s != Stop::Run) => return None,
            _ = ctx.halt.raised() => return None,
            _ = ctx.fail_budget.spent() => return None,
        }
    }
}

/// What the run loop keeps of the scripts it started, and does with a script's line
/// as its task is joined.
struct Ends<'a> {
    gates: families::Gates,
    results: Vec<Option<ScriptSummary>>,
    spare: spare::Spare,
    slots: &'a slots::Slots,
    ctx: &'a RunContext,
}

impl Ends<'_> {
    /// The script's family opens, its line is kept, and its wall time tells whether
    /// the run's scripts are short enough for a spare slot (`waiting`: the scripts
    /// not started yet).
    fn joined(&mut self, (index, summary): (usize, ScriptSummary), waiting: usize) {
        self.gates.ended(&summary.id);
        if let Some(open) = self.spare.ended(summary.execution_time_s, waiting) {
            let all = self.slots.open(open.slots);
            self.ctx
                .spare_opened
                .fetch_add(open.slots, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                "scripts this short (median {:.0} ms) wait on their start as long as they \
                 run: {} spare slot(s) opened, {all} scripts at once",
                open.median_s * 1000.0,
                open.slots,
            );
        }
        self.results[index] = Some(summary);
    }
}

/// The line of a script this run did not start (`why`): its earlier record stands,
/// untouched, and is carried; with none readable, a record that says it never started
/// (`skipped` by `--fail-fast`/`--max-fail`, else `interrupted`) is written, after
/// whatever stale files it had are kept in the history.
fn not_run(
    ctx: &RunContext,
    script: &Script,
    why: &str,
    skip: bool,
    events: &EventSender,
) -> ScriptSummary {
    if let Some(earlier) = crate::results::past::previous_result(
        &ctx.config.results_dir,
        &ctx.config.output_dir,
        &script.id,
    ) {
        let line = ScriptSummary::carried(&earlier);
        events.emit(RunEvent::ScriptCarried {
            result: Box::new(earlier),
            why: why.to_string(),
        });
        return line;
    }
    let settings = ctx.settings_of(script);
    let mut result = script::base_result(ctx, script, &settings);
    ctx.archive_record(&script.id, &ctx.data_dir(&script.id), &mut result);
    result.stderr_tail = vec![format!("[jax-runner] not started: {why}")];
    if skip {
        result.status = crate::model::Status::Skipped;
        result.class = crate::model::FailureClass::Skipped;
    }
    script::explain(&mut result);
    let line = ScriptSummary::of(&result);
    events.emit(RunEvent::ScriptFinished {
        result: Box::new(result),
    });
    line
}
