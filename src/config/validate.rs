//! Checks of single options: limits that cannot work, failure classes, variables,
//! the Ray address. Each error names the option and says what to use instead.

use std::collections::BTreeSet;

use std::num::NonZeroUsize;

use super::{Backend, GpuShare, RayOptions, RunOptions, MAX_GPU_SHARE};
use crate::error::ConfigError;
use crate::model::FailureClass;
use crate::retry::RetryPolicy;

/// A value an option cannot take, and why.
pub(super) fn invalid(option: &'static str, value: impl ToString, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A count that must be at least 1, when given.
pub(super) fn at_least_one(
    option: &'static str,
    n: Option<usize>,
) -> Result<Option<NonZeroUsize>, ConfigError> {
    n.map(|n| NonZeroUsize::new(n).ok_or_else(|| invalid(option, n, "must be at least 1")))
        .transpose()
}

/// Limits that cannot work: a zero timeout, a tiny log cap or memory limit, no
/// processes, variable names that are not names.
pub(super) fn validate_limits(opts: &RunOptions) -> Result<(), ConfigError> {
    if opts.timeout.is_zero() {
        return Err(invalid(
            "--timeout",
            "0s",
            "must be longer than zero, for example 90s or 30m",
        ));
    }
    if let Some(b) = opts.max_log_size.filter(|b| *b < 1024) {
        return Err(invalid("--max-log-size", b, "must be at least 1KiB"));
    }
    if let Some(m) = opts.memory_limit.filter(|m| *m < 16 << 20) {
        return Err(invalid(
            "--memory-limit",
            m,
            "a Python process with jax needs far more than 16MiB; use e.g. 2G",
        ));
    }
    if opts.max_procs == Some(0) {
        return Err(invalid("--max-procs", "0", "must be at least 1"));
    }
    if let Some(bad) = opts.env_pass.iter().find(|n| !valid_env_name(n)) {
        return Err(invalid(
            "--env-pass",
            bad,
            "name a variable: letters, digits and _",
        ));
    }
    Ok(())
}

/// `--retry-on`: failure class names, comma-separated or repeated.
pub(super) fn retry_on(names: Option<&[String]>) -> Result<BTreeSet<FailureClass>, ConfigError> {
    let Some(names) = names else {
        return Ok(RetryPolicy::default_retry_on());
    };
    let retryable = |c: &FailureClass| {
        !matches!(
            c,
            FailureClass::Succeeded | FailureClass::Interrupted | FailureClass::Skipped
        )
    };
    names
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            FailureClass::parse(n).filter(retryable).ok_or_else(|| {
                let classes: Vec<&str> = FailureClass::ALL
                    .into_iter()
                    .filter(retryable)
                    .map(FailureClass::as_str)
                    .collect();
                invalid(
                    "--retry-on",
                    n,
                    &format!(
                        "not a failure class that can be retried; use one of {}",
                        classes.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// `--env KEY=VALUE`.
pub(super) fn extra_env(pairs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    pairs
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if valid_env_name(k) => Ok((k.to_string(), v.to_string())),
            _ => Err(invalid(
                "--env",
                kv,
                "use KEY=VALUE with a name of letters, digits and _",
            )),
        })
        .collect()
}

/// `--backend ray`: the dashboard URL and token.
/// Only `--backend ray` uses the address (RAY_ADDRESS may be set for other tools).
pub(super) fn ray_options(opts: &RunOptions) -> Result<Option<RayOptions>, ConfigError> {
    if opts.cluster.backend != Backend::Ray {
        return Ok(None);
    }
    match &opts.cluster.ray_address {
        None => Err(invalid(
            "--ray-address",
            "",
            "use the dashboard URL, e.g. http://head-node:8265",
        )),
        Some(a) if a.starts_with("http://") || a.starts_with("https://") => Ok(Some(RayOptions {
            address: a.clone(),
            token: opts.cluster.ray_token.clone(),
            max_return: opts.cluster.ray_max_return,
        })),
        Some(a) => Err(invalid(
            "--ray-address",
            a,
            "use the dashboard URL, e.g. http://head-node:8265",
        )),
    }
}

pub(crate) fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `--gpu-share N|auto`.
pub(super) fn gpu_share(value: Option<&str>) -> Result<Option<GpuShare>, ConfigError> {
    let Some(v) = value.map(str::trim) else {
        return Ok(None);
    };
    if v == "auto" {
        return Ok(Some(GpuShare::Auto));
    }
    match v.parse::<usize>().ok().and_then(NonZeroUsize::new) {
        Some(n) if n.get() <= MAX_GPU_SHARE => Ok(Some(GpuShare::Fixed(n))),
        _ => Err(invalid(
            "--gpu-share",
            v,
            &format!("use a number of scripts per GPU from 1 to {MAX_GPU_SHARE}, or auto"),
        )),
    }
}
