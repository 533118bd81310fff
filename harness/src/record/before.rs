//! `storage-before.json` ([`super::rundir::STORAGE_BEFORE`]): what a storage of
//! the user's own held before the run, one entry per workload key, as the
//! resource's pre-run probe read it. The resource writes it; the report reads it
//! (a storage holding data fails the run).

/// One key as the pre-run probe read it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeyBefore {
    pub key: String,
    pub value: Option<i64>,
    pub token: Option<i64>,
}
