//! Redis's and Redlock's scenario rules: instance count, TTL, tokens. The key's
//! TTL is the lease (renewed every TTL/3 on `redis`); Redis has no order of
//! grants a client can read, so `grant` and `session` are not tokens it has.

use std::time::Duration;

use crate::scenario::{Scenario, ScenarioError, ServiceKind, TokenName};
use crate::systems::Rules;

pub const RULES: Rules = Rules {
    check,
    tokens: &[TokenName::Counter, TokenName::Owner, TokenName::None],
    tokens_why: ": Redis has no order of grants a client can read and no sessions (counter: \
                 INCR in the acquire script; owner: the random owner value)",
    persistence: true,
    elector_timing: false,
    cluster_apiserver: false,
};

pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| s.source.error_at_key(key, message);
    crate::systems::version_refused(s, |v| v == "7.0", "\"7.0\" (Debian's redis-server)")?;

    let svc = s.lock.service;
    let n = s.cluster.members.0;
    let members_key = if s.source.has_key("members") {
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
    Ok(())
}
