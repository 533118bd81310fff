//! ZooKeeper's scenario rules: its version and the session timeouts it
//! negotiates.

use std::time::Duration;

use crate::scenario::{Scenario, ScenarioError, TokenName};
use crate::systems::Rules;

pub const RULES: Rules = Rules {
    check,
    tokens: &[
        TokenName::Grant,
        TokenName::Czxid,
        TokenName::Session,
        TokenName::SessionId,
        TokenName::None,
    ],
    tokens_why: "",
    persistence: false,
    elector_timing: false,
    cluster_apiserver: false,
};

pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    crate::systems::version_refused(s, |v| v == "3.8", "\"3.8\"")?;
    let ttl = s.lock.ttl;
    // tickTime is 1 s: ZooKeeper negotiates session timeouts into [2, 20] ticks.
    if ttl < Duration::from_secs(2) || ttl > Duration::from_secs(20) {
        return Err(s.source.error_at_key(
            "ttl",
            format!(
                "lock.ttl = {}: ZooKeeper (tickTime 1s) negotiates session timeouts \
                 between 2s and 20s; expected a value in that range",
                humantime::format_duration(ttl)
            ),
        ));
    }
    Ok(())
}
