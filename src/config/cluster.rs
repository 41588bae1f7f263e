//! The options of the backends that run scripts elsewhere than here: a Ray cluster's
//! and Slurm's (flattened into [`super::RunOptions`]; clap's ids stay the long names).

use clap::Args;

use super::choices::Backend;
use super::values::parse_size;

/// `--backend` and the options of its clusters.
#[derive(Debug, Clone, Args)]
pub struct ClusterOptions {
    /// Where scripts run: here, as jobs on a Ray cluster (--ray-address), or as
    /// Slurm batch jobs (sbatch; the tree must be on a file system the nodes share).
    #[arg(
        hide_short_help = true,
        long,
        value_enum,
        ignore_case = true,
        default_value = "local",
        help_heading = "Backend"
    )]
    pub backend: Backend,
    /// The Ray cluster's dashboard address, e.g. http://head-node:8265 (also
    /// RAY_ADDRESS).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "URL",
        help_heading = "Backend"
    )]
    pub ray_address: Option<String>,
    /// Bearer token for Ray clusters with token authentication (better given as
    /// JAX_RUNNER_RAY_TOKEN: a command line is visible to other users).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "TOKEN",
        help_heading = "Backend"
    )]
    pub ray_token: Option<String>,
    /// The largest data folder a Ray job sends back (compressed, through its log);
    /// a larger one stays on the cluster and the result says where.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "SIZE",
        default_value = "50M",
        value_parser = parse_size,
        help_heading = "Backend"
    )]
    pub ray_max_return: u64,
    /// The Slurm partition jobs go to (sbatch --partition); the cluster's default
    /// partition when left out.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "NAME",
        help_heading = "Backend"
    )]
    pub slurm_partition: Option<String>,
    /// The Slurm account jobs are charged to (sbatch --account).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "NAME",
        help_heading = "Backend"
    )]
    pub slurm_account: Option<String>,
    /// The Slurm quality of service (sbatch --qos).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "NAME",
        help_heading = "Backend"
    )]
    pub slurm_qos: Option<String>,
    /// Any other sbatch option, passed as given (repeat it: --slurm-arg=--constraint=a100).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        help_heading = "Backend"
    )]
    pub slurm_arg: Vec<String>,
}
