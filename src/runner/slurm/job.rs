//! What passes between the runner and a job through the shared file system: the
//! request (one attempt, as the runner decided it), the record jax-runner leaves on
//! the node (the attempt as a local run records it), and the job's `sbatch` line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{JaxTelemetry, Leak, MemorySource, Platform};

/// The hidden command a job runs: `jax-runner __slurm-job REQUEST`.
pub const JOB_ARG: &str = "__slurm-job";

/// The job's exit code when the node cannot see the tree (sysexits' `EX_CONFIG`).
pub const NOT_SHARED_EXIT: i32 = 78;

/// One attempt, as the runner asks a node to run it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRequest {
    /// The runner's version: the node's binary must be the same one.
    pub version: String,
    /// The node's run options, as a command line (`--output-dir …`, no backend).
    pub argv: Vec<String>,
    /// The script's id in the run.
    pub id: String,
    /// The script.
    pub script: PathBuf,
    /// The script's path in the tree.
    pub relative_path: PathBuf,
    /// 1 for the first attempt.
    pub number: u32,
    /// The platform the attempt is set up for.
    pub platform: Platform,
    /// Its data folder (`GNN_OUTPUT_DIR`), made by the runner.
    pub data_dir: PathBuf,
    /// Its logs.
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// The attempt's own time limit, seconds (Slurm's `--time` is longer).
    pub timeout_s: f64,
    /// `--memory-limit` for this script, bytes.
    pub memory_limit: Option<u64>,
    /// The script's `--env` and override variables.
    pub env: Vec<(String, String)>,
    /// A file the runner made in the data folder: a node that cannot see it does not
    /// share the runner's file system.
    pub marker: PathBuf,
    /// Where the node leaves its [`NodeRecord`].
    pub record: PathBuf,
}

/// An attempt as jax-runner on the node recorded it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's host name.
    pub node: String,
    /// Why the attempt could not run at all, when it could not.
    pub error: Option<String>,
    /// When the script started, seconds since the epoch.
    pub started_at: f64,
    /// How long it ran, seconds.
    pub duration_s: f64,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub user_cpu_s: f64,
    pub system_cpu_s: f64,
    pub max_rss_bytes: u64,
    /// `timeout`, `interrupt`, `memory_limit`, `memory_cgroup`, `process_limit`.
    pub stopped_by: Option<String>,
    pub peak_rss_bytes: u64,
    pub memory_source: Option<MemorySource>,
    pub peak_scratch_bytes: u64,
    pub stdout_bytes: u64,
    pub stdout_cut_bytes: u64,
    pub stderr_bytes: u64,
    pub stderr_cut_bytes: u64,
    pub leaks: Vec<Leak>,
    pub kernel_oom_kill: bool,
    pub refused_forks: u64,
    pub sampled_cpu: (f64, f64),
    /// `warm`, `cold`, or why a warm start could not be had.
    pub cold_reason: Option<String>,
    pub gpu_device_opened: Option<bool>,
    pub capabilities: Option<u64>,
    /// Peak GPU memory (MiB) and mean utilisation, when NVML could read them.
    pub gpu_peak_mb: Option<f64>,
    pub gpu_memory_source: Option<crate::model::GpuMemorySource>,
    pub gpu_utilization_pct: Option<f64>,
    /// jax's own report, as the telemetry shim wrote it.
    pub jax: Option<JaxTelemetry>,
    pub jax_problem: Option<String>,
    /// Who enforced `--max-procs` and `--memory-limit` on the node.
    pub max_procs_enforced_by: Option<String>,
    pub memory_limit_enforced_by: Option<String>,
    /// The layers the node confined the script with.
    pub sandbox_layers: Vec<String>,
}

/// A file made anew (a link or FIFO at its name is replaced, not followed), then
/// renamed into place, so a job never reads half of it.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = crate::confined::create_file(&tmp)?;
    std::io::Write::write_all(&mut f, bytes)?;
    std::fs::rename(&tmp, path)
}

/// What every job of a run carries in its `--comment`: found again by the next run
/// (or `doctor`) after a runner that died, so none of its jobs stays queued.
pub fn run_marker(host: &str, pid: u32, started: u64) -> String {
    format!("jax-runner:{host}:{pid}:{started}")
}

/// The parts of [`run_marker`]: host, PID, and the runner's start (seconds since the
/// epoch), or `None` for a comment that is no marker.
pub fn parse_marker(comment: &str) -> Option<(&str, u32, u64)> {
    let mut parts = comment.strip_prefix("jax-runner:")?.split(':');
    let host = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    let started = parts.next()?.parse().ok()?;
    Some((host, pid, started))
}

/// What to submit for an attempt.
#[derive(Debug, Clone)]
pub struct Submission<'a> {
    pub name: String,
    pub comment: &'a str,
    pub script: &'a Path,
    pub slurm_out: &'a Path,
    pub cwd: &'a Path,
    /// The runner's time limit plus its grace: Slurm's `--time` adds a minute.
    pub limit: Duration,
    pub memory_limit: Option<u64>,
    pub gpu: bool,
    pub options: &'a crate::config::SlurmOptions,
}

/// `sbatch`'s arguments (without `--parsable`).
pub fn sbatch_args(s: &Submission<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        format!("--job-name={}", s.name).into(),
        format!("--comment={}", s.comment).into(),
        os("--output=", s.slurm_out),
        os("--chdir=", s.cwd),
        format!("--time={}", slurm_time(s.limit + Duration::from_secs(60))).into(),
        // One task, no requeue: a retry is the runner's decision, with a new attempt.
        "--ntasks=1".into(),
        "--no-requeue".into(),
    ];
    if let Some(bytes) = s.memory_limit {
        // The node enforces the limit itself; Slurm's is the backstop, a little above.
        let mb = bytes.div_ceil(1024 * 1024) + 64;
        a.push(format!("--mem={mb}M").into());
    }
    if s.gpu {
        a.push("--gres=gpu:1".into());
    }
    let o = s.options;
    for (flag, value) in [
        ("--partition", &o.partition),
        ("--account", &o.account),
        ("--qos", &o.qos),
    ] {
        if let Some(v) = value {
            a.push(format!("{flag}={v}").into());
        }
    }
    // The user's own last, so they can override any of the above.
    a.extend(o.args.iter().map(OsString::from));
    a.push(s.script.into());
    a
}

fn os(flag: &str, path: &Path) -> OsString {
    let mut s = OsString::from(flag);
    s.push(path);
    s
}

/// Slurm's `D-HH:MM:SS`, rounded up to the second.
pub fn slurm_time(d: Duration) -> String {
    let total = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let (days, rest) = (total / 86_400, total % 86_400);
    format!(
        "{days}-{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The batch script: it runs this very binary on the node (it must be on the shared
/// file system too), which runs the attempt.
pub fn batch_script(exe: &Path, request: &Path) -> String {
    format!(
        "#!/bin/sh\n# jax-runner: one attempt of one script (see docs/slurm.md)\nexec {} {JOB_ARG} {}\n",
        shell_quote(&exe.to_string_lossy()),
        shell_quote(&request.to_string_lossy())
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_rounds_up_and_counts_days() {
        assert_eq!(slurm_time(Duration::from_millis(1500)), "0-00:00:02");
        assert_eq!(slurm_time(Duration::from_secs(90_061)), "1-01:01:01");
    }

    #[test]
    fn a_marker_reads_back_and_a_comment_is_no_marker() {
        let m = run_marker("node-1", 4242, 1_700_000_000);
        assert_eq!(parse_marker(&m), Some(("node-1", 4242, 1_700_000_000)));
        assert_eq!(parse_marker("my own job"), None);
        assert_eq!(parse_marker("jax-runner:h:notapid:1"), None);
    }

    #[test]
    fn sbatch_gets_the_limits_and_the_users_own_args_last() {
        let options = crate::config::SlurmOptions {
            partition: Some("gpu".into()),
            account: None,
            qos: Some("short".into()),
            args: vec!["--constraint=a100".into(), "--time=0-01:00:00".into()],
        };
        let args = sbatch_args(&Submission {
            name: "jax-runner:a".into(),
            comment: "jax-runner:h:1:2",
            script: Path::new("/shared/job's.sh"),
            slurm_out: Path::new("/shared/out"),
            cwd: Path::new("/shared"),
            limit: Duration::from_secs(30),
            memory_limit: Some(512 * 1024 * 1024),
            gpu: true,
            options: &options,
        });
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for want in [
            "--time=0-00:01:30",
            "--mem=576M",
            "--gres=gpu:1",
            "--partition=gpu",
            "--qos=short",
            "--no-requeue",
        ] {
            assert!(args.contains(&want.to_string()), "{want} in {args:?}");
        }
        assert!(!args.iter().any(|a| a.starts_with("--account")));
        let n = args.len();
        assert_eq!(
            &args[n - 3..n - 1],
            ["--constraint=a100", "--time=0-01:00:00"]
        );
        assert_eq!(args[n - 1], "/shared/job's.sh");
    }

    #[test]
    fn the_batch_script_quotes_its_paths() {
        let s = batch_script(Path::new("/opt/jax runner"), Path::new("/r/it's.json"));
        assert!(s.contains(r"exec '/opt/jax runner' __slurm-job '/r/it'\''s.json'"));
    }
}
