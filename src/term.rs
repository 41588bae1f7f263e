//! The terminal: log lines as cargo writes them (`error:`, `warning:`), printed above
//! the progress bars, colours decided once, and the execution log's writer. Every
//! line's fields are written through [`report::escape::excerpt`]: a file name or a
//! message from a script logged anywhere cannot steer the terminal, nor a reader of
//! `execution_log.txt`.

use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter, Layer};

use jax_runner::report;

/// One terminal log line: printed above the progress bars when they show (so they
/// are not torn), straight to stderr otherwise.
struct TermLine(Vec<u8>);

impl std::io::Write for TermLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TermLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        if !report::print_above_bars(&line) {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), &self.0);
        }
    }
}

/// Whether the terminal gets colours (`--color`, `NO_COLOR`), decided once in `main`.
pub static COLOR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Lines of the execution log waiting for its writer thread, at most.
const LOG_LINES_BUFFERED: usize = 4096;

/// Terminal logging at `level`, plus `execution_log.txt` when a run has a results folder
/// (created only when the run starts: see [`report::RunLogFile`]). The guard flushes
/// the log file when dropped. The log file's writer never drops a line: under load the
/// runner waits for the disk rather than lose what the log is for.
pub fn init_logging(
    level: tracing::Level,
    log_file: Option<report::RunLogFile>,
) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let terminal = tracing_subscriber::fmt::layer()
        .with_writer(|| TermLine(Vec::new()))
        .with_ansi(*COLOR.get().unwrap_or(&false))
        .fmt_fields(EscapedFields::default())
        .event_format(CargoStyle {
            color: *COLOR.get().unwrap_or(&false),
        })
        .with_filter(
            filter::Targets::new()
                .with_target("jax_runner", level)
                // A script's start only at -v; its end and the counts are the terminal
                // reporter's own lines (`report::terminal`).
                .with_target(
                    report::DETAIL,
                    match level >= tracing::Level::DEBUG {
                        true => filter::LevelFilter::from_level(level),
                        false => filter::LevelFilter::OFF,
                    },
                )
                .with_target(report::LOG_ONLY, filter::LevelFilter::OFF),
        );
    let (file_layer, guard) = match log_file {
        Some(file) => {
            // The channel's slots are allocated up front: tracing-appender's default of
            // 128,000 lines is 4 MiB of the runner's memory for a writer that keeps up
            // with a local file. Past the limit a line waits for the disk.
            let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
                .lossy(false)
                .buffered_lines_limit(LOG_LINES_BUFFERED)
                .finish(file);
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .with_target(false)
                .fmt_fields(EscapedFields::default())
                .with_filter(
                    filter::Targets::new().with_target("jax_runner", tracing::Level::DEBUG),
                );
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(terminal)
        .with(file_layer)
        .init();
    guard
}

/// tracing's own field formatting, its output escaped ([`report::escape::excerpt`]).
#[derive(Default)]
struct EscapedFields(DefaultFields);

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut text = String::new();
        self.0.format_fields(Writer::new(&mut text), fields)?;
        writer.write_str(&report::escape::excerpt(&text))
    }
}

/// Terminal lines as cargo writes them: `error:` and `warning:` tags, `debug:` for
/// `-v`, plain text for what a run says as it goes.
struct CargoStyle {
    color: bool,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for CargoStyle
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let (tag, ansi) = match *event.metadata().level() {
            tracing::Level::ERROR => (Some("error"), "1;31"),
            tracing::Level::WARN => (Some("warning"), "1;33"),
            tracing::Level::INFO => (None, ""),
            tracing::Level::DEBUG => (Some("debug"), "2"),
            tracing::Level::TRACE => (Some("trace"), "2"),
        };
        match (tag, self.color) {
            (Some(tag), true) => write!(writer, "\x1b[{ansi}m{tag}:\x1b[0m ")?,
            (Some(tag), false) => write!(writer, "{tag}: ")?,
            (None, _) => {}
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Writes `text` to standard output. A reader that went away (`list --json | head`)
/// ends the program quietly and successfully, as `cat` and ripgrep end: there is
/// nobody left to tell. Any other failure to write is an error (exit 2).
pub fn stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: failed to write to standard output: {e}");
        std::process::exit(2);
    }
}
