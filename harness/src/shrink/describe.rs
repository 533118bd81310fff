//! The shrunk file's header: where it came from, how reliably it reproduces, what
//! the search cost, and one sentence saying what is left.

use std::time::Duration;

use crate::scenario::{Fault, FaultKind, Scenario, Target};

/// One expectation the original run failed (from `report.json`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Failure {
    pub name: String,
    /// As the report writes it: `"0"`, `">=1"`, `"valid"` …
    pub expected: String,
}

/// "2.5 s", "4 s", "1 ms".
pub fn secs(d: Duration) -> String {
    if d < Duration::from_millis(100) {
        return format!("{} ms", d.as_millis());
    }
    let s = format!("{:.1}", d.as_secs_f64());
    format!("{} s", s.strip_suffix(".0").unwrap_or(&s))
}

fn noun(kind: FaultKind, n: usize) -> String {
    let (one, many) = match kind {
        FaultKind::Pause => ("pause", "pauses"),
        FaultKind::RevokeLease => ("lease revocation", "lease revocations"),
        FaultKind::ExpireSession => ("session expiry", "session expiries"),
        FaultKind::Delay => ("delay", "delays"),
        FaultKind::Partition => ("partition", "partitions"),
        FaultKind::Kill => ("kill", "kills"),
        FaultKind::ClockJump => ("clock jump", "clock jumps"),
    };
    format!("{n} {}", if n == 1 { one } else { many })
}

fn whom(t: Target) -> String {
    match t {
        Target::Holder => "of the holder".into(),
        Target::RandomWorker => "of a random worker".into(),
        Target::AllWorkers => "of all workers".into(),
        Target::Worker(n) => format!("of worker {n}"),
        Target::Member(n) => format!("of member {n}"),
        Target::Leader => "of the leader".into(),
        Target::Storage => "of the storage".into(),
        Target::WorkersToService
        | Target::HolderToService
        | Target::WorkersToStorage
        | Target::EtcdMajorityMinority => format!("on {t}"),
        other => format!("of {other}"),
    }
}

/// How long or how far one occurrence goes, as the kind measures it.
fn extent(f: &Fault, ttl: Duration) -> Option<String> {
    match f {
        Fault::Delay(d) => {
            let lat = secs(d.latency.unwrap_or_default());
            let jit = d
                .latency_jitter
                .map(|j| format!(" ± {}", secs(j)))
                .unwrap_or_default();
            Some(format!(
                "{lat}{jit} for {}",
                secs(d.duration.unwrap_or_default())
            ))
        }
        Fault::Kill(k) => Some(format!(
            "down {}",
            secs(k.restart_after.unwrap_or(Duration::from_secs(3)))
        )),
        Fault::ClockJump(c) => Some(match (c.by, c.back) {
            (_, Some(b)) => format!("back {}", secs(b)),
            (by, None) => format!("by {}", secs(by.unwrap_or_default())),
        }),
        Fault::RevokeLease(_) | Fault::ExpireSession(_) => None,
        _ => Some(secs(f.window(ttl))),
    }
}

/// "2 pauses of the holder, 2.5 s, at 4 s and 8 s; 1 delay on workers->storage …".
pub fn faults_phrase(s: &Scenario) -> String {
    struct Group {
        kind: FaultKind,
        what: String,
        at: Vec<Duration>,
        every: Option<Duration>,
    }
    let ttl = s.lock.ttl;
    // Injections that differ only in when they happen are one group.
    let mut groups: Vec<Group> = Vec::new();
    for f in &s.faults {
        let what = match extent(f, ttl) {
            Some(x) => format!("{}, {x}", whom(f.target)),
            None => whom(f.target),
        };
        let same = |g: &&mut Group| {
            g.kind == f.kind && g.what == what && g.every.is_none() && f.every().is_none()
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.at.extend(f.at()),
            None => groups.push(Group {
                kind: f.kind,
                what,
                at: f.at().into_iter().collect(),
                every: f.every(),
            }),
        }
    }
    if groups.is_empty() {
        return "no fault".into();
    }
    let parts: Vec<String> = groups
        .iter_mut()
        .map(|g| match g.every {
            Some(e) => format!(
                "{} {}, every {}",
                noun(g.kind, 1).replacen("1 ", "a ", 1),
                g.what,
                secs(e)
            ),
            None => {
                g.at.sort();
                let times: Vec<String> = g.at.iter().map(|&t| secs(t)).collect();
                format!(
                    "{} {}, at {}",
                    noun(g.kind, g.at.len()),
                    g.what,
                    join(&times)
                )
            }
        })
        .collect();
    parts.join("; ")
}

fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// What the failing expectations mean, in words where the expectation asked
/// for none of something.
pub fn failure_phrase(failures: &[Failure]) -> String {
    let words: Vec<String> = failures
        .iter()
        .map(|f| {
            let none_wanted =
                f.expected == "0" || f.expected == "valid" || f.expected.starts_with("<=");
            let known = match f.name.as_str() {
                "fencing_violations" => Some("stale write accepted"),
                "lost_updates" => Some("increments lost"),
                "linearizable" => Some("history not linearizable"),
                "mutex_overlaps" => Some("overlapping holds"),
                "token_regressions" => Some("token went backwards"),
                "token_repeats" => Some("token repeated"),
                "late_grants" => Some("grant told after its session ended"),
                "stale_rejected" => Some("stale writes rejected"),
                "fresh_rejected" => Some("fresh writes rejected"),
                "keepalive_lost" => Some("keepalives lost"),
                _ => None,
            };
            match (f.name.as_str(), known) {
                ("inconclusive", _) => "inconclusive (no fault confirmed)".into(),
                ("incomplete", _) => "the run did not complete".into(),
                (_, Some(w)) if none_wanted => w.to_string(),
                (n, _) if f.expected.is_empty() => format!("{n} failed"),
                (n, _) => format!("{n} {} not met", f.expected),
            }
        })
        .collect();
    if words.is_empty() {
        "failed".into()
    } else {
        join(&words)
    }
}

/// "1 pause of the holder, 3 s, at 4 s; TTL 2 s → stale write accepted in 9 of 10 runs".
pub fn sentence(s: &Scenario, failures: &[Failure], reproduced: u32, runs: u32) -> String {
    format!(
        "{}; TTL {} → {} in {reproduced} of {runs} runs",
        faults_phrase(s),
        secs(s.lock.ttl),
        failure_phrase(failures)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(faults: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\nduration = \"20s\"\n[lock]\nttl = \"2s\"\n\
             [storage]\nfencing = \"off\"\ntoken = \"revision\"\n{faults}"
        );
        Scenario::parse(&text, "s.toml").expect("scenario")
    }

    fn stale() -> Vec<Failure> {
        vec![Failure {
            name: "fencing_violations".into(),
            expected: "0".into(),
        }]
    }

    #[test]
    fn one_pause() {
        let s = scenario("[[fault]]\nkind = \"pause\"\ntarget = \"holder\"\nat = \"4s\"\nduration = \"2300ms\"\n");
        assert_eq!(
            sentence(&s, &stale(), 9, 10),
            "1 pause of the holder, 2.3 s, at 4 s; TTL 2 s → stale write accepted in 9 of 10 runs"
        );
    }

    #[test]
    fn injections_that_differ_only_in_time_are_one_group() {
        let s = scenario(
            "[[fault]]\nkind = \"pause\"\ntarget = \"holder\"\nat = \"8s\"\nduration = \"3s\"\n\
             [[fault]]\nkind = \"pause\"\ntarget = \"holder\"\nat = \"4s\"\nduration = \"3s\"\n\
             [[fault]]\nkind = \"delay\"\ntarget = \"workers->storage\"\nat = \"1s\"\nduration = \"1s\"\nlatency = \"1ms\"\n\
             [[fault]]\nkind = \"revoke-lease\"\ntarget = \"holder\"\nevery = \"5s\"\n",
        );
        assert_eq!(
            faults_phrase(&s),
            "2 pauses of the holder, 3 s, at 4 s and 8 s; 1 delay on workers->storage, 1 ms for 1 s, at 1 s; \
             a lease revocation of the holder, every 5 s"
        );
    }

    #[test]
    fn failures_in_words() {
        let f = vec![
            Failure {
                name: "fencing_violations".into(),
                expected: "0".into(),
            },
            Failure {
                name: "stale_rejected".into(),
                expected: ">=1".into(),
            },
            Failure {
                name: "inconclusive".into(),
                expected: String::new(),
            },
        ];
        assert_eq!(
            failure_phrase(&f),
            "stale write accepted, stale_rejected >=1 not met and inconclusive (no fault confirmed)"
        );
        assert_eq!(failure_phrase(&[]), "failed");
        assert_eq!(faults_phrase(&scenario("")), "no fault");
        assert_eq!(secs(Duration::from_millis(400)), "0.4 s");
    }
}
