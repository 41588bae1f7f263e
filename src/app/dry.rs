//! `--dry-run`: the plan a run would follow, made by the same *prepare* step, with
//! nothing started and nothing written.

use crate::config::{RunConfig, WarmStart};
use crate::discovery::Script;
use crate::model::PlannedScript;
use crate::plan::Plan;
use crate::sandbox::layers::Sandboxing;

use super::schedule::Schedule;

/// What a run would do with each script, in run order.
#[derive(Debug, Clone)]
pub struct DryPlan {
    pub scripts: Vec<PlannedScript>,
    /// Scripts at once.
    pub jobs: usize,
    /// Why scripts would start cold, when they would.
    pub cold_reason: Option<String>,
}

impl DryPlan {
    /// The plan for `scripts` (discovery's, which the schedule's indices point into).
    pub fn new(
        config: &RunConfig,
        plan: &Plan,
        sandboxing: &Result<Sandboxing, String>,
        scripts: &[Script],
        schedule: Schedule,
    ) -> DryPlan {
        let sandbox = sandboxing.as_ref().map_or("none", Sandboxing::kind);
        let cold_reason = cold_reason(config, sandboxing);
        let start = if cold_reason.is_some() {
            "cold"
        } else {
            "warm"
        };
        let run_platform = plan.starts_on(config.fallback_to_cpu);
        let kept = schedule.kept.iter().map(|(i, _)| (*i, "keep"));
        let to_run = schedule.order.iter().map(|(i, _)| (*i, "run"));
        let planned = kept
            .chain(to_run)
            .enumerate()
            .map(|(n, (i, action))| {
                let s = &scripts[i];
                let settings = &schedule.settings[&s.id];
                let device = settings.platform(run_platform);
                PlannedScript {
                    order: n + 1,
                    id: s.id.clone(),
                    relative_path: s.relative_path.to_string_lossy().into_owned(),
                    action: action.into(),
                    why: schedule.why.get(&s.id).cloned(),
                    device,
                    sandbox: sandbox.into(),
                    start: start.into(),
                    timeout_s: settings.timeout.as_secs_f64(),
                    retries: settings.retries,
                    overrides: settings.overridden.clone(),
                }
            })
            .collect();
        DryPlan {
            scripts: planned,
            jobs: plan.jobs,
            cold_reason,
        }
    }
}

fn cold_reason(config: &RunConfig, sandboxing: &Result<Sandboxing, String>) -> Option<String> {
    if config.warm_start == WarmStart::Off {
        return Some("--warm-start off".into());
    }
    if config.ray.is_some() {
        return Some("scripts run on the Ray cluster".into());
    }
    let sandboxed = sandboxing.as_ref().ok();
    sandboxed
        .and_then(Sandboxing::no_warm_start)
        .map(str::to_string)
}
