//! jax-runner: discover, run and report generated JAX/POMDP scripts.
//!
//! The three stages are [`discovery`] (find scripts), [`runner`] (execute them) and
//! [`report`] (write results); [`app`] wires them together, [`events`] is the stream
//! between the core and its subscribers, and [`model`] is the serialized contract.

pub mod app;
pub mod config;
pub mod confined;
pub mod discovery;
pub mod doctor;
pub mod environment;
pub mod error;
pub mod events;
pub mod gpu;
pub mod halt;
pub mod listing;
pub mod lock;
pub mod model;
pub mod paths;
pub mod plan;
pub mod python;
pub mod render;
pub mod report;
pub mod results;
pub mod retry;
pub mod runner;
pub mod sandbox;
pub mod schema;
