//! The subcommands other than a run: `list`, `setup` and `doctor`.

use jax_runner::app;
use jax_runner::config::{self, validate_output_dir};
use jax_runner::discovery::Script;
use jax_runner::environment::Environment;
use jax_runner::error::Error;
use jax_runner::listing::LISTED;
use jax_runner::python::{self, setup::Flavor, Resolver};
use jax_runner::report::summary;

use crate::cli::{self, FlavorArg};
use crate::term::init_logging;
use crate::{EXIT_FAILED, EXIT_NO_SCRIPTS};

pub fn list(args: &cli::ListArgs, level: tracing::Level) -> Result<u8, Error> {
    init_logging(level, None);
    let root = validate_output_dir(&args.discover.output_dir)?;
    let tree = config::PipelineTree::of(&root);
    let results = args
        .discover
        .results_dir
        .as_deref()
        .map(config::absolute)
        .unwrap_or_else(|| tree.default_results_dir());
    let mut found = app::discover_in(
        &root,
        args.discover.recursive(),
        &[results, tree.step12_dir()],
    )?;
    let selection = config::Selection::of(&args.discover, &root)?;
    app::select(&mut found, &selection);
    for w in jax_runner::listing::bounded_messages(
        &found.warnings,
        LISTED,
        "warnings (every one is in `list --json`)",
    ) {
        tracing::warn!("{w}");
    }
    if args.json {
        let doc = jax_runner::model::list::ListDocument {
            schema_version: jax_runner::model::SCHEMA_VERSION,
            output_dir: root.to_string_lossy().into_owned(),
            manifest: found
                .manifest
                .as_deref()
                .map(|m| m.to_string_lossy().into_owned()),
            scripts: found.scripts.iter().map(Script::listed).collect(),
            missing: found.missing.clone(),
            refused: found.refused.clone(),
            warnings: found.warnings.clone(),
        };
        crate::term::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).expect("JSON values serialize")
        ));
    } else {
        crate::term::stdout(&summary::discovery_table(&found));
    }
    Ok(
        if found.scripts.is_empty() && found.missing.is_empty() && found.refused.is_empty() {
            EXIT_NO_SCRIPTS
        } else {
            0
        },
    )
}

pub fn setup(args: &cli::SetupArgs, env: &Environment, level: tracing::Level) -> Result<u8, Error> {
    init_logging(level, None);
    let flavor = match args.flavor {
        FlavorArg::Auto => Flavor::for_host(),
        FlavorArg::Cpu => Flavor::Cpu,
        FlavorArg::Cuda12 => Flavor::Cuda12,
    };
    let managed = python::setup::ensure(flavor, env.var_os("PATH"))?;
    if !args.with.is_empty() {
        python::setup::add_packages(flavor, &args.with)?;
    }
    let managed_info = python::probe_as(&managed, python::Source::Managed)?;
    let chosen = Resolver::from_env(None, env).resolve()?;
    if level < tracing::Level::INFO {
        crate::term::stdout(&format!("{}\n", chosen.path.display()));
        return Ok(0);
    }
    eprintln!(
        "managed environment: {} (python {}, jax {})",
        managed.display(),
        managed_info.info.python_version,
        managed_info
            .info
            .jax_version
            .as_deref()
            .unwrap_or("missing")
    );
    eprintln!(
        "runs will use: {} ({})",
        chosen.path.display(),
        chosen.source.as_str()
    );
    crate::term::stdout(&format!("{}\n", chosen.path.display()));
    Ok(0)
}

pub fn doctor(
    args: &cli::DoctorArgs,
    env: &Environment,
    level: tracing::Level,
) -> Result<u8, Error> {
    init_logging(level, None);
    let interp = Resolver::from_env(args.python.clone(), env).inspect()?;
    let mut report =
        jax_runner::doctor::inspect(&interp, args.device, jax_runner::doctor::Live::All, env);
    report.sandbox = Some(jax_runner::doctor::sandbox::inspect());
    if args.json {
        crate::term::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).expect("JSON values serialize")
        ));
    } else {
        crate::term::stdout(&jax_runner::doctor::render::human(&report));
    }
    Ok(if report.requested_works() {
        0
    } else {
        EXIT_FAILED
    })
}
