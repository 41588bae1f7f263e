//! Where a run's option values came from: the command line, a `JAX_RUNNER_*`
//! variable, a profile of `jax-runner.toml`, or the built-in default.

use serde::{Deserialize, Serialize};

/// One option's effective value and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Setting {
    /// The value as the option takes it (`30m`, `4`, `true`; repeated values joined
    /// with a space).
    pub value: String,
    /// `command line`, `environment (JAX_RUNNER_TIMEOUT)`, `profile ci
    /// (jax-runner.toml:3)`, `default`, or for a per-script value `override "*slow*"
    /// in profile ci (jax-runner.toml:14)`.
    pub source: String,
}
