//! The cross-field rules of a scenario, run after parsing; each error points at the
//! line of the field it names. What a lock system or a backend cannot do is not
//! the config's to know: `crate::plan` refuses it from their declared
//! capabilities, before anything starts.

use std::time::Duration;

use super::{
    Durability, EtcdVersion, Fencing, Scenario, ScenarioError, ServiceKind, StorageKind, Target,
    TokenMode, TokenName,
};

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
    service_rules(s, text, &err)?;
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
    storage_rules(s, &err)?;
    let raw = raw_targets(text);
    for i in 0..s.faults.len() {
        let raw_target = raw.get(i).and_then(Option::as_deref);
        fault_rules(s, i, raw_target, text, file)?;
    }
    Ok(())
}

/// `[storage]`: what each kind needs and what it cannot take.
fn storage_rules(
    s: &Scenario,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let st = &s.storage;
    match (st.kind, &st.url) {
        (StorageKind::Http, None) => {
            return Err(err(
                "kind",
                "storage.kind = \"http\" needs storage.url = \"http://host:port/\"".into(),
            ))
        }
        (StorageKind::Http, Some(url)) => {
            http_url(url).map_err(|why| err("url", format!("storage.url = {url:?}: {why}")))?;
        }
        (StorageKind::Fencecheck, Some(_)) => {
            return Err(err(
                "url",
                "storage.url goes only with kind = \"http\" (fencecheck's storage is started \
                 by the backend)"
                    .into(),
            ))
        }
        (StorageKind::Fencecheck, None) | (StorageKind::Postgres, _) => {}
    }
    super::pg::rules(s, err)?;
    if st.kind == StorageKind::Http && st.durability != Durability::Flush {
        return Err(err(
            "durability",
            "storage.durability is fencecheck's storage's; a service of your own (kind = \
             \"http\") decides its own durability"
                .into(),
        ));
    }
    Ok(())
}

/// A `kind = "http"` URL: plain HTTP with a host and a port (the workers reach it
/// through fencecheck's TCP proxies, which name no host; TLS would not verify).
pub fn http_url(url: &str) -> Result<(String, u16, String), String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if u.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported: workers reach the service through fencecheck's \
             TCP proxies, so only plain http:// works",
            u.scheme()
        ));
    }
    let host = u.host_str().ok_or("no host")?.to_string();
    let port = u.port_or_known_default().ok_or("no port")?;
    let mut path = u.path().to_string();
    if let Some(q) = u.query() {
        path = format!("{path}?{q}");
    }
    Ok((host, port, path))
}

/// The service, its version, its TTL and its token names.
fn service_rules(
    s: &Scenario,
    text: &str,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let svc = s.lock.service;
    if let Some(v) = &s.cluster.version {
        let ok = match svc {
            ServiceKind::Etcd => v.parse::<EtcdVersion>().is_ok(),
            ServiceKind::Zookeeper => v == "3.8",
            ServiceKind::Redis | ServiceKind::Redlock => v == "7.0",
            ServiceKind::Kubernetes => v == "1.20",
        };
        if !ok {
            let want = match svc {
                ServiceKind::Etcd => "\"3.5\" or \"3.4\"",
                ServiceKind::Zookeeper => "\"3.8\"",
                ServiceKind::Redis | ServiceKind::Redlock => "\"7.0\" (Debian's redis-server)",
                ServiceKind::Kubernetes => "\"1.20\" (kube-apiserver built from Debian's source)",
            };
            // Point at whichever spelling the file uses (`etcd` in 0.1 scenarios).
            let key = if line_of_key(text, "version").is_some() {
                "version"
            } else {
                "etcd"
            };
            return Err(err(
                key,
                format!("cluster.version = {v:?} is not available for {svc}; expected {want}"),
            ));
        }
    }
    let ttl = s.lock.ttl;
    match svc {
        ServiceKind::Etcd => {
            if ttl < Duration::from_secs(2) {
                return Err(err(
                    "ttl",
                    format!(
                        "lock.ttl = {}: etcd's minimum lease TTL is 2s (it would silently raise \
                         it); expected at least \"2s\"",
                        humantime::format_duration(ttl)
                    ),
                ));
            }
            if ttl.subsec_nanos() != 0 {
                return Err(err(
                    "ttl",
                    "lock.ttl: etcd leases have whole-second TTLs; expected e.g. \"2s\"".into(),
                ));
            }
        }
        ServiceKind::Zookeeper => {
            // tickTime is 1 s: ZooKeeper negotiates session timeouts into [2, 20] ticks.
            if ttl < Duration::from_secs(2) || ttl > Duration::from_secs(20) {
                return Err(err(
                    "ttl",
                    format!(
                        "lock.ttl = {}: ZooKeeper (tickTime 1s) negotiates session timeouts \
                         between 2s and 20s; expected a value in that range",
                        humantime::format_duration(ttl)
                    ),
                ));
            }
        }
        ServiceKind::Redis | ServiceKind::Redlock => return redis_rules(s, text, err),
        ServiceKind::Kubernetes => return kubernetes_rules(s, err),
    }
    if s.lock.renew_deadline.is_some() || s.lock.retry_period.is_some() {
        let key = if s.lock.renew_deadline.is_some() {
            "renew_deadline"
        } else {
            "retry_period"
        };
        return Err(err(
            key,
            format!("lock.{key} is Kubernetes leader election's; {svc} has none"),
        ));
    }
    if s.lock.persistence.is_some() {
        return Err(err(
            "persistence",
            format!("lock.persistence is Redis's (redis, redlock); {svc} keeps its own data"),
        ));
    }
    if matches!(s.storage.token, TokenName::Counter | TokenName::Owner) {
        return Err(err(
            "token",
            format!(
                "storage.token = \"{}\" is Redis's (redis, redlock); {svc} has grant, session \
                 or none",
                s.storage.token.as_str()
            ),
        ));
    }
    if let Some(owner) = s.storage.token.service() {
        if owner != svc {
            return Err(err(
                "token",
                format!(
                    "storage.token = \"{}\" is {owner}'s; {svc} has no such token (expected \
                     grant, session or none{})",
                    s.storage.token.as_str(),
                    match svc {
                        ServiceKind::Etcd => ", or etcd's names revision and lease-id",
                        ServiceKind::Zookeeper => ", or ZooKeeper's names czxid and session-id",
                        ServiceKind::Redis | ServiceKind::Redlock | ServiceKind::Kubernetes => "",
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// Kubernetes: the TTL is the Lease's `leaseDurationSeconds` (whole seconds), and
/// the renew deadline and retry period obey client-go's own checks
/// (`NewLeaderElector`: `LeaseDuration > RenewDeadline > 1.2 × RetryPeriod`).
/// Tokens: `grant` (the acquiring write's resourceVersion), `transitions`
/// (`leaseTransitions`), `none`.
fn kubernetes_rules(
    s: &Scenario,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let l = &s.lock;
    let fmt = |d: Duration| humantime::format_duration(d).to_string();
    if l.ttl < Duration::from_secs(1) || l.ttl.subsec_nanos() != 0 {
        return Err(err(
            "ttl",
            format!(
                "lock.ttl = {}: a Lease's leaseDurationSeconds is whole seconds; expected e.g. \"3s\"",
                fmt(l.ttl)
            ),
        ));
    }
    let (renew, retry) = (l.renew_deadline(), l.retry_period());
    if renew >= l.ttl {
        return Err(err(
            if l.renew_deadline.is_some() {
                "renew_deadline"
            } else {
                "ttl"
            },
            format!(
                "lock.renew_deadline = {} is not below lock.ttl = {} (client-go refuses it: \
                 leaseDuration must be greater than renewDeadline)",
                fmt(renew),
                fmt(l.ttl)
            ),
        ));
    }
    if retry.is_zero() || retry.mul_f64(1.2) >= renew {
        return Err(err(
            if l.retry_period.is_some() {
                "retry_period"
            } else {
                "renew_deadline"
            },
            format!(
                "lock.retry_period = {}: client-go wants renewDeadline ({}) above 1.2 × \
                 retryPeriod, and a retry period above 0",
                fmt(retry),
                fmt(renew)
            ),
        ));
    }
    if s.lock.persistence.is_some() {
        return Err(err(
            "persistence",
            "lock.persistence is Redis's (redis, redlock); kubernetes keeps its data in etcd"
                .into(),
        ));
    }
    let t = s.storage.token;
    // An external client's token is `[client] token` (scenario/client.rs).
    if s.client.is_none()
        && !matches!(
            t,
            TokenName::Grant | TokenName::Transitions | TokenName::None
        )
    {
        return Err(err(
            "token",
            format!(
                "storage.token = \"{}\": kubernetes has grant (the acquiring write's \
                 resourceVersion), transitions (leaseTransitions) or none",
                t.as_str()
            ),
        ));
    }
    Ok(())
}

/// Redis and Redlock: instance count, TTL, tokens. The key's TTL is the lease
/// (renewed every TTL/3 on `redis`); Redis has no order of grants a client can
/// read, so `grant` and `session` are not tokens it has.
fn redis_rules(
    s: &Scenario,
    text: &str,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let svc = s.lock.service;
    let n = s.cluster.members.0;
    let members_key = if line_of_key(text, "members").is_some() {
        "members"
    } else {
        "etcd_members"
    };
    if svc == ServiceKind::Redis && n != 1 {
        return Err(err(
            members_key,
            format!(
                "cluster.members = {n}: service = \"redis\" is one instance; for several \
                 independent masters use service = \"redlock\""
            ),
        ));
    }
    if svc == ServiceKind::Redlock && (n < 3 || n.is_multiple_of(2)) {
        return Err(err(
            members_key,
            format!(
                "cluster.members = {n}: Redlock needs an odd number of at least 3 independent \
                 masters (3 or 5), so that two majorities always share one"
            ),
        ));
    }
    let ttl = s.lock.ttl;
    if ttl < Duration::from_millis(500) || !ttl.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(err(
            "ttl",
            format!(
                "lock.ttl = {}: the Redis lock key's PX needs whole milliseconds, at least 500ms",
                humantime::format_duration(ttl)
            ),
        ));
    }
    // An external client's token is `[client] token` (scenario/client.rs).
    match s.storage.token {
        _ if s.client.is_some() => {}
        TokenName::Counter | TokenName::Owner | TokenName::None => {}
        t => {
            return Err(err(
                "token",
                format!(
                    "storage.token = \"{}\" is not available for {svc}: Redis has no order of \
                     grants a client can read and no sessions; expected counter (INCR in the \
                     acquire script), owner (the random owner value) or none",
                    t.as_str()
                ),
            ))
        }
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
