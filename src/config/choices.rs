//! The run options' own choices (`--backend`, `--layout`, `--progress`,
//! `--fail-fast`, `--fallback`): one type each, parsed by clap from the command line
//! and by the same `ValueEnum` from a variable or the profile.

use clap::ValueEnum;

/// `--backend`: where scripts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Local,
    Ray,
    /// Each attempt a Slurm batch job (`sbatch`), run on the node by jax-runner itself.
    Slurm,
}

/// `--layout`: whether GNN's step-12 layout is written too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    Auto,
    Gnn,
    Plain,
}

/// `--progress`: live progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    Auto,
    On,
    Off,
}

/// `--fail-fast[=WHEN]`: off, wait (running scripts finish) or now (they are stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailFast {
    Off,
    Wait,
    Now,
}

/// `--fallback`: where a GPU script goes when the GPU environment fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fallback {
    Cpu,
    None,
}
