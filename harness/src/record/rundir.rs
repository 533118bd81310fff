//! The one owner of run-directory file names: everything a run writes, and every
//! reader of a run directory, names its files through here.

use std::path::{Path, PathBuf};

/// Backend, versions, seed, the planned fault schedule, the reproduce command.
pub const RUN_INFO: &str = "run.json";
/// The scenario as resolved (defaults and overrides filled in).
pub const SCENARIO: &str = "scenario.toml";
/// Every process's events merged in time order.
pub const HISTORY: &str = "history.jsonl";
/// The storage's durable request log.
pub const STORAGE_LOG: &str = "storage.jsonl";
/// The storage process's own output.
pub const STORAGE_PROCESS_LOG: &str = "storage.log";
/// The heal phase's final reads (process `final`).
pub const FINAL_EVENTS: &str = "final.jsonl";
/// The nemesis's events.
pub const NEMESIS_EVENTS: &str = "nemesis.jsonl";
/// What the harness observed of the lock service (grants, session ends).
pub const SERVICE_OBSERVATIONS: &str = "service.jsonl";
/// What the pre-run probe read of every workload key from a storage of the
/// user's own (`[storage] kind = "http"`): a storage holding data fails the run.
pub const STORAGE_BEFORE: &str = "storage-before.json";
/// Set when the run reached its end (heal phase and final reads done); a run
/// directory without it was killed or interrupted.
pub const COMPLETE: &str = "complete.json";
pub const REPORT_JSON: &str = "report.json";
pub const REPORT_HTML: &str = "report.html";
/// `[network] unreachable`: what each standing link refused, counted by its proxy
/// at the end of the run (written only when the scenario has such links).
pub const NETWORK_JSON: &str = "network.json";
/// What the docker backend created for the run.
pub const DOCKER_JSON: &str = "docker.json";
/// Workers in pods wait for this file (holding the run's end time) to start.
pub const WORKER_GATE: &str = "workers.start";
/// `[storage] kind = "postgres"`: the database's own output (initdb's too).
pub const PG_LOG: &str = "postgres.log";
/// `[storage] kind = "postgres"`: its data directory, or a link to one the
/// postgres user can reach (`resources/postgres/server.rs`).
pub const PG_DATA: &str = "pg.data";

pub fn worker_events(run_dir: &Path, id: u32) -> PathBuf {
    run_dir.join(format!("worker-{id}.jsonl"))
}

pub fn worker_log(run_dir: &Path, id: u32) -> PathBuf {
    run_dir.join(format!("worker-{id}.log"))
}

/// An external lock client's stderr (`[client]`): the adapter's own log.
pub fn client_log(run_dir: &Path, id: u32) -> PathBuf {
    run_dir.join(format!("worker-{id}.client.log"))
}

/// Member `i`'s log: `etcd-0.log`, `zk-0.log`.
pub fn member_log(run_dir: &Path, service: &str, i: usize) -> PathBuf {
    run_dir.join(format!("{service}-{i}.log"))
}

/// Member `i`'s data directory: `etcd-0.data`, `zk-0.data`.
pub fn member_data(run_dir: &Path, service: &str, i: usize) -> PathBuf {
    run_dir.join(format!("{service}-{i}.data"))
}

/// Is `name` one of the per-process event files the history is merged from?
pub fn is_event_file(name: &str) -> bool {
    name.ends_with(".jsonl")
        && (name.starts_with("worker-") || name == NEMESIS_EVENTS || name == FINAL_EVENTS)
}
