//! Which scripts of a run go, in what order, and what each is keyed by: the
//! fingerprints `--resume` compares, the data folders, what `--resume` and
//! `--rerun-failed` keep (and why), and the longest-first order from the history.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{settings_for, RunConfig, ScriptSettings};
use crate::discovery::{Discovery, Script};
use crate::model::{Reuse, ScriptResult};
use crate::python::Interpreter;
use crate::report::gnn::GnnEntry;
use crate::results::past::{self, History};

/// Which scripts run, in what order, and what each is keyed by.
#[derive(Debug)]
pub struct Schedule {
    /// Earlier successes `--resume`/`--rerun-failed` keep, by discovery index.
    pub kept: Vec<(usize, ScriptResult)>,
    /// The scripts to run, longest expected first, with their discovery index.
    pub order: Vec<(usize, Script)>,
    /// Seconds the scripts to run should take in all, one after another, when the
    /// history knows enough to say.
    pub expected_s: Option<f64>,
    pub fingerprints: HashMap<String, crate::results::fingerprint::Fingerprint>,
    /// Each script's settings (the run's values under its profile overrides), worked
    /// out once here for the fingerprints, the runner and a dry run's plan.
    pub settings: HashMap<String, ScriptSettings>,
    pub data_dirs: HashMap<String, PathBuf>,
    /// Why a script is kept, or runs again, where an earlier result was weighed.
    pub why: HashMap<String, String>,
    /// Each script's seconds per device in earlier runs (what `--device auto` learns).
    pub device_times: HashMap<String, crate::model::DeviceTimes>,
    /// The scripts that wait for their family's first (see `runner/families.rs`), by
    /// id: families of more than one script whose compilations the cache may not hold.
    pub families: HashMap<String, u64>,
    /// Some script to run names jax in its source (else a lean zygote serves, and
    /// no MLIR context is made ahead).
    pub uses_jax: bool,
    /// What the warm zygote makes before its first fork (`app/ahead.rs`): the MLIR
    /// context the scripts' lowerings share, where more scripts than slots repay it.
    pub ahead: crate::runner::zygote::Made,
}

/// What the run's execution is decided from.
#[derive(Clone, Copy)]
pub(super) struct Inputs<'a> {
    pub config: &'a Arc<RunConfig>,
    pub interp: &'a Interpreter,
    pub discovery: &'a Discovery,
    pub history: &'a History,
    pub gnn: Option<&'a HashMap<String, GnnEntry>>,
    /// How many scripts run at once.
    pub jobs: usize,
}

/// Which scripts run in what order: `--resume`/`--rerun-failed` keep what stands, the
/// rest go longest expected first.
pub(super) fn schedule(inputs: &Inputs<'_>) -> Schedule {
    let Inputs {
        config,
        interp,
        discovery,
        history,
        gnn,
        jobs,
    } = *inputs;
    let data_dirs: HashMap<String, PathBuf> = discovery
        .scripts
        .iter()
        .map(|s| {
            let dir = match gnn.and_then(|g| g.get(&s.id)) {
                // GNN's layout points GNN_OUTPUT_DIR at 12_execute_output/…/simulation_data.
                Some(e) => e.data_dir.clone(),
                None => crate::runner::default_data_dir(&config.results_dir, &s.id),
            };
            (s.id.clone(), dir)
        })
        .collect();
    let settings: HashMap<String, ScriptSettings> = discovery
        .scripts
        .iter()
        .map(|s| (s.id.clone(), settings_for(config, &s.id, &s.relative_path)))
        .collect();
    let inputs = fingerprint_inputs(config, interp);
    let tree_scripts: std::collections::HashSet<&std::path::Path> = (discovery.scripts.iter())
        .chain(&discovery.unselected)
        .map(|s| s.path.as_path())
        .collect();
    // Each folder's other files are read and hashed once, whatever its number of scripts.
    let beside = crate::results::fingerprint::Beside::of(
        &tree_scripts,
        discovery.scripts.iter().map(|s| s.path.as_path()),
    );
    let fingerprints: HashMap<String, crate::results::fingerprint::Fingerprint> = discovery
        .scripts
        .iter()
        .map(|s| {
            // A profile override's device or variables change what the script does.
            let settings = &settings[&s.id];
            let mut own = inputs.clone();
            for key in ["device", "env"] {
                if let Some(set) = settings.overridden.get(key) {
                    own.push(("override", format!("{key}={}", set.value)));
                }
            }
            (
                s.id.clone(),
                crate::results::fingerprint::fingerprint(s, &own, &beside),
            )
        })
        .collect();
    let (kept, to_run, why) = reuse(config, discovery, &fingerprints, &data_dirs);
    // Longest expected first, so a long script does not start last and leave the
    // other slots idle at the end.
    let scripts: Vec<Script> = to_run.iter().map(|(_, s)| s.clone()).collect();
    let expected_s = history.expected_total(&scripts);
    let order: Vec<(usize, Script)> = history
        .schedule(&scripts)
        .into_iter()
        .map(|k| to_run[k].clone())
        .collect();
    let (families, uses_jax) = families(config, &order);
    Schedule {
        ahead: super::ahead::ahead(uses_jax, order.len(), jobs),
        families,
        kept,
        order,
        expected_s,
        fingerprints,
        settings,
        data_dirs,
        why,
        device_times: history.device_times.clone(),
        uses_jax,
    }
}

/// The scripts to gate behind their family's first (in `order`): families of more
/// than one script, unless the first one's last run loaded every compilation from the
/// cache (the family's functions are there already); none without a compilation
/// cache. And whether some script names jax in its source (one reading of each).
fn families(config: &RunConfig, order: &[(usize, Script)]) -> (HashMap<String, u64>, bool) {
    const MAX_SOURCE: u64 = 4 << 20;
    let gate = !matches!(
        config.compilation_cache,
        crate::config::CompilationCache::Off
    );
    let mut members: HashMap<u64, Vec<&str>> = HashMap::new();
    let mut uses_jax = false;
    for (_, s) in order {
        let Ok(source) = crate::confined::read_file(
            s.path.parent().unwrap_or(std::path::Path::new("/")),
            std::path::Path::new(s.path.file_name().unwrap_or_default()),
            MAX_SOURCE,
        ) else {
            // Unread, it may well use jax.
            uses_jax = true;
            continue;
        };
        uses_jax = uses_jax || source.windows(3).any(|w| w == b"jax");
        if gate {
            let f = crate::runner::families::family_of(&source);
            members.entry(f).or_default().push(&s.id);
        }
    }
    let cached = |id: &str| {
        past::previous_result(&config.results_dir, &config.output_dir, id)
            .and_then(|r| r.attempts.last().and_then(|a| a.jax.clone()))
            .is_some_and(|j| j.cache_hits > 0 && j.cache_misses == 0)
    };
    let gated = members
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1 && !cached(ids[0]))
        .flat_map(|(f, ids)| ids.into_iter().map(move |id| (id.to_string(), f)))
        .collect();
    (gated, uses_jax)
}

/// Splits the scripts into earlier successes that stand and scripts to run, with why
/// (by id) where there was an earlier result to weigh.
type Split = (
    Vec<(usize, ScriptResult)>,
    Vec<(usize, Script)>,
    HashMap<String, String>,
);

/// `--resume`/`--rerun-failed`: a kept success must match and still have its outputs
/// where it says.
fn reuse(
    config: &RunConfig,
    discovery: &Discovery,
    fingerprints: &HashMap<String, crate::results::fingerprint::Fingerprint>,
    data_dirs: &HashMap<String, PathBuf>,
) -> Split {
    let (mut kept, mut to_run, mut why) = (Vec::new(), Vec::new(), HashMap::new());
    for (i, s) in discovery.scripts.iter().enumerate() {
        let verdict = match config.reuse {
            Reuse::None => None,
            _ => Some(
                match past::previous_result(&config.results_dir, &config.output_dir, &s.id) {
                    None => Err("no earlier result".to_string()),
                    Some(p) => weigh(config.reuse, p, &fingerprints[&s.id], &data_dirs[&s.id]),
                },
            ),
        };
        match verdict {
            Some(Ok((p, reason))) => {
                why.insert(s.id.clone(), reason);
                kept.push((i, p));
            }
            Some(Err(reason)) => {
                // One line per script only at -v: at 500 scripts the count says it.
                tracing::debug!("{} runs again: {reason}", s.id);
                why.insert(s.id.clone(), reason);
                to_run.push((i, s.clone()));
            }
            None => to_run.push((i, s.clone())),
        }
    }
    if config.reuse != Reuse::None {
        tracing::info!(
            "kept {} earlier success(es), running {} script(s){}",
            kept.len(),
            to_run.len(),
            rerun_kinds(to_run.iter().filter_map(|(_, s)| why.get(&s.id)))
        );
    }
    (kept, to_run, why)
}

/// Why the scripts that run again do, counted by kind: ` (3 did not succeed, 1
/// changed)`; empty when none does.
fn rerun_kinds<'a>(reasons: impl Iterator<Item = &'a String>) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for reason in reasons {
        let kind = match reason.as_str() {
            r if r.starts_with("no earlier result") => "new",
            r if r.starts_with("it ended") => "did not succeed",
            r if r.contains(" since ") => "changed",
            _ => "lost their outputs",
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!(
            " ({}; `--dry-run --resume` says why each)",
            parts.join(", ")
        ),
    }
}

/// Whether an earlier result stands, and why (or why not), in words.
fn weigh(
    reuse: Reuse,
    previous: ScriptResult,
    fingerprint: &crate::results::fingerprint::Fingerprint,
    data_dir: &std::path::Path,
) -> Result<(ScriptResult, String), String> {
    let run = match previous.run_id.as_str() {
        "" => "an earlier run".to_string(),
        id => format!("run {id}"),
    };
    if !past::keeps(reuse, &previous, &fingerprint.digest) {
        return Err(match previous.status {
            crate::model::Status::Succeeded => {
                match crate::results::fingerprint::changed_inputs(
                    &previous.inputs,
                    &fingerprint.parts,
                ) {
                    Some(what) => format!("{what} since {run}"),
                    None => format!("the script or what it runs with changed since {run}"),
                }
            }
            status => format!("it ended {} in {run}", status.as_str()),
        });
    }
    past::outputs_intact(&previous, data_dir)?;
    Ok((previous, format!("succeeded in {run}")))
}

/// What, besides its source, a script's result depends on (see
/// [`crate::results::fingerprint`]).
fn fingerprint_inputs(config: &RunConfig, interp: &Interpreter) -> Vec<(&'static str, String)> {
    let mut inputs = vec![
        ("interpreter", interp.path.display().to_string()),
        ("python", interp.info.python_version.clone()),
        ("jax", interp.info.jax_version.clone().unwrap_or_default()),
        (
            "jaxlib",
            interp.info.jaxlib_version.clone().unwrap_or_default(),
        ),
        ("device", config.device.as_str().to_string()),
    ];
    if let Some(p) = config.xla_preset {
        inputs.push(("xla_preset", p.as_str().to_string()));
    }
    let mut env: Vec<(String, String)> = config
        .environment
        .text_vars()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .filter(|(k, _)| {
            (k.starts_with("JAX_") || k.starts_with("XLA_") || k == "CUDA_VISIBLE_DEVICES")
                && !k.starts_with("JAX_RUNNER_")
        })
        .chain(config.extra_env.iter().cloned())
        .collect();
    env.sort();
    inputs.extend(env.into_iter().map(|(k, v)| ("env", format!("{k}={v}"))));
    inputs
}
