//! etcd's scenario rules: its versions, and a lease TTL etcd would not silently
//! change.

use std::time::Duration;

use crate::scenario::{EtcdVersion, Scenario, ScenarioError, TokenName};
use crate::systems::Rules;

pub const RULES: Rules = Rules {
    check,
    tokens: &[
        TokenName::Grant,
        TokenName::Revision,
        TokenName::Session,
        TokenName::LeaseId,
        TokenName::None,
    ],
    tokens_why: "",
    persistence: false,
    elector_timing: false,
    cluster_apiserver: false,
};

pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| s.source.error_at_key(key, message);
    crate::systems::version_refused(
        s,
        |v| v.parse::<EtcdVersion>().is_ok(),
        "\"3.5\" or \"3.4\"",
    )?;
    let ttl = s.lock.ttl;
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;

    fn refused(text: &str) -> crate::scenario::ScenarioError {
        let s = Scenario::parse(text, "t.toml").expect("parses");
        crate::plan::check(&s, s.cluster.backend).expect_err("the plan refuses it")
    }

    #[test]
    fn a_ttl_below_etcds_minimum_points_at_its_line() {
        let e = refused("name = \"x\"\n[lock]\nttl = \"1s\"\n");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("minimum lease TTL"), "{e}");
    }

    #[test]
    fn a_version_etcd_has_not_points_at_its_line() {
        let e = refused("name = \"x\"\n[cluster]\nversion = \"3.3\"\n");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("\"3.5\" or \"3.4\""), "{e}");
    }
}
