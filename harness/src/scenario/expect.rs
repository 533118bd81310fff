//! `[expect]`: what a run must show, as counts.

use std::fmt;

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

/// What the run must show. Unset counts are not checked, except
/// `fencing_violations`, which defaults to 0: that is what fencing promises.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_updates: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_lost: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linearizable: Option<bool>,
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
        }
    }
}

fn zero() -> Count {
    Count::Exactly(0)
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
}
