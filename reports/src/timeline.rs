//! What the HTML timeline draws, as plain data built by the harness from the
//! history (the report model keeps only summaries and counterexamples).

use serde::{Deserialize, Serialize};

use crate::Hold;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// Worker ids, one lane each (the nemesis lane is drawn from `Report::faults`).
    pub workers: Vec<u32>,
    /// Lock holds (client-observed), as the mutex checker saw them.
    pub holds: Vec<Hold>,
    /// Every client operation, invoke to completion.
    pub ops: Vec<OpMark>,
    /// Point events, e.g. `keepalive-lost`.
    pub notices: Vec<Notice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpMark {
    pub worker: u32,
    /// `acquire`, `read`, `write`, `release`.
    pub f: String,
    pub start_ns: u64,
    /// `None` when the operation never completed in the record.
    pub end_ns: Option<u64>,
    /// `ok`, `rejected-stale` (a write the storage refused), `fail`, or `unknown`
    /// (outcome not known: timed out, or never completed).
    pub outcome: String,
    pub key: Option<String>,
    pub value: Option<i64>,
    pub token: Option<i64>,
    pub revision: Option<i64>,
    /// Links a write to the storage log and to fencing counterexamples
    /// (`WriteRef::worker` + `WriteRef::request_id`).
    pub request_id: Option<u64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub worker: u32,
    pub time_ns: u64,
    pub what: String,
    pub detail: Option<String>,
}
