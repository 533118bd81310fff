//! The cross-field rules of a scenario, run after parsing; each error points at the
//! line of the field it names. What a lock system or a backend cannot do is not
//! the config's to know: `crate::plan` refuses it from their declared
//! capabilities, before anything starts.

use std::time::Duration;

use super::{Fencing, Scenario, ScenarioError, ServiceKind, StorageKind, Target, TokenMode};

pub fn validate(s: &Scenario, text: &str, file: &str) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| ScenarioError {
        file: file.to_string(),
        line: line_of_key(text, key),
        message,
    };
    if s.name.trim().is_empty() {
        return Err(err("name", "`name` must not be empty".into()));
    }
    if s.duration < Duration::from_secs(1) {
        return Err(err("duration", "`duration` must be at least 1s".into()));
    }
    let w = &s.workload;
    if w.workers == 0 || w.workers > 64 {
        return Err(err(
            "workers",
            format!("workload.workers = {}: expected 1 to 64", w.workers),
        ));
    }
    if w.keys == 0 || w.keys > 1000 {
        return Err(err(
            "keys",
            format!("workload.keys = {}: expected 1 to 1000", w.keys),
        ));
    }
    if w.ops_per_hold == 0 {
        return Err(err(
            "ops_per_hold",
            "workload.ops_per_hold must be at least 1".into(),
        ));
    }
    if s.storage.token.mode() == TokenMode::None && s.storage.fencing != Fencing::Off {
        return Err(err(
            "token",
            "storage.token = \"none\" needs storage.fencing = \"off\" (nothing to compare)".into(),
        ));
    }
    // Nothing is sent, so the token check judges nothing: an expectation on it
    // could never be met or missed for a reason. (An external client sends what
    // its `[client] token` names, whatever `storage.token` says.)
    if s.storage.token.mode() == TokenMode::None && s.client.is_none() {
        for (key, set) in [
            ("token_regressions", s.expect.token_regressions.is_some()),
            ("token_repeats", s.expect.token_repeats.is_some()),
        ] {
            if set {
                return Err(err(
                    key,
                    format!(
                        "expect.{key}: storage.token = \"none\" sends no token, so there is \
                         nothing to judge; expected a token (e.g. storage.token = \"grant\") \
                         or no {key} expectation"
                    ),
                ));
            }
        }
    }
    super::storage::storage_rules(s, &err)?;
    super::network::rules(s, text, file)?;
    if let Some(r) = &s.cluster.registry {
        if let Err(why) = registry_rule(r) {
            return Err(err(
                "registry",
                format!(
                    "cluster.registry = {r:?}: {why}; expected host[:port][/path], \
                     e.g. \"registry.example.com:5000/team\""
                ),
            ));
        }
    }
    let raw = raw_targets(text);
    for i in 0..s.faults.len() {
        let raw_target = raw.get(i).and_then(Option::as_deref);
        fault_rules(s, i, raw_target, text, file)?;
    }
    Ok(())
}

fn fault_rules(
    s: &Scenario,
    i: usize,
    raw_target: Option<&str>,
    text: &str,
    file: &str,
) -> Result<(), ScenarioError> {
    let f = &s.faults[i];
    let ferr = |key: &str, message: String| ScenarioError {
        file: file.to_string(),
        line: line_of_nth_table_key(text, "[[fault]]", i, key),
        message: format!("fault #{} ({}): {message}", i + 1, f.kind),
    };
    f.fault.check().map_err(|(key, why)| ferr(key, why))?;
    let t = f.target;
    if t == Target::Storage && s.storage.kind == StorageKind::Http {
        return Err(ferr(
            "target",
            format!(
                "target storage: with storage.kind = \"{}\" fencecheck does not run the \
                 storage, so it cannot {} it; workers->storage (delay, partition) works",
                s.storage.kind.as_str(),
                f.kind
            ),
        ));
    }
    let members = s.member_count() as u8;
    if let Target::Member(m) = t {
        if m >= members {
            return Err(ferr(
                "target",
                format!("member:{m} does not exist (members are 0..{members})"),
            ));
        }
    }
    if t.min_members() > members {
        return Err(ferr(
            "target",
            format!(
                "{t} needs at least {} members; the cluster has {members}",
                t.min_members()
            ),
        ));
    }
    if let Target::Worker(n) = t {
        if n >= s.workload.workers {
            return Err(ferr(
                "target",
                format!(
                    "worker:{n} does not exist (workers are 0..{})",
                    s.workload.workers
                ),
            ));
        }
    }
    if let Some(raw) = raw_target {
        if raw.starts_with("etcd") && s.lock.service != ServiceKind::Etcd {
            return Err(ferr(
                "target",
                format!(
                    "target {raw:?} names etcd but the service is {}; expected {t}",
                    s.lock.service
                ),
            ));
        }
    }
    Ok(())
}

/// Each fault's `target` as written (before aliases were resolved), parsed once.
fn raw_targets(text: &str) -> Vec<Option<String>> {
    let Ok(v) = toml::from_str::<toml::Value>(text) else {
        return Vec::new();
    };
    let faults = v.get("fault").and_then(|f| f.as_array());
    faults
        .map(|fs| {
            fs.iter()
                .map(|f| f.get("target").and_then(|t| t.as_str()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub fn line_of_offset(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The line of the first `key = ...` assignment, for errors found after parsing.
/// A registry the images' names are put under: `host[:port][/path]`, no scheme,
/// no tag or digest (each image has its own), a path in lower case.
fn registry_rule(r: &str) -> Result<(), &'static str> {
    if r.trim().is_empty() {
        return Err("empty");
    }
    if r.contains("://") {
        return Err("a name, not a URL (no scheme)");
    }
    if r.chars().any(|c| c.is_whitespace() || c == '@') {
        return Err("no spaces or digest");
    }
    let (host, path) = r.split_once('/').unwrap_or((r, ""));
    if host.is_empty() {
        return Err("no host");
    }
    if path.contains(':') {
        return Err("no tag (each image has its own)");
    }
    if path.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("a path in lower case");
    }
    Ok(())
}

pub fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .map(|r| r.trim_start().starts_with('='))
                .unwrap_or(false)
        })
        .map(|i| i + 1)
}

/// The line of `key` inside the n-th `[[fault]]` table (or of the table header).
pub fn line_of_nth_table_key(text: &str, header: &str, n: usize, key: &str) -> Option<usize> {
    let mut seen = 0usize;
    let mut in_table = false;
    let mut header_line = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            in_table = t == header && {
                seen += 1;
                seen == n + 1
            };
            if in_table {
                header_line = Some(i + 1);
            }
            continue;
        }
        if in_table {
            if let Some(r) = t.strip_prefix(key) {
                if r.trim_start().starts_with('=') {
                    return Some(i + 1);
                }
            }
        }
    }
    header_line
}
