//! fencecheck: a chaos harness for distributed locks with fencing tokens.
//!
//! The path of data: [`scenario`] (TOML → Scenario) → [`plan`] (can it run on this
//! system and backend?) → [`run`] (backend, workers,
//! nemesis) → files in the run directory ([`record`]: the history, the service's observations, the storage log) →
//! [`check`] (pure checkers) → [`assess`] (report.json) → [`output`] (terminal).

pub mod assess;
pub mod backend;
pub mod check;
pub mod cli;
pub mod clockshim;
pub mod cluster;
#[cfg(test)]
mod descriptors;
pub mod exit;
pub mod image_context;
pub mod images;
pub mod junit;
pub mod links;
pub mod nemesis;
pub mod output;
pub mod plan;
pub mod prereq;
pub mod proc;
pub mod record;
pub mod resources;
pub mod run;
pub mod scenario;
pub mod shrink;
pub mod suite;
pub mod systems;
pub mod worker;
