//! `--events FILE|-`: the event stream as NDJSON, one event a line, each with
//! `schema_version`, a timestamp and (for script events) the script id. Lines are
//! flushed as they are written, so another process can follow the run live.

use std::io::Write;

use super::Reporter;
use crate::error::ReportError;
use crate::events::RunEvent;
use crate::model::SCHEMA_VERSION;
use crate::paths::rfc3339;

/// Writes every event as one JSON line.
pub struct NdjsonReporter {
    out: Box<dyn Write + Send>,
    path: std::path::PathBuf,
}

impl NdjsonReporter {
    /// `-` is standard output; anything else a file, created anew.
    pub fn open(target: &std::path::Path) -> Result<Self, ReportError> {
        let out: Box<dyn Write + Send> = if target.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            let file = std::fs::File::create(target).map_err(|source| ReportError::Write {
                path: target.to_path_buf(),
                source,
            })?;
            Box::new(std::io::BufWriter::new(file))
        };
        Ok(NdjsonReporter {
            out,
            path: target.to_path_buf(),
        })
    }
}

/// One event as the JSON object written on its line.
pub fn event_line(event: &RunEvent) -> serde_json::Value {
    let mut value = serde_json::to_value(event).expect("events serialize");
    if let Some(map) = value.as_object_mut() {
        map.insert("schema_version".into(), SCHEMA_VERSION.into());
        map.insert(
            "timestamp".into(),
            rfc3339(std::time::SystemTime::now()).into(),
        );
        // Every script event names its script at the top level, whatever its shape.
        if let RunEvent::ScriptFinished { result } | RunEvent::ScriptCarried { result, .. } = event
        {
            map.insert("id".into(), result.id.clone().into());
        }
        if let RunEvent::Planned { script } = event {
            map.insert("id".into(), script.id.clone().into());
        }
    }
    value
}

impl Reporter for NdjsonReporter {
    fn handle(&mut self, event: &RunEvent) -> Result<(), ReportError> {
        let line = event_line(event);
        let fail = |source| ReportError::Write {
            path: self.path.clone(),
            source,
        };
        serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::other)
            .map_err(fail)?;
        self.out.write_all(b"\n").map_err(fail)?;
        self.out.flush().map_err(fail)
    }
}
