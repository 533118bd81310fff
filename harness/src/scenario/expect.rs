//! `[expect]`: what a run must show, as counts.

use std::fmt;

use fencecheck_reports::{Checks, CounterCheck, Expectation, Findings, Validity};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CountRepr", into = "String")]
pub enum Count {
    Any,
    Exactly(u64),
    AtLeast(u64),
    AtMost(u64),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CountRepr {
    N(u64),
    S(String),
}

impl TryFrom<CountRepr> for Count {
    type Error = String;
    fn try_from(r: CountRepr) -> Result<Self, String> {
        let s = match r {
            CountRepr::N(n) => return Ok(Count::Exactly(n)),
            CountRepr::S(s) => s,
        };
        let t = s.trim();
        let num = |p: &str| {
            p.trim()
                .parse::<u64>()
                .map_err(|_| format!("{s:?}: expected 0, \">0\", \">=N\", \"<=N\", N or \"any\""))
        };
        if t == "any" {
            Ok(Count::Any)
        } else if let Some(rest) = t.strip_prefix(">=") {
            Ok(Count::AtLeast(num(rest)?))
        } else if let Some(rest) = t.strip_prefix("<=") {
            Ok(Count::AtMost(num(rest)?))
        } else if let Some(rest) = t.strip_prefix('>') {
            Ok(Count::AtLeast(num(rest)? + 1))
        } else {
            Ok(Count::Exactly(num(t)?))
        }
    }
}

impl From<Count> for String {
    fn from(c: Count) -> String {
        c.to_string()
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Any => f.write_str("any"),
            Count::Exactly(n) => write!(f, "{n}"),
            Count::AtLeast(n) => write!(f, ">={n}"),
            Count::AtMost(n) => write!(f, "<={n}"),
        }
    }
}

impl Count {
    pub fn matches(&self, n: u64) -> bool {
        match *self {
            Count::Any => true,
            Count::Exactly(m) => n == m,
            Count::AtLeast(m) => n >= m,
            Count::AtMost(m) => n <= m,
        }
    }
}

/// A check's verdict as `[expect]` states it: `true`/`"valid"` (the check must
/// hold — the default), `false`/`"violated"` (it must fail: a negative control
/// about exactly that), or `"any"` (either, or undecided).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "HoldsRepr", into = "HoldsRepr")]
pub enum Holds {
    Valid,
    Violated,
    Any,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum HoldsRepr {
    B(bool),
    S(String),
}

impl TryFrom<HoldsRepr> for Holds {
    type Error = String;
    fn try_from(r: HoldsRepr) -> Result<Self, String> {
        match r {
            HoldsRepr::B(true) => Ok(Holds::Valid),
            HoldsRepr::B(false) => Ok(Holds::Violated),
            HoldsRepr::S(s) => match s.trim() {
                "valid" | "true" => Ok(Holds::Valid),
                "violated" | "invalid" | "false" => Ok(Holds::Violated),
                "any" => Ok(Holds::Any),
                _ => Err(format!(
                    "{s:?}: expected true (\"valid\"), false (\"violated\") or \"any\""
                )),
            },
        }
    }
}

impl From<Holds> for HoldsRepr {
    fn from(h: Holds) -> HoldsRepr {
        match h {
            Holds::Valid => HoldsRepr::B(true),
            Holds::Violated => HoldsRepr::B(false),
            Holds::Any => HoldsRepr::S("any".into()),
        }
    }
}

impl fmt::Display for Holds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Holds::Valid => "valid",
            Holds::Violated => "violated",
            Holds::Any => "any",
        })
    }
}

/// What the run must show. Every safety check must hold unless a field here says
/// otherwise: an unset `fencing_violations`, `lost_updates`, `linearizable`,
/// `token_regressions`, `token_repeats` (when a token was sent) and `late_grants`
/// (when the service was observed) is judged as 0 / valid. The other counts are
/// judged only when set; `mutex_overlaps` never defaults, because a lease lock is
/// not a mutex: overlapping holds under faults are what fencing is for.
/// `exclusion_violations` (when the service was observed) defaults to 0: a
/// phantom grant or an overlap with both sessions alive is a bug of the lock.
/// `faults_skipped` and `faults_unconfirmed` are not rows: unset, a planned
/// fault not injected or not confirmed makes the run INCONCLUSIVE
/// (`check::coverage`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default = "zero")]
    pub fencing_violations: Count,
    /// Stale writes the storage rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_rejected: Option<Count>,
    /// Writes from the newest grant that the storage rejected (a liveness failure,
    /// e.g. `contrib/lock`'s equality check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_rejected: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutex_overlaps: Option<Count>,
    /// Lost increments; unset means 0, and a counter whose record is inconsistent
    /// (a final value above what the run wrote) fails it too unless it is `"any"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_updates: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_lost: Option<Count>,
    /// The `linearizable` check; unset means it must be valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linearizable: Option<Holds>,
    /// Grants whose token is lower than an earlier grant's (the `token` check);
    /// unset means 0 when a token was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_regressions: Option<Count>,
    /// Grants whose token an earlier grant already had; unset means 0 when a
    /// token was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_repeats: Option<Count>,
    /// Grants told after their session had ended at the service that the client
    /// went on to use (grant validity); unset means 0 when the service was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_grants: Option<Count>,
    /// Late grants the client itself caught and did not use; judged only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_grants_caught: Option<Count>,
    /// Phantom grants (a client told it holds a lock the service never granted
    /// it) plus overlapping holds no session loss explains (the `exclusion`
    /// check); unset means 0 when the service was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusion_violations: Option<Count>,
    /// Planned faults that were not injected; unset means none may be: a run
    /// with one is INCONCLUSIVE (it did not test what it planned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults_skipped: Option<Count>,
    /// Waiters left waiting ≥ 10 s while the lock was free at the service
    /// (`findings.liveness`); judged only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_waits: Option<Count>,
    /// Holders never told that the service ended their session
    /// (`findings.liveness.untold_holders`); judged only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untold_holders: Option<Count>,
    /// Injected faults whose effect was looked for and not seen; unset means
    /// none may be (INCONCLUSIVE otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults_unconfirmed: Option<Count>,
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            fencing_violations: zero(),
            stale_rejected: None,
            fresh_rejected: None,
            mutex_overlaps: None,
            lost_updates: None,
            keepalive_lost: None,
            linearizable: None,
            token_regressions: None,
            token_repeats: None,
            late_grants: None,
            late_grants_caught: None,
            exclusion_violations: None,
            faults_skipped: None,
            stuck_waits: None,
            untold_holders: None,
            faults_unconfirmed: None,
        }
    }
}

fn zero() -> Count {
    Count::Exactly(0)
}

/// Why a counter check failed with nothing lost: its record does not add up.
fn counter_inconsistency(c: &CounterCheck) -> Option<String> {
    if c.valid != Validity::Invalid || c.lost > 0 {
        return None;
    }
    let why = c
        .keys
        .iter()
        .find_map(|k| {
            if k.final_value > 0 && k.final_value as u64 > k.applied {
                Some(format!(
                    "{}'s final value {} is above the {} increments the run wrote \
                     (was the storage empty before the run?)",
                    k.key, k.final_value, k.applied
                ))
            } else if k.acknowledged > k.applied {
                Some(format!(
                    "{}: {} acknowledged increments, {} applied",
                    k.key, k.acknowledged, k.applied
                ))
            } else {
                None
            }
        })
        .unwrap_or_else(|| {
            "the final read disagrees with the storage's record, or is missing".into()
        });
    Some(why)
}

impl Count {
    /// Does it rule 0 out (`">0"`, `">=N"`, `N` with N ≥ 1)? Then only something
    /// the run caused can meet it.
    pub fn needs_some(&self) -> bool {
        match *self {
            Count::AtLeast(n) | Count::Exactly(n) => n > 0,
            Count::Any | Count::AtMost(_) => false,
        }
    }
}

impl Expect {
    /// The expectations that ask for a finding — a count that 0 does not meet,
    /// or a check that must be violated — as `name expected` (e.g.
    /// `stale_rejected >=1`). A run that needs one and whose faults all failed
    /// to take effect is inconclusive (`check::faults::inconclusive`).
    pub fn needs_finding(&self) -> Vec<String> {
        let counts = [
            ("fencing_violations", Some(self.fencing_violations)),
            ("stale_rejected", self.stale_rejected),
            ("fresh_rejected", self.fresh_rejected),
            ("mutex_overlaps", self.mutex_overlaps),
            ("lost_updates", self.lost_updates),
            ("keepalive_lost", self.keepalive_lost),
            ("token_regressions", self.token_regressions),
            ("token_repeats", self.token_repeats),
            ("late_grants", self.late_grants),
            ("late_grants_caught", self.late_grants_caught),
            ("exclusion_violations", self.exclusion_violations),
            ("stuck_waits", self.stuck_waits),
            ("untold_holders", self.untold_holders),
        ];
        let mut out: Vec<String> = counts
            .into_iter()
            .filter_map(|(name, c)| c.filter(Count::needs_some).map(|c| format!("{name} {c}")))
            .collect();
        if self.linearizable == Some(Holds::Violated) {
            out.push("linearizable violated".into());
        }
        out
    }

    /// Judges every expectation, stated or defaulted, against the checks. A
    /// defaulted one says so (`default`), so a failure names the check that failed
    /// without an expectation allowing it.
    pub fn judge(
        &self,
        checks: &Checks,
        findings: &Findings,
        keepalive_lost: u64,
    ) -> Vec<Expectation> {
        let mut out = Vec::new();
        let count = |out: &mut Vec<Expectation>,
                     name: &str,
                     want: Option<Count>,
                     default: bool,
                     actual: u64| {
            if let Some(want) = want {
                out.push(Expectation {
                    name: name.into(),
                    expected: want.to_string(),
                    actual: actual.to_string(),
                    met: want.matches(actual),
                    default,
                });
            }
        };
        let f = &checks.fencing;
        count(
            &mut out,
            "fencing_violations",
            Some(self.fencing_violations),
            false,
            f.stale_accepted,
        );
        count(
            &mut out,
            "stale_rejected",
            self.stale_rejected,
            false,
            f.stale_rejected,
        );
        count(
            &mut out,
            "fresh_rejected",
            self.fresh_rejected,
            false,
            f.fresh_rejected,
        );
        count(
            &mut out,
            "mutex_overlaps",
            self.mutex_overlaps,
            false,
            checks.mutex.overlaps,
        );
        let want = self.lost_updates.unwrap_or(zero());
        let c = &checks.counter;
        let odd = counter_inconsistency(c);
        out.push(Expectation {
            name: "lost_updates".into(),
            expected: want.to_string(),
            actual: match &odd {
                Some(why) => format!("{} (counter inconsistent: {why})", c.lost),
                None => c.lost.to_string(),
            },
            met: want.matches(c.lost) && (odd.is_none() || want == Count::Any),
            default: self.lost_updates.is_none(),
        });
        count(
            &mut out,
            "keepalive_lost",
            self.keepalive_lost,
            false,
            keepalive_lost,
        );
        let want = self.linearizable.unwrap_or(Holds::Valid);
        let actual = checks
            .linearizable
            .as_ref()
            .map(|l| l.valid)
            .unwrap_or(Validity::Unknown);
        out.push(Expectation {
            name: "linearizable".into(),
            expected: want.to_string(),
            actual: match actual {
                Validity::Valid => "valid",
                Validity::Invalid => "violated",
                Validity::Unknown => "unknown",
            }
            .into(),
            met: match want {
                Holds::Any => true,
                Holds::Valid => actual == Validity::Valid,
                Holds::Violated => actual == Validity::Invalid,
            },
            default: self.linearizable.is_none(),
        });
        // A token check that saw no token judges nothing: no default there.
        if let Some(t) = checks.token.as_ref() {
            let sent = t.valid != Validity::Unknown;
            count(
                &mut out,
                "token_regressions",
                self.token_regressions.or(sent.then_some(zero())),
                self.token_regressions.is_none(),
                t.regressions,
            );
            count(
                &mut out,
                "token_repeats",
                self.token_repeats.or(sent.then_some(zero())),
                self.token_repeats.is_none(),
                t.repeats,
            );
        }
        if findings.observed {
            let g = &findings.grant_validity;
            count(
                &mut out,
                "late_grants",
                Some(self.late_grants.unwrap_or(zero())),
                self.late_grants.is_none(),
                g.after_session_end
                    .saturating_sub(g.caught_by_client)
                    .saturating_sub(g.during_client_fault),
            );
            count(
                &mut out,
                "late_grants_caught",
                self.late_grants_caught,
                false,
                g.caught_by_client,
            );
            count(
                &mut out,
                "stuck_waits",
                self.stuck_waits,
                false,
                findings.liveness.stuck_waits,
            );
            count(
                &mut out,
                "untold_holders",
                self.untold_holders,
                false,
                findings.liveness.untold_holders,
            );
        }
        if let Some(x) = &checks.exclusion {
            count(
                &mut out,
                "exclusion_violations",
                Some(self.exclusion_violations.unwrap_or(zero())),
                self.exclusion_violations.is_none(),
                x.violations(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_and_match() {
        for (s, n, ok) in [
            (">0", 1, true),
            (">0", 0, false),
            (">=3", 3, true),
            ("any", 9, true),
        ] {
            let c = Count::try_from(CountRepr::S(s.into())).expect("count");
            assert_eq!(c.matches(n), ok, "{s} vs {n}");
        }
        assert!(Count::try_from(CountRepr::S("lots".into())).is_err());
    }

    #[test]
    fn holds_parse_from_bools_and_words() {
        for (r, h) in [
            (HoldsRepr::B(true), Holds::Valid),
            (HoldsRepr::B(false), Holds::Violated),
            (HoldsRepr::S("violated".into()), Holds::Violated),
            (HoldsRepr::S("any".into()), Holds::Any),
        ] {
            assert_eq!(Holds::try_from(r).ok(), Some(h));
        }
        assert!(Holds::try_from(HoldsRepr::S("maybe".into())).is_err());
    }

    #[test]
    fn unset_safety_checks_default_to_holding() {
        let mut checks = Checks {
            fencing: Default::default(),
            mutex: fencecheck_reports::MutexCheck {
                valid: Validity::Invalid,
                holds: 4,
                overlaps: 2,
                examples: Vec::new(),
            },
            counter: CounterCheck {
                valid: Validity::Invalid,
                acknowledged: 73,
                lost: 0,
                lost_fraction: Some(0.0),
                lower_bound: None,
                keys: vec![fencecheck_reports::KeyCount {
                    key: "k0".into(),
                    acknowledged: 73,
                    applied: 73,
                    final_value: 193,
                    lost: 0,
                    lost_fraction: Some(0.0),
                }],
            },
            linearizable: None,
            token: None,
            judged_from: None,
            exclusion: None,
        };
        let e = Expect::default();
        let j = e.judge(&checks, &Findings::default(), 0);
        let names: Vec<&str> = j.iter().map(|x| x.name.as_str()).collect();
        // No token sent, no observation: neither defaults; mutex never does.
        assert_eq!(
            names,
            ["fencing_violations", "lost_updates", "linearizable"]
        );
        let lost = &j[1];
        assert!(!lost.met && lost.default, "{lost:?}");
        assert!(lost.actual.contains("193"), "{lost:?}");
        // "any" accepts the inconsistent counter; an unknown linearizability fails
        // the default.
        let e = Expect {
            lost_updates: Some(Count::Any),
            ..Expect::default()
        };
        let j = e.judge(&checks, &Findings::default(), 0);
        assert!(j[1].met && !j[1].default);
        assert!(!j[2].met, "{:?}", j[2]);
        checks.counter.valid = Validity::Valid;
        checks.token = Some(fencecheck_reports::TokenCheck {
            valid: Validity::Invalid,
            grants: 3,
            regressions: 1,
            ..Default::default()
        });
        let j = Expect::default().judge(&checks, &Findings::default(), 0);
        let reg = j
            .iter()
            .find(|x| x.name == "token_regressions")
            .expect("token");
        assert!(!reg.met && reg.default);
    }
}
