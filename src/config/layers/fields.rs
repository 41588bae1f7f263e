//! Each option of a run and of `list`, filled from the layers with its type's one
//! parser: the list of what a variable or a profile may set.

use super::Layers;
use crate::config::values::{choice, fail_fast, number, parse_duration, parse_size};
use crate::config::FailFast;
use crate::config::{DiscoverOptions, RunOptions};
use crate::error::ConfigError;

/// The variable the interpreter's choice reads below `--python`.
const PYTHON_VAR: &str = "JAX_RUNNER_PYTHON";

/// Wraps a parser for an option that may be left unset.
fn some<T>(
    parse: impl Fn(&str) -> Result<T, String>,
) -> impl Fn(&str) -> Result<Option<T>, String> {
    move |s| parse(s).map(Some)
}

fn text(s: &str) -> Result<String, String> {
    Ok(s.to_string())
}

/// A value enum's name, as the results record it whatever text gave it.
fn choice_name<T: clap::ValueEnum>(value: T) -> String {
    value
        .to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

fn path(s: &str) -> Result<std::path::PathBuf, String> {
    Ok(s.into())
}

impl DiscoverOptions {
    /// Fills what the command line left out.
    pub fn layer(&mut self, l: &mut Layers) -> Result<(), ConfigError> {
        l.value(&mut self.output_dir, "output-dir", path)?;
        l.flag(&mut self.recursive, "recursive")?;
        l.flag(&mut self.no_recursive, "no-recursive")?;
        l.value(&mut self.results_dir, "results-dir", some(path))?;
        l.list(&mut self.filter, "filter")?;
        l.list(&mut self.exclude, "exclude")
    }
}

impl RunOptions {
    /// Fills what the command line left out, then settles options that exclude each
    /// other.
    pub fn layer(&mut self, l: &mut Layers) -> Result<(), ConfigError> {
        self.discover.layer(l)?;
        l.value(&mut self.device, "device", choice)?;
        l.value(&mut self.jobs, "jobs", some(number))?;
        l.value(&mut self.timeout, "timeout", parse_duration)?;
        l.value(&mut self.grace, "grace", parse_duration)?;
        if !l.read_later("python", PYTHON_VAR) {
            l.value(&mut self.python, "python", some(path))?;
        }
        l.value(&mut self.compilation_cache, "compilation-cache", some(text))?;
        l.value(&mut self.retries, "retries", number)?;
        let mut retry_on = self.retry_on.clone().unwrap_or_default();
        l.list(&mut retry_on, "retry-on")?;
        self.retry_on = (!retry_on.is_empty()).then_some(retry_on);
        l.value(&mut self.retry_delay, "retry-delay", parse_duration)?;
        l.value(&mut self.fallback, "fallback", choice)?;
        l.value(&mut self.max_log_size, "max-log-size", some(parse_size))?;
        l.value(&mut self.history_runs, "history-runs", number)?;
        l.value(&mut self.history_size, "history-size", parse_size)?;
        l.value(&mut self.sandbox, "sandbox", choice)?;
        l.value(&mut self.memory_limit, "memory-limit", some(parse_size))?;
        l.value(&mut self.max_procs, "max-procs", some(number))?;
        l.list(&mut self.env, "env")?;
        l.list(&mut self.env_pass, "env-pass")?;
        l.value(&mut self.warm_start, "warm-start", choice)?;
        l.value(&mut self.cluster.backend, "backend", choice)?;
        l.value(&mut self.cluster.ray_address, "ray-address", some(text))?;
        l.value(&mut self.cluster.ray_token, "ray-token", some(text))?;
        l.hide("ray-token");
        l.value(
            &mut self.cluster.ray_max_return,
            "ray-max-return",
            parse_size,
        )?;
        l.value(
            &mut self.cluster.slurm_partition,
            "slurm-partition",
            some(text),
        )?;
        l.value(&mut self.cluster.slurm_account, "slurm-account", some(text))?;
        l.value(&mut self.cluster.slurm_qos, "slurm-qos", some(text))?;
        l.list(&mut self.cluster.slurm_arg, "slurm-arg")?;
        l.flag(&mut self.resume, "resume")?;
        l.flag(&mut self.rerun_failed, "rerun-failed")?;
        l.flag(&mut self.jax_trace, "jax-trace")?;
        l.value(&mut self.layout, "layout", choice)?;
        l.value(&mut self.events, "events", some(path))?;
        let x = &mut self.exports;
        l.value(&mut x.export_json, "export-json", some(path))?;
        l.value(&mut x.export_markdown, "export-markdown", some(path))?;
        l.value(&mut x.export_junit, "export-junit", some(path))?;
        l.value(&mut x.export_csv, "export-csv", some(path))?;
        l.value(&mut self.progress, "progress", choice)?;
        l.value(&mut self.slow_timeout, "slow-timeout", parse_duration)?;
        l.flag(&mut self.no_preflight, "no-preflight")?;
        l.value(&mut self.fail_fast, "fail-fast", fail_fast)?;
        l.show("fail-fast", choice_name(self.fail_fast));
        l.value(&mut self.max_fail, "max-fail", some(number))?;
        l.flag(&mut self.dry_run, "dry-run")?;
        l.flag(&mut self.no_capture, "no-capture")?;
        l.value(&mut self.gpu_share, "gpu-share", some(text))?;
        l.value(&mut self.xla_preset, "xla-preset", some(choice))?;
        self.settle(l)
    }

    /// A profile's option gives way to a conflicting one a higher layer set.
    fn settle(&mut self, l: &mut Layers) -> Result<(), ConfigError> {
        let fail_fast = ("fail-fast", self.fail_fast != FailFast::Off);
        match l.settle(fail_fast, ("max-fail", self.max_fail.is_some()))? {
            Some("fail-fast") => self.fail_fast = FailFast::Off,
            Some(_) => self.max_fail = None,
            None => {}
        }
        let resume = ("resume", self.resume);
        match l.settle(resume, ("rerun-failed", self.rerun_failed))? {
            Some("resume") => self.resume = false,
            Some(_) => self.rerun_failed = false,
            None => {}
        }
        Ok(())
    }
}
