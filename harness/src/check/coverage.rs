//! Coverage: what a run did not test that a PASS would claim. A run passes only
//! when every acquisition a client reported is matched to a grant the harness
//! observed the service make, every planned fault was injected and confirmed
//! (unless `[expect] faults_skipped` / `faults_unconfirmed` allow otherwise),
//! and every lock client kept to the protocol. Each gap is one sentence; a run
//! with one is INCONCLUSIVE unless it failed on its own (`assess`).

use fencecheck_reports::{ExclusionCheck, FaultCount};

use crate::scenario::{Count, Expect};

/// The gaps of the lock's observation and of the faults, in order.
pub fn gaps(
    expect: &Expect,
    exclusion: Option<&ExclusionCheck>,
    acquisitions: u64,
    faults: &[FaultCount],
) -> Vec<String> {
    let mut out = Vec::new();
    match exclusion {
        Some(x) if x.unobserved > 0 => out.push(unobserved(x)),
        None if acquisitions > 0 => out.push(format!(
            "the service was not observed (no service.jsonl): none of the {acquisitions} \
             acquisitions could be matched to a grant it made"
        )),
        _ => {}
    }
    out.extend(fault_gap(
        faults,
        expect.faults_skipped,
        "faults_skipped",
        |c| c.skipped,
        |s| s == fencecheck_reports::EffectStatus::Skipped,
        "not injected",
    ));
    out.extend(fault_gap(
        faults,
        expect.faults_unconfirmed,
        "faults_unconfirmed",
        |c| c.unconfirmed - c.unchecked.min(c.unconfirmed),
        |s| s == fencecheck_reports::EffectStatus::Unconfirmed,
        "injected but not confirmed",
    ));
    out
}

fn unobserved(x: &ExclusionCheck) -> String {
    let names: Vec<String> = x
        .unobserved_entries
        .iter()
        .take(3)
        .map(|e| format!("`{e}`"))
        .collect();
    let more = x.unobserved_entries.len().saturating_sub(names.len());
    let (whose, verb) = if x.unobserved_entries.len() == 1 {
        ("the holder's key", "was")
    } else {
        ("the holders' keys", "were")
    };
    format!(
        "{} of {} acquisitions match no grant the harness observed: {whose} {}{} {verb} \
         never observed at the service (or only while its feed was lost), so nothing \
         was judged by the service's order",
        x.unobserved,
        x.acquisitions,
        names.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
    )
}

/// One sentence when the faults counted by `count` exceed what `[expect] name`
/// allows (unset: none), naming the first few and why.
fn fault_gap(
    faults: &[FaultCount],
    allowed: Option<Count>,
    name: &str,
    count: impl Fn(&FaultCount) -> u64,
    status: impl Fn(fencecheck_reports::EffectStatus) -> bool,
    what: &str,
) -> Option<String> {
    let n: u64 = faults.iter().map(&count).sum();
    let planned: u64 = faults.iter().map(|c| c.planned).sum();
    if allowed.unwrap_or(Count::Exactly(0)).matches(n) {
        return None;
    }
    let mut reasons: Vec<(u32, String)> = faults
        .iter()
        .flat_map(|c| {
            c.reasons
                .iter()
                .filter(|r| status(r.status))
                .map(move |r| (r.id, format!("fault {} ({}): {}", r.id, c.kind, r.reason)))
        })
        .collect();
    reasons.sort_by_key(|r| r.0);
    let listed: Vec<String> = reasons.into_iter().take(3).map(|r| r.1).collect();
    Some(format!(
        "{n} of {planned} planned faults {what} ({}); the run did not test what it \
         planned (`[expect] {name}` allows it)",
        listed.join("; ")
    ))
}

/// An adapter's last words in its log (`worker-<id>.client.log`): the last
/// line that reads as an error (a Python traceback's last line, an `… failed:`
/// line of fencecheck's Python adapters), else the last line; with its line
/// number (1-based).
pub fn last_words(log: &str) -> Option<(usize, String)> {
    const ERRORISH: [&str; 6] = [
        "error",
        "exception",
        "traceback",
        "failed",
        "fatal",
        "panic",
    ];
    let lines: Vec<(usize, &str)> = log
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end()))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let errorish = |l: &str| {
        let l = l.to_ascii_lowercase();
        ERRORISH.iter().any(|w| l.contains(w))
    };
    lines
        .iter()
        .rev()
        .find(|(_, l)| errorish(l))
        .or(lines.last())
        .map(|&(n, l)| (n, truncate(l)))
}

fn truncate(l: &str) -> String {
    const MAX: usize = 300;
    if l.chars().count() <= MAX {
        l.to_string()
    } else {
        format!("{}…", l.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencecheck_reports::{EffectStatus, FaultReason};

    fn skipped(n: u64) -> Vec<FaultCount> {
        vec![FaultCount {
            kind: "pause".into(),
            planned: 3,
            injected: 3 - n,
            confirmed: 3 - n,
            skipped: n,
            reasons: (1..=n as u32)
                .map(|id| FaultReason {
                    id,
                    status: EffectStatus::Skipped,
                    reason: "no worker held a lock within 2s".into(),
                })
                .collect(),
            ..FaultCount::default()
        }]
    }

    #[test]
    fn a_skipped_fault_is_a_gap_unless_expect_allows_it() {
        let e = Expect::default();
        let g = gaps(&e, None, 0, &skipped(2));
        assert_eq!(g.len(), 1, "{g:?}");
        assert!(
            g[0].starts_with("2 of 3 planned faults not injected (fault 1 (pause): no worker held"),
            "{g:?}"
        );
        let allow = Expect {
            faults_skipped: Some(Count::AtMost(2)),
            ..Expect::default()
        };
        assert!(gaps(&allow, None, 0, &skipped(2)).is_empty());
        assert!(gaps(&e, None, 0, &skipped(0)).is_empty());
    }

    #[test]
    fn an_unobserved_lock_names_its_key() {
        let x = ExclusionCheck {
            acquisitions: 74,
            unobserved: 74,
            unobserved_entries: vec!["lock:k0".into()],
            ..ExclusionCheck::default()
        };
        let g = gaps(&Expect::default(), Some(&x), 74, &[]);
        assert!(
            g[0].contains("the holder's key `lock:k0` was never observed at the service"),
            "{g:?}"
        );
        let g = gaps(&Expect::default(), None, 5, &[]);
        assert!(g[0].contains("not observed"), "{g:?}");
        assert!(gaps(&Expect::default(), None, 0, &[]).is_empty());
    }

    #[test]
    fn last_words_are_the_last_error_line() {
        let log = "python-etcd3 adapter: open: client for 127.0.0.1:2379\n\
                   Traceback (most recent call last):\n  File \"x.py\", line 3\n\
                   ModuleNotFoundError: No module named 'etcd3'\n\n";
        assert_eq!(
            last_words(log),
            Some((4, "ModuleNotFoundError: No module named 'etcd3'".into()))
        );
        assert_eq!(last_words("a\nb\n"), Some((2, "b".into())));
        assert_eq!(last_words("\n \n"), None);
    }
}
