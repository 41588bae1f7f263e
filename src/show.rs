//! `jax-runner show` (alias `last`): the last run's summary and failures, read back
//! from its results folder without running anything, and rendered by the functions
//! that print them when a run ends (`report::terminal`), so the two agree.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Args;

use jax_runner::config::{self, layers::Layers};
use jax_runner::error::ConfigError;
use jax_runner::report::terminal::{self, Detail, Failure};

use crate::{EXIT_FAILED, EXIT_USAGE};

/// The exit codes of `show`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  every script of the tree stands succeeded (the last run's and those it carried)
  1  some script stands failed: in the last run, or still failing since an earlier one
  2  no run is recorded in the results folder";

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// Pipeline output tree of the run.
    #[arg(long, value_name = "DIR", default_value = "output")]
    pub output_dir: PathBuf,
    /// The run's results folder [default: DIR/execution_results/jax].
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
}

impl ShowArgs {
    /// Fills what the command line left out from `JAX_RUNNER_*` and the profile, as a
    /// run reads them: `show` finds the folder the same run wrote.
    pub fn layer(&mut self, l: &mut Layers) -> Result<(), ConfigError> {
        let path = |s: &str| Ok::<_, String>(PathBuf::from(s));
        l.value(&mut self.output_dir, "output-dir", path)?;
        l.value(&mut self.results_dir, "results-dir", |s| path(s).map(Some))
    }
}

/// Prints the last run's end (at `level`) and says whether it succeeded.
pub fn show(args: &ShowArgs, level: tracing::Level, color: bool) -> u8 {
    let tree = config::absolute(&args.output_dir);
    let results = match &args.results_dir {
        Some(dir) => config::absolute(dir),
        None => config::PipelineTree::of(&config::absolute(&args.output_dir)).default_results_dir(),
    };
    let metrics = match jax_runner::results::past::last_run(&results) {
        Ok(m) => m,
        Err(why) => {
            eprintln!(
                "error: {why}\n  run `jax-runner --output-dir {}` first, or name the folder with --results-dir",
                args.output_dir.display()
            );
            return EXIT_USAGE;
        }
    };
    let known: HashMap<String, Failure> = metrics
        .scripts
        .iter()
        .filter(|s| Failure::listed(s.status) || s.still_failing())
        .filter_map(|s| jax_runner::results::past::previous_result(&results, &tree, &s.id))
        .map(|r| (r.id.clone(), Failure::of(&r)))
        .collect();
    let failures = terminal::failures(&metrics, &known);
    // `show` exists to say what happened: even `-q` prints the summary line.
    let detail = Detail::of(level).max(Detail::Quiet);
    crate::term::stdout(&terminal::end_of_run(&metrics, &failures, detail, color));
    // `show` answers for the tree: a run's exit answers for what it ran (as pytest's),
    // but a script a `-k` run carried is no less failing for not being run.
    match metrics.tree_succeeded() {
        true => 0,
        false => EXIT_FAILED,
    }
}
