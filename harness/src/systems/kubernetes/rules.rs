//! Kubernetes' scenario rules: the TTL is the Lease's `leaseDurationSeconds`
//! (whole seconds), and the renew deadline and retry period obey client-go's own
//! checks (`NewLeaderElector`: `LeaseDuration > RenewDeadline > 1.2 ×
//! RetryPeriod`). Tokens: `grant` (the acquiring write's resourceVersion),
//! `transitions` (`leaseTransitions`), `none`.

use std::time::Duration;

use crate::scenario::{Scenario, ScenarioError, TokenName};
use crate::systems::Rules;

pub const RULES: Rules = Rules {
    check,
    tokens: &[TokenName::Grant, TokenName::Transitions, TokenName::None],
    tokens_why: " (grant: the acquiring write's resourceVersion; transitions: leaseTransitions)",
    persistence: false,
    elector_timing: true,
    cluster_apiserver: true,
};

pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| s.source.error_at_key(key, message);
    if s.lock.apiserver.is_own() {
        crate::systems::version_refused(
            s,
            |v| v == "1.20",
            "\"1.20\" (kube-apiserver built from Debian's source)",
        )?;
    } else {
        on_the_cluster(s)?;
    }

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
    Ok(())
}

/// `apiserver = "cluster"`: the Leases live on the cluster's API server, which is
/// not fencecheck's to start, size, pause or kill. The workers' links to it and
/// the workers themselves are, and so is the storage.
fn on_the_cluster(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| s.source.error_at_key(key, message);
    let why = "lock.apiserver = \"cluster\" elects on the cluster's own API server";
    if let Some(v) = &s.cluster.version {
        let key = if s.source.has_key("version") {
            "version"
        } else {
            "etcd"
        };
        return Err(err(
            key,
            format!(
                "cluster.version = {v:?}: {why}, whose version is its own; expected no version"
            ),
        ));
    }
    if s.cluster.members.0 != 1 {
        return Err(err(
            "members",
            format!(
                "cluster.members = {}: {why}, which has no members of fencecheck's; expected \
                 no members (or 1)",
                s.cluster.members.0
            ),
        ));
    }
    for (i, f) in s.faults.iter().enumerate() {
        if f.target.is_members() {
            return Err(s.source.error_at_fault(
                i,
                "target",
                format!(
                    "fault #{} ({} of {}): {why}, which fencecheck does not fault; expected a \
                     worker, a worker link or the storage as the target",
                    i + 1,
                    f.kind,
                    f.target
                ),
            ));
        }
    }
    Ok(())
}
