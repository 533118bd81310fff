//! The seeded fault schedule: computed up front from the scenario and the seed
//! alone, so the same seed always gives the same schedule (recorded in the report).

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::{AimEvent, FaultKind, Scenario, Target};

/// An aimed fault's trigger: fires `offset` after the first `event` seen once it
/// is armed (at its planned time `at`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AimAt {
    pub event: AimEvent,
    pub offset: Duration,
}

impl std::fmt::Display for AimAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.offset.is_zero() {
            write!(f, "{}", self.event)
        } else {
            write!(
                f,
                "{} +{}",
                self.event,
                humantime::format_duration(self.offset)
            )
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub id: u32,
    /// Index of the `[[fault]]` table it comes from.
    pub spec: usize,
    pub kind: FaultKind,
    pub target: Target,
    /// Offset from the start of the run; for an aimed fault, when it is armed.
    pub at: Duration,
    /// Fire on an event instead of at `at`.
    pub aim: Option<AimAt>,
    /// How long it lasts (for a kill: until the restart).
    pub duration: Duration,
    /// delay only.
    pub latency: Duration,
    pub latency_jitter: Duration,
    /// clock-jump only: how far the clock steps forward.
    pub by: Duration,
    /// clock-jump of an elector only: how far it steps backward (instead).
    pub back: Duration,
    /// pause only: ends on the next grant to another worker (`until =
    /// "next-grant"`), `duration` at the latest.
    pub until_next_grant: bool,
}

/// Faults must end before the run does, so every paused process wakes and acts
/// while the run still records.
pub fn plan(scenario: &Scenario, seed: u64) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for (spec, f) in scenario.faults.iter().enumerate() {
        let duration = f.window(scenario.lock.ttl);
        let mut times = times(f, scenario, &mut rng, duration);
        if f.aim().is_on() {
            times = aimed_arms(f, times);
        }
        out.extend(times.into_iter().map(|at| (spec, at, duration)));
    }
    out.sort_by_key(|&(spec, at, _)| (at, spec));
    // Each injection's place among its own table's (an aim may vary with it).
    let mut nth = vec![0usize; scenario.faults.len()];
    out.into_iter()
        .enumerate()
        .map(|(i, (spec, at, duration))| {
            let f = &scenario.faults[spec];
            let n = nth[spec];
            nth[spec] += 1;
            let (latency, latency_jitter) = f.latency();
            Planned {
                id: i as u32 + 1,
                spec,
                kind: f.kind,
                target: f.target,
                at,
                aim: f.aim_event(n).map(|event| AimAt {
                    event,
                    offset: f.offset().unwrap_or_default(),
                }),
                duration,
                latency: latency.unwrap_or_default(),
                latency_jitter: latency_jitter.unwrap_or_default(),
                by: f.by().unwrap_or_default(),
                back: f.back().unwrap_or_default(),
                until_next_grant: f.until().is_some(),
            }
        })
        .collect()
}

/// When a fault is injected: at `at`, or every `every` (random gaps with
/// `jitter`), each one that still ends before the run does. A fault of one
/// table never overlaps the one before it.
fn times(
    f: &crate::scenario::Fault,
    s: &Scenario,
    rng: &mut ChaCha8Rng,
    window: Duration,
) -> Vec<Duration> {
    let fits = |at: Duration| at + window < s.duration;
    if let Some(at) = f.at() {
        return if fits(at) { vec![at] } else { Vec::new() };
    }
    let Some(every) = f.every() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut t = Duration::ZERO;
    let mut prev_end = Duration::ZERO;
    loop {
        let gap = if f.jitter() {
            Duration::from_nanos(rng.gen_range(0..(2 * every.as_nanos() as u64).max(1)))
        } else {
            every
        };
        t = (t + gap).max(prev_end);
        if !fits(t) {
            break;
        }
        out.push(t);
        prev_end = t + window;
    }
    out
}

/// When an aimed fault's injections are armed: the times it would have been
/// injected at (from the start when it has neither `at` nor `every`), as many
/// as `count` asks — past the last of them, armed at the last one (the
/// nemesis arms each after the one before has ended).
fn aimed_arms(f: &crate::scenario::Fault, mut times: Vec<Duration>) -> Vec<Duration> {
    if f.at().is_none() && f.every().is_none() {
        times.push(Duration::ZERO);
    }
    // None fits in the run: `count` adds none either.
    if times.is_empty() {
        return times;
    }
    let count = f.count().map_or(times.len(), |c| c as usize);
    let last = times.last().copied().unwrap_or_default();
    (0..count)
        .map(|i| times.get(i).copied().unwrap_or(last))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(faults: &str) -> Scenario {
        let text = format!("name = \"s\"\nduration = \"30s\"\n{faults}");
        Scenario::parse(&text, "s.toml").expect("scenario")
    }

    #[test]
    fn every_without_jitter_is_periodic_and_fits_the_run() {
        let s = scenario("[[fault]]\nkind = \"pause\"\nevery = \"5s\"\nduration = \"3s\"\n");
        let p = plan(&s, 1);
        let at: Vec<u64> = p.iter().map(|p| p.at.as_secs()).collect();
        assert_eq!(at, vec![5, 10, 15, 20, 25]);
        assert!(p.iter().all(|p| p.at + p.duration < s.duration));
    }

    #[test]
    fn same_seed_same_schedule_different_seed_differs() {
        let s = scenario(
            "[[fault]]\nkind = \"pause\"\nevery = \"2s\"\njitter = true\nduration = \"1s\"\n\
             [[fault]]\nkind = \"revoke-lease\"\nevery = \"3s\"\njitter = true\n",
        );
        assert_eq!(plan(&s, 42), plan(&s, 42));
        assert_ne!(plan(&s, 42), plan(&s, 43));
        let p = plan(&s, 42);
        // Same-table pauses never overlap.
        let pauses: Vec<_> = p.iter().filter(|p| p.kind == FaultKind::Pause).collect();
        for w in pauses.windows(2) {
            assert!(w[1].at >= w[0].at + w[0].duration, "{w:?}");
        }
        let ids: Vec<u32> = p.iter().map(|p| p.id).collect();
        assert_eq!(ids, (1..=p.len() as u32).collect::<Vec<_>>());
    }

    #[test]
    fn aimed_faults_are_armed_at_their_planned_times_as_many_as_count_says() {
        let s = scenario(
            "[[fault]]\nkind = \"pause\"\nevery = \"5s\"\nduration = \"3s\"\naim = true\n\
             [[fault]]\nkind = \"revoke-lease\"\nat = \"4s\"\naim = \"grant\"\noffset = \"20ms\"\ncount = 3\n",
        );
        let p = plan(&s, 1);
        let pauses: Vec<_> = p.iter().filter(|p| p.kind == FaultKind::Pause).collect();
        // Armed at 5, 10, 15, 20, 25 (every 5 s in 30 s); a worker pause aims
        // between a read and its write.
        let at: Vec<u64> = pauses.iter().map(|p| p.at.as_secs()).collect();
        assert_eq!(at, vec![5, 10, 15, 20, 25]);
        assert!(pauses.iter().all(|p| p.aim
            == Some(AimAt {
                event: AimEvent::Read,
                offset: Duration::ZERO
            })));
        let revokes: Vec<_> = p
            .iter()
            .filter(|p| p.kind == FaultKind::RevokeLease)
            .collect();
        assert_eq!(revokes.len(), 3);
        assert!(revokes.iter().all(|p| p.at == Duration::from_secs(4)));
        assert_eq!(
            revokes[0].aim,
            Some(AimAt {
                event: AimEvent::Grant,
                offset: Duration::from_millis(20)
            })
        );
    }

    #[test]
    fn aim_count_caps_the_injections_and_time_based_faults_carry_no_aim() {
        let mut s = scenario(
            "[[fault]]\nkind = \"pause\"\nevery = \"5s\"\nduration = \"3s\"\n\
             [[fault]]\nkind = \"kill\"\ntarget = \"leader\"\nevery = \"10s\"\n",
        );
        assert!(plan(&s, 1).iter().all(|p| p.aim.is_none()));
        for f in &mut s.faults {
            f.fault.aim_at(crate::scenario::Aim::MostDamaging);
            f.fault.cap_count(1);
        }
        let p = plan(&s, 1);
        assert_eq!(p.len(), 2, "{p:?}");
        let kill = p.iter().find(|p| p.kind == FaultKind::Kill).expect("kill");
        assert_eq!(kill.aim.map(|a| a.event), Some(AimEvent::Grant));
    }

    #[test]
    fn an_aimed_session_fault_alternates_between_the_read_and_the_write_in_flight() {
        let s = scenario("[[fault]]\nkind = \"revoke-lease\"\nevery = \"1s\"\naim = true\n");
        let events: Vec<AimEvent> = plan(&s, 1)
            .iter()
            .filter_map(|p| p.aim.map(|a| a.event))
            .take(4)
            .collect();
        assert_eq!(
            events,
            [
                AimEvent::Read,
                AimEvent::Write,
                AimEvent::Read,
                AimEvent::Write
            ]
        );
    }

    #[test]
    fn at_is_single() {
        let s = scenario("[[fault]]\nkind = \"revoke-lease\"\nat = \"4s\"\n");
        let p = plan(&s, 0);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].at, Duration::from_secs(4));
    }
}
