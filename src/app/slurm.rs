//! A Slurm run's preparation on the runner's side: the pre-flight (the client
//! commands answer, the partition exists and has GPUs for a GPU run), the jobs a
//! runner that died left queued (cancelled by id), and the backend itself.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::ValueEnum;

use crate::config::RunConfig;
use crate::error::{Error, SlurmError};
use crate::model::Device;
use crate::plan::Cluster;
use crate::python::Interpreter;
use crate::runner::backends::Shared;
use crate::runner::slurm::{run_marker, Slurm, SlurmClient};

/// Checks the cluster before anything is submitted, and cancels what a runner that
/// died left in the queue (`warnings` says so).
pub(super) async fn check(
    config: &RunConfig,
    warnings: &mut Vec<String>,
) -> Result<Cluster, SlurmError> {
    let client = SlurmClient;
    let version = client.command("sinfo", &["--version".into()]).await?;
    let args: Vec<OsString> = vec!["-h".into(), "-o".into(), "%P|%G|%C".into()];
    let lines = client.command("sinfo", &args).await?;
    let partitions = partitions(&lines);
    let wanted = config.slurm.as_ref().and_then(|s| s.partition.clone());
    let chosen = match &wanted {
        Some(name) => partitions.iter().find(|p| p.name == *name),
        None => partitions.iter().find(|p| p.default).or(partitions.first()),
    };
    let Some(p) = chosen else {
        return Err(SlurmError::NoPartition {
            partition: wanted.unwrap_or_else(|| "(default)".into()),
            known: partitions
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    if config.device == Device::Gpu && p.gpus == 0 {
        return Err(SlurmError::NoGpu {
            partition: p.name.clone(),
        });
    }
    let cancelled = cancel_orphans(&client).await;
    if !cancelled.is_empty() {
        warnings.push(format!(
            "cancelled {} Slurm job(s) a jax-runner that is no longer running left queued: {}",
            cancelled.len(),
            cancelled.join(", ")
        ));
    }
    Ok(Cluster {
        what: format!("{}, partition {}", version.trim(), p.name),
        gpus: p.gpus as f64,
        cpus: p.cpus as f64,
    })
}

/// One partition, as `sinfo -o '%P|%G|%C'` shows it (a line per node group).
#[derive(Debug, PartialEq)]
struct Partition {
    name: String,
    default: bool,
    /// GPUs its nodes' `gpu` GRES add up to (per line: one node group).
    gpus: u64,
    cpus: u64,
}

fn partitions(sinfo: &str) -> Vec<Partition> {
    let mut out: Vec<Partition> = Vec::new();
    for line in sinfo.lines() {
        let mut f = line.split('|');
        let (Some(name), Some(gres), Some(cpus)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let default = name.ends_with('*');
        let name = name.trim_end_matches('*').to_string();
        // `%C` is allocated/idle/other/total.
        let cpus: u64 = cpus
            .rsplit('/')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let gpus = gpu_count(gres);
        match out.iter_mut().find(|p| p.name == name) {
            Some(p) => {
                p.gpus += gpus;
                p.cpus += cpus;
            }
            None => out.push(Partition {
                name,
                default,
                gpus,
                cpus,
            }),
        }
    }
    out
}

/// GPUs in a GRES list: `gpu:4`, `gpu:a100:2(S:0-1)`, `gpu:2,shard:8`; `(null)` is none.
fn gpu_count(gres: &str) -> u64 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu:"))
        .map(|g| {
            let count = g.split('(').next().unwrap_or(g);
            count
                .rsplit(':')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1)
        })
        .sum()
}

/// Cancels, by id, this user's queued jobs whose marker names a runner on this host
/// that is gone (its PID ended, or now belongs to another process). Their ids.
async fn cancel_orphans(client: &SlurmClient) -> Vec<String> {
    let host = hostname();
    let Ok(jobs) = client.mine().await else {
        return Vec::new();
    };
    let mut cancelled = Vec::new();
    for (id, comment) in jobs {
        let Some((h, pid, started)) = crate::runner::slurm::parse_marker(&comment) else {
            continue;
        };
        if h == host
            && crate::runner::sys::start_ticks(pid) != Some(started)
            && client.cancel(&id).await.is_ok()
        {
            cancelled.push(id);
        }
    }
    cancelled
}

/// This machine's host name.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The Slurm backend of a run.
pub(super) fn backend(shared: &Shared, interp: &Interpreter) -> Result<Slurm, Error> {
    let config = &shared.config;
    let jobs_dir = config
        .results_dir
        .join(".slurm")
        .join(crate::runner::backends::sanitize(&shared.run_token));
    std::fs::create_dir_all(&jobs_dir).map_err(|source| SlurmError::Files {
        path: jobs_dir.clone(),
        source,
    })?;
    let pid = std::process::id();
    Ok(Slurm {
        client: SlurmClient,
        options: config.slurm.clone().unwrap_or_default(),
        exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("jax-runner")),
        jobs_dir,
        marker: run_marker(
            &hostname(),
            pid,
            crate::runner::sys::start_ticks(pid).unwrap_or(0),
        ),
        node_argv: node_argv(config, shared.compilation_cache.as_deref(), interp),
        grace: config.grace,
        queue: Default::default(),
    })
}

/// The node's run options: this run's, for one attempt run locally on the node.
fn node_argv(
    config: &RunConfig,
    cache: Option<&std::path::Path>,
    interp: &Interpreter,
) -> Vec<String> {
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let name = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| {
        v().map(|p| p.get_name().to_string()).unwrap_or_default()
    };
    let mut a: Vec<String> = vec![
        "--output-dir".into(),
        path(&config.output_dir),
        "--results-dir".into(),
        path(&config.results_dir),
        "--backend".into(),
        "local".into(),
        "--warm-start".into(),
        "off".into(),
        "--no-preflight".into(),
        "--sandbox".into(),
        name(&|| config.sandbox.to_possible_value()),
        "--grace".into(),
        config.grace.as_secs_f64().to_string(),
        "--compilation-cache".into(),
        cache.map_or_else(|| "off".into(), path),
        "--python".into(),
        path(&interp.path),
        "--layout".into(),
        if config.gnn_layout { "gnn" } else { "plain" }.into(),
    ];
    if let Some(bytes) = config.max_log_bytes {
        a.extend(["--max-log-size".into(), bytes.to_string()]);
    }
    // The limit the run's records give (a default is this machine's figure), so the
    // node holds the script to what its result says.
    a.extend(["--max-procs".into(), config.process_limit().to_string()]);
    for name in &config.pass_env {
        a.extend(["--env-pass".into(), name.clone()]);
    }
    if let Some(p) = config.xla_preset {
        a.extend(["--xla-preset".into(), name(&|| p.to_possible_value())]);
    }
    if config.jax_trace {
        a.push("--jax-trace".into());
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_add_up_their_node_groups() {
        let p = partitions(
            "debug*|(null)|0/4/0/4\ngpu|gpu:a100:2(S:0-1)|0/8/0/8\ngpu|gpu:1,shard:4|1/3/0/4\n",
        );
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].name.as_str(), p[0].default, p[0].gpus, p[0].cpus),
            ("debug", true, 0, 4)
        );
        assert_eq!(
            (p[1].name.as_str(), p[1].default, p[1].gpus, p[1].cpus),
            ("gpu", false, 3, 12)
        );
    }
}
