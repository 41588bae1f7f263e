//! The `jax-runner` binary: parse the command line, run the pipeline, print the
//! summary, and map the outcome to the documented exit codes.

mod cli;
mod commands;
mod layers;
mod show;
mod term;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use cli::{Cli, Command};
use jax_runner::app;
use jax_runner::config::{Progress, RunConfig};
use jax_runner::environment::Environment;
use jax_runner::error::{Error, ReportError};
use jax_runner::halt::Halt;
use jax_runner::model::ExportTarget;
use jax_runner::report::{self, summary};
use jax_runner::runner::Stop;
use term::{init_logging, COLOR};

const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_NO_SCRIPTS: u8 = 3;
const EXIT_INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    // Nothing the runner's parent left open (a CI harness's fd 251, a file, a folder)
    // may reach a script: every inherited descriptor closes on exec.
    let _ = jax_runner::runner::sys::cloexec_from(3);
    // The last step of a sandboxed cold start, inside the sandbox (never started by a
    // user): see `sandbox::helper`.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(jax_runner::sandbox::bwrap::EXEC_ARG))
    {
        let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        return ExitCode::from(jax_runner::sandbox::helper::run(&rest) as u8);
    }
    // The runner's own helper process, started by a run (never by a user): see
    // `runner::sentinel`.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(jax_runner::runner::sentinel::ARG))
    {
        let rest: Vec<String> = std::env::args_os()
            .skip(2)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return ExitCode::from(jax_runner::runner::sentinel::run(&rest) as u8);
    }
    // A Slurm job of a run, on its compute node (never started by a user): see
    // `runner::slurm`.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(jax_runner::runner::slurm::JOB_ARG))
    {
        let request = std::env::args_os().nth(2).unwrap_or_default();
        let code = jax_runner::app::slurm_job(std::path::Path::new(&request));
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // The one read of the parent's environment: every later decision asks this.
    let env = Arc::new(Environment::capture());
    let parsed = match layers::parse(std::env::args_os().collect(), &env) {
        Ok(parsed) => parsed,
        Err(layers::LayerError::Clap(e)) => e.exit(),
        Err(layers::LayerError::Config(e)) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let cli = &parsed.cli;
    let level = cli.verbosity.level();
    let color = cli.verbosity.color(&env);
    let _ = COLOR.set(color);
    console::set_colors_enabled_stderr(color);
    console::set_colors_enabled(color);
    if level >= tracing::Level::WARN {
        for w in &parsed.warnings {
            eprintln!("{} {w}", console::style("warning:").yellow().bold());
        }
    }
    let outcome = match &cli.command {
        None => run(&cli.run, level),
        Some(Command::Run(args)) => run(args, level),
        Some(Command::List(args)) => commands::list(args, level),
        Some(Command::Setup(args)) => commands::setup(args, &env, level),
        Some(Command::Doctor(args)) => commands::doctor(args, &env, level),
        Some(Command::Show(args)) => Ok(show::show(args, level, color)),
        Some(Command::Schema { name }) => {
            let schema = jax_runner::schema::schema(name).expect("clap checked the name");
            term::stdout(&format!(
                "{}\n",
                serde_json::to_string_pretty(&schema).expect("JSON values serialize")
            ));
            Ok(0)
        }
        Some(Command::Completions { shell }) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "jax-runner", &mut std::io::stdout());
            Ok(0)
        }
        Some(Command::RenderWorkload {
            count,
            out,
            templates,
        }) => match jax_runner::render::render_workload(templates, out, *count) {
            Ok(paths) => {
                term::stdout(&format!(
                    "rendered {} script(s) into {}\n",
                    paths.len(),
                    out.display()
                ));
                Ok(0)
            }
            Err(e) => {
                eprintln!("error: {}", chain(&e));
                Ok(EXIT_USAGE)
            }
        },
        Some(Command::Man) => {
            // The man page is the long help: an option `-h` leaves out keeps its text.
            let cmd =
                <Cli as clap::CommandFactory>::command().mut_args(|a| a.hide_short_help(false));
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|_| std::io::Write::write_all(&mut std::io::stdout(), &out))
                .map(|_| 0)
                .map_err(Error::Runtime)
        }
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {}", chain(&err));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// The one map from errors to exit codes.
fn exit_code(err: &Error) -> u8 {
    match err {
        Error::Config(_) | Error::Discovery(_) | Error::Python(_) | Error::Runtime(_) => EXIT_USAGE,
        Error::Report(_) | Error::Ray(_) | Error::Slurm(_) => EXIT_USAGE,
        Error::Interrupted => EXIT_INTERRUPTED,
    }
}

/// An error and its causes, one per line.
fn chain(err: &dyn std::error::Error) -> String {
    jax_runner::error::chain(err).join("\n  caused by: ")
}

/// A run. The signal handlers come first, before the lock, discovery and the
/// interpreter probe: a SIGINT, SIGTERM or SIGHUP during start-up ends it with 130
/// and leaves the previous run's files as they were.
fn run(args: &cli::RunArgs, level: tracing::Level) -> Result<u8, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    {
        let _in_runtime = runtime.enter();
        let signals = Signals::install().map_err(Error::Runtime)?;
        runtime.spawn(forward_signals(signals, stop_tx));
    }
    let outcome = start_and_run(&runtime, args, level, stop_rx);
    if matches!(outcome, Err(Error::Interrupted)) {
        // A start-up step may still run on a blocking thread (the interpreter probe,
        // a first run's environment build): leave without waiting for it.
        runtime.shutdown_background();
    }
    outcome
}

fn start_and_run(
    runtime: &tokio::runtime::Runtime,
    args: &cli::RunArgs,
    level: tracing::Level,
    stop: watch::Receiver<Stop>,
) -> Result<u8, Error> {
    let config = Arc::new(RunConfig::from_options(args.clone())?);
    if config.dry_run {
        init_logging(level, None);
        return dry_run(runtime, &config, args.events.as_deref(), stop);
    }
    // Standard output is then one stream's alone: the events', or one export's.
    let stdout_taken = args.events.as_deref().is_some_and(|p| p.as_os_str() == "-")
        || config
            .exports
            .iter()
            .any(|e| e.target == ExportTarget::Stdout);
    let progress = match args.progress {
        Progress::On => true,
        Progress::Off => false,
        Progress::Auto => std::io::stderr().is_terminal() && level >= tracing::Level::INFO,
    };
    // Before anything touches the results folder: a second runner must not truncate
    // the first one's log.
    let _lock = app::lock_results(&config)?;
    let halt = Halt::new();
    let log_file =
        report::RunLogFile::new(config.results_dir.join("execution_log.txt"), halt.clone());
    let _guard = init_logging(level, Some(log_file.clone()));
    // Orphans of scripts come to us, not to init, so they can be found and killed.
    if let Err(e) = app::become_subreaper() {
        tracing::warn!(
            "cannot become a subreaper ({e}): leftover processes may escape leak checks"
        );
    }
    let mut edge: Vec<Box<dyn report::Reporter>> =
        vec![Box::new(report::LogReporter::with_file(log_file))];
    // Opened before the run, so a bad path is an error before any script starts.
    if let Some(path) = args.events.as_deref() {
        edge.push(Box::new(report::NdjsonReporter::open(path)?));
    }
    if progress {
        edge.push(Box::new(report::ProgressReporter::new()));
    }
    if config.no_capture {
        edge.push(Box::new(report::EchoReporter));
    }
    // After the bars, so they are cleared before the end of the run prints. With the
    // event stream or an export on stdout, stdout is that stream's alone.
    edge.push(Box::new(report::TerminalReporter::new(
        report::terminal::Detail::of(level),
        *COLOR.get().unwrap_or(&false),
        args.slow_timeout,
        !stdout_taken,
    )));
    let report = runtime.block_on(app::run(config.clone(), edge, stop, halt))?;
    // The metrics' figure is taken before the end-of-run reports are made; the log's
    // last word is the peak with them.
    tracing::info!(
        target: report::LOG_ONLY,
        "the runner's own peak memory, the end-of-run reports included: {:.1} MiB",
        app::runner_peak_rss_mb()
    );
    let m = &report.metrics;
    // After the summary: what ran is shown even when results could not all be written.
    if let Some(reason) = report.halted {
        return Err(match reason.kind {
            jax_runner::halt::HaltKind::DiskFull => Error::Report(ReportError::NoSpace(reason)),
            jax_runner::halt::HaltKind::NotShared => {
                Error::Slurm(jax_runner::error::SlurmError::Halted(reason.to_string()))
            }
        });
    }
    if let Some(err) = report.report_errors.into_iter().next() {
        return Err(Error::Report(err));
    }
    Ok(if m.run.interrupted {
        EXIT_INTERRUPTED
    } else if m.totals.total_scripts == m.totals.carried
        && m.totals.missing == 0
        && m.totals.refused == 0
    {
        // This run found no script (those it carried are earlier runs' records).
        tracing::warn!(
            "no JAX scripts found under {}: scripts are *.py files in a folder named jax, or files that import jax",
            config.output_dir.display()
        );
        // Nothing to report on: folders this run made hold only its empty reports, so
        // they go again (innermost first; a folder that was there stays). Through
        // handles, following no link: one planted meanwhile is not removed through.
        for dir in &config.created_dirs {
            let _ = if *dir == config.results_dir {
                jax_runner::confined::remove_tree(dir).map_err(std::io::Error::from)
            } else {
                std::fs::remove_dir(dir)
            };
        }
        EXIT_NO_SCRIPTS
    } else if m.all_succeeded() {
        0
    } else {
        EXIT_FAILED
    })
}

/// `--dry-run`: the plan as a table, or as `planned` events with `--events`.
fn dry_run(
    runtime: &tokio::runtime::Runtime,
    config: &Arc<RunConfig>,
    events: Option<&std::path::Path>,
    stop: watch::Receiver<Stop>,
) -> Result<u8, Error> {
    use jax_runner::report::Reporter;
    let prepared = runtime.block_on(app::dry_run(config.clone(), stop))?;
    for w in &prepared.warnings {
        tracing::warn!("{w}");
    }
    let Some(plan) = &prepared.dry else {
        tracing::warn!(
            "no JAX scripts found under {}: nothing would run",
            config.output_dir.display()
        );
        return Ok(EXIT_NO_SCRIPTS);
    };
    if let Some(path) = events {
        let mut out = report::NdjsonReporter::open(path)?;
        for script in &plan.scripts {
            out.handle(&jax_runner::events::RunEvent::Planned {
                script: Box::new(script.clone()),
            })?;
        }
    }
    if events.map_or(true, |p| p.as_os_str() != "-") {
        term::stdout(&summary::dry_run_table(
            &plan.scripts,
            plan.jobs,
            plan.cold_reason.as_deref(),
            &prepared.discovery,
        ));
    }
    Ok(0)
}

/// The signals that stop a run: Ctrl-C, SIGTERM, and SIGHUP (a closed terminal or
/// session), which means the same as SIGTERM.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// Installs the handlers; must run inside the runtime.
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// First signal: stop gracefully (during start-up: stop at once). Second: kill.
/// Third: leave at once.
async fn forward_signals(mut signals: Signals, stop: watch::Sender<Stop>) {
    let mut count = 0;
    loop {
        tokio::select! {
            _ = signals.int.recv() => {}
            _ = signals.term.recv() => {}
            _ = signals.hup.recv() => {}
        }
        count += 1;
        match count {
            1 => {
                report::progress::clear_display();
                tracing::warn!("interrupted: stopping running scripts (again to kill them)");
                stop.send_replace(Stop::Graceful);
            }
            2 => {
                tracing::warn!("interrupted again: killing running scripts");
                stop.send_replace(Stop::Kill);
            }
            _ => {
                report::progress::clear_display();
                std::process::exit(EXIT_INTERRUPTED as i32)
            }
        }
    }
}
