//! `[network]`: the network a scenario is set in, as it stands for the whole run.
//!
//! Not a fault: nothing injects it at a time, nothing heals it, the fault counts
//! and `--aim` never see it. It is the topology — which worker can reach which
//! member — the way `[cluster] members` is the size. Kleppmann's Redlock example
//! ("How to do distributed locking", 2016) is set in such a network: each client
//! reaches only some of the masters, so every holder has a bare majority, and one
//! master's clock jump is then the only event the example needs.

use serde::{Deserialize, Serialize};

use super::{line_of_key, line_of_nth_table_key, Scenario, ScenarioError};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Links that do not work for the whole run: every listed worker's link to
    /// every listed member refuses connections (the fault proxy resets each one,
    /// as a host that is down or a route that is refused does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<Unreachable>,
}

/// `[[network.unreachable]]`: these workers cannot reach these members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unreachable {
    pub workers: Vec<u32>,
    pub members: Vec<u32>,
}

impl Network {
    pub fn is_empty(&self) -> bool {
        self.unreachable.is_empty()
    }

    /// Every (worker, member) link that is down for the run, each once, in order.
    pub fn cut_links(&self) -> Vec<(u32, u32)> {
        let mut links: Vec<(u32, u32)> = self
            .unreachable
            .iter()
            .flat_map(|u| {
                u.workers
                    .iter()
                    .flat_map(move |&w| u.members.iter().map(move |&m| (w, m)))
            })
            .collect();
        links.sort_unstable();
        links.dedup();
        links
    }

    /// One line for the terminal and the report: "worker 0, 1 ✗ member 2; …".
    pub fn describe(&self) -> String {
        let list = |v: &[u32]| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        self.unreachable
            .iter()
            .map(|u| {
                format!(
                    "worker {} cannot reach member {}",
                    list(&u.workers),
                    list(&u.members)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Each entry names workers and members that exist, and at least one of each.
pub fn rules(s: &Scenario, text: &str, file: &str) -> Result<(), ScenarioError> {
    let (workers, members) = (s.workload.workers, u32::from(s.cluster.members.0));
    for (i, u) in s.network.unreachable.iter().enumerate() {
        let err = |key: &str, message: String| ScenarioError {
            file: file.to_string(),
            line: line_of_nth_table_key(text, "[[network.unreachable]]", i, key)
                .or_else(|| line_of_key(text, "unreachable")),
            message,
        };
        let check = |key: &str, list: &[u32], n: u32, what: &str| {
            if list.is_empty() {
                return Err(err(
                    key,
                    format!("network.unreachable[{i}].{key} is empty: expected the {what} numbers (0 to {})", n - 1),
                ));
            }
            if let Some(bad) = list.iter().find(|&&x| x >= n) {
                return Err(err(
                    key,
                    format!(
                        "network.unreachable[{i}].{key} names {what} {bad}, but the scenario has \
                         {n}: expected 0 to {}",
                        n - 1
                    ),
                ));
            }
            Ok(())
        };
        check("workers", &u.workers, workers, "worker")?;
        check("members", &u.members, members, "member")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;

    const BASE: &str = "name = \"t\"\n[cluster]\nmembers = 3\n[lock]\nservice = \"redlock\"\n\
                        [workload]\nworkers = 5\n";

    #[test]
    fn cut_links_are_every_pair_once() {
        let text = format!(
            "{BASE}[[network.unreachable]]\nworkers = [0, 1]\nmembers = [2]\n\
             [[network.unreachable]]\nworkers = [1, 2]\nmembers = [2, 1]\n"
        );
        let s = Scenario::parse(&text, "t.toml").expect("valid");
        assert_eq!(
            s.network.cut_links(),
            vec![(0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
        );
        assert_eq!(
            s.network.describe(),
            "worker 0, 1 cannot reach member 2; worker 1, 2 cannot reach member 2, 1"
        );
        // The resolved scenario in the run directory keeps it.
        let again = Scenario::parse(&s.to_toml(), "scenario.toml").expect("round trip");
        assert_eq!(again.network, s.network);
    }

    #[test]
    fn a_worker_or_member_that_does_not_exist_is_refused_at_its_line() {
        let text = format!(
            "{BASE}[[network.unreachable]]\nworkers = [0]\nmembers = [2]\n\
             [[network.unreachable]]\nworkers = [5]\nmembers = [1]\n"
        );
        let e = Scenario::parse(&text, "t.toml").expect_err("worker 5 of 5");
        assert_eq!(e.line, Some(12), "{e}");
        assert!(
            e.message.contains("names worker 5, but the scenario has 5"),
            "{e}"
        );

        let text = format!("{BASE}[[network.unreachable]]\nworkers = [0]\nmembers = [3]\n");
        let e = Scenario::parse(&text, "t.toml").expect_err("member 3 of 3");
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.contains("expected 0 to 2"), "{e}");

        let text = format!("{BASE}[[network.unreachable]]\nworkers = []\nmembers = [1]\n");
        let e = Scenario::parse(&text, "t.toml").expect_err("empty");
        assert!(e.message.contains("is empty"), "{e}");

        let text = format!("{BASE}[[network.unreachable]]\nworker = [0]\nmembers = [1]\n");
        let e = Scenario::parse(&text, "t.toml").expect_err("unknown field");
        assert_eq!(e.line, Some(9), "{e}");
    }
}
