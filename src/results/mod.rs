//! The results folder's one owner: its present (each script's current record, which
//! stands until a run replaces it or the script's source leaves the tree) and its past
//! (`history/<run_id>/`, within a budget). The runner hands it records and asks it to
//! make room for a new one; nothing else moves, copies or removes a record's files.
//!
//! - [`archive`]: keeps a record's files in this run's history before they are replaced;
//! - [`sweep`]: before a run, moves the records of scripts whose source left the tree,
//!   and prunes the history to its budget;
//! - [`carry`]: the records a run stands on without running them (kept, carried);
//! - [`past`]: what earlier runs knew (durations, memory) and whether an earlier
//!   success still stands;
//! - [`fingerprint`]: what a result depends on, part by part, for `--resume`.

pub mod archive;
pub mod carry;
pub mod fingerprint;
pub mod past;
pub mod sweep;

pub use archive::{Ledger, HISTORY_DIR};
