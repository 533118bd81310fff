//! Fault confirmation, from the recorded files only: each planned fault is
//! skipped (not injected, with the reason), or injected and then confirmed or
//! not — from the effect the nemesis recorded in the fault's event (a process
//! seen stopped or gone, bytes counted by the proxies, a clock read back), or,
//! for a session's end, from the harness's own observation of the service
//! (`service.jsonl`). Then the tally per fault kind, and whether a run that
//! needed a finding is inconclusive.

use fencecheck_reports::{
    EffectStatus, FaultCount, FaultEffect, FaultReason, FaultWindow, PlannedFault,
};

use crate::record::history::EFFECT_KEY as KEY;
use crate::record::observe::Observation;
use crate::scenario::FaultKind;

/// How long after a session fault's end its session's end may still be
/// observed (the observer's feed lags the service a little).
pub const SESSION_END_SLACK_NS: u64 = 5_000_000_000;

/// Fills in every window's `effect` and returns the tally per kind, in the
/// order kinds first appear in the schedule. `observations` is `service.jsonl`
/// (`None` when the run has none); `interrupted` when the run never reached
/// its end (a planned fault without an event was cut off, not left out).
pub fn confirm(
    windows: &mut [FaultWindow],
    schedule: &[PlannedFault],
    observations: Option<&[Observation]>,
    interrupted: bool,
) -> Vec<FaultCount> {
    for w in windows.iter_mut() {
        w.effect = Some(effect_of(w, observations));
    }
    let mut counts: Vec<FaultCount> = Vec::new();
    let mut planned_ids = Vec::new();
    for p in schedule {
        planned_ids.push(p.id);
        let i = slot(&mut counts, &p.kind);
        let c = &mut counts[i];
        c.planned += 1;
        if !windows.iter().any(|w| w.id == p.id) {
            c.skipped += 1;
            c.reasons.push(FaultReason {
                id: p.id,
                status: EffectStatus::Skipped,
                reason: if interrupted {
                    "not injected: the run was interrupted before its time".into()
                } else {
                    "not injected: no event of it in the record".into()
                },
            });
        }
    }
    for w in windows.iter() {
        let i = slot(&mut counts, &w.kind);
        let c = &mut counts[i];
        // A window the schedule does not list (not expected) still counts.
        if !planned_ids.contains(&w.id) {
            c.planned += 1;
        }
        let Some(e) = &w.effect else { continue };
        match e.status {
            EffectStatus::Skipped => c.skipped += 1,
            EffectStatus::Confirmed => {
                c.injected += 1;
                c.confirmed += 1;
            }
            EffectStatus::Unconfirmed => {
                c.injected += 1;
                c.unconfirmed += 1;
            }
            EffectStatus::Unchecked => {
                c.injected += 1;
                c.unconfirmed += 1;
                c.unchecked += 1;
            }
        }
        if e.status != EffectStatus::Confirmed {
            c.reasons.push(FaultReason {
                id: w.id,
                status: e.status,
                reason: e.how.clone(),
            });
        }
    }
    for c in &mut counts {
        c.reasons.sort_by_key(|r| r.id);
    }
    counts
}

/// The tally of `kind`, added when it is new.
fn slot(counts: &mut Vec<FaultCount>, kind: &str) -> usize {
    match counts.iter().position(|c| c.kind == kind) {
        Some(i) => i,
        None => {
            counts.push(FaultCount {
                kind: kind.to_string(),
                ..FaultCount::default()
            });
            counts.len() - 1
        }
    }
}

/// One window's effect: skipped when the nemesis could not do it; else what it
/// recorded; a session's end from the service's record.
fn effect_of(w: &FaultWindow, observations: Option<&[Observation]>) -> FaultEffect {
    if w.outcome == "fail" {
        return FaultEffect::skipped(
            w.error
                .clone()
                .unwrap_or_else(|| "the nemesis could not do it".into()),
        );
    }
    let kind: Option<FaultKind> = w.kind.parse().ok();
    if matches!(
        kind,
        Some(FaultKind::ExpireSession | FaultKind::RevokeLease)
    ) {
        return session_end(w, observations);
    }
    if let Some(e) = w
        .detail
        .get(KEY)
        .and_then(|v| serde_json::from_value::<FaultEffect>(v.clone()).ok())
    {
        return e;
    }
    FaultEffect::unchecked("not recorded: the run predates fault confirmation")
}

/// The sessions a session fault ended: its target's workers' sessions.
fn sessions(w: &FaultWindow) -> Vec<i64> {
    w.detail
        .get("target")
        .and_then(|t| t.get("workers"))
        .and_then(serde_json::Value::as_array)
        .map(|ws| {
            ws.iter()
                .filter_map(|v| v.get("lease").and_then(serde_json::Value::as_i64))
                .collect()
        })
        .unwrap_or_default()
}

/// Confirmed when the service was seen ending every session the fault aimed
/// at, from the fault's start to a little after its end.
fn session_end(w: &FaultWindow, observations: Option<&[Observation]>) -> FaultEffect {
    let Some(obs) = observations else {
        return FaultEffect::unchecked("the service was not observed (no service.jsonl)");
    };
    let wanted = sessions(w);
    if wanted.is_empty() {
        return FaultEffect::unconfirmed("the fault named no session to end");
    }
    let until = w
        .end_ns
        .map_or(u64::MAX, |e| e.saturating_add(SESSION_END_SLACK_NS));
    let mut seen = Vec::new();
    for &s in &wanted {
        let end = obs.iter().find_map(|o| match o {
            Observation::SessionEnded {
                time_ns, session, ..
            } if *session == s && *time_ns >= w.start_ns && *time_ns <= until => Some(*time_ns),
            _ => None,
        });
        match end {
            Some(t) => seen.push(format!(
                "session {s:x}'s end observed at the service {} ms after the fault",
                t.saturating_sub(w.start_ns) / 1_000_000
            )),
            None => {
                let gap = obs.iter().any(|o| {
                    matches!(o, Observation::Gap { time_ns, .. }
                        if *time_ns >= w.start_ns && *time_ns <= until)
                });
                let why = format!(
                    "no end of session {s:x} observed at the service within {} s of the fault",
                    SESSION_END_SLACK_NS / 1_000_000_000
                );
                return if gap {
                    FaultEffect::unchecked(format!(
                        "{why}, and the observer lost its feed meanwhile"
                    ))
                } else {
                    FaultEffect::unconfirmed(why)
                };
            }
        }
    }
    FaultEffect::confirmed(seen.join("; "))
}

/// Totals over every kind: (planned, injected, confirmed, unchecked).
pub fn totals(counts: &[FaultCount]) -> (u64, u64, u64, u64) {
    counts.iter().fold((0, 0, 0, 0), |t, c| {
        (
            t.0 + c.planned,
            t.1 + c.injected,
            t.2 + c.confirmed,
            t.3 + c.unchecked,
        )
    })
}

/// Why a run that needs a finding (`needs`: the expectations that ask for
/// one) is inconclusive, if it is: faults were planned and none was confirmed
/// — none injected, or every one injected looked for and not seen. A fault
/// that could not be looked at (unchecked) leaves the run to its expectations.
pub fn inconclusive(needs: &[String], counts: &[FaultCount]) -> Option<String> {
    let (planned, injected, confirmed, unchecked) = totals(counts);
    if needs.is_empty() || planned == 0 || confirmed > 0 || unchecked > 0 {
        return None;
    }
    let first = counts
        .iter()
        .flat_map(|c| c.reasons.iter())
        .min_by_key(|r| r.id)
        .map(|r| format!(": fault {}: {}", r.id, r.reason))
        .unwrap_or_default();
    let what = if injected == 0 {
        format!("no fault was injected ({planned} planned, all skipped{first})")
    } else {
        format!("no fault took effect ({injected} injected, 0 confirmed{first})")
    };
    Some(format!(
        "{what}; the run needs a finding ({}), so it cannot pass",
        needs.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(id: u32, kind: &str) -> PlannedFault {
        PlannedFault {
            id,
            kind: kind.into(),
            target: "holder".into(),
            at_ms: u64::from(id) * 1000,
            duration_ms: 500,
            aim: None,
        }
    }

    fn window(id: u32, kind: &str, outcome: &str, detail: serde_json::Value) -> FaultWindow {
        FaultWindow {
            id,
            kind: kind.into(),
            target: "holder".into(),
            start_ns: u64::from(id) * 1_000_000_000,
            end_ns: Some(u64::from(id) * 1_000_000_000 + 500_000_000),
            outcome: outcome.into(),
            detail,
            error: (outcome == "fail").then(|| "no worker held a lock within 2s".into()),
            effect: None,
        }
    }

    fn with_effect(e: FaultEffect) -> serde_json::Value {
        let mut d = Some(serde_json::json!({ "action": "pause" }));
        crate::record::history::record_effect(&mut d, &e);
        d.unwrap_or_default()
    }

    fn needs() -> Vec<String> {
        vec!["stale_rejected >=1".to_string()]
    }

    #[test]
    fn tallies_planned_injected_confirmed_skipped_per_kind() {
        let schedule = vec![
            planned(1, "pause"),
            planned(2, "pause"),
            planned(3, "revoke-lease"),
            planned(4, "pause"),
            planned(5, "partition"),
        ];
        let lease = 0x1a2b_i64;
        let mut windows = vec![
            window(
                1,
                "pause",
                "ok",
                with_effect(FaultEffect::confirmed("pid 9 seen stopped")),
            ),
            window(2, "pause", "fail", serde_json::json!({})),
            window(
                3,
                "revoke-lease",
                "ok",
                serde_json::json!({"target": {"workers": [{"worker": 1, "pid": 9, "lease": lease}]}}),
            ),
            window(
                5,
                "partition",
                "ok",
                with_effect(FaultEffect::unconfirmed("no traffic crossed the link")),
            ),
        ];
        let obs = vec![Observation::SessionEnded {
            time_ns: 3_000_000_000 + 20_000_000,
            session: lease,
            worker: Some(1),
        }];
        let counts = confirm(&mut windows, &schedule, Some(&obs), false);
        let by = |k: &str| {
            counts
                .iter()
                .find(|c| c.kind == k)
                .cloned()
                .unwrap_or_default()
        };
        let p = by("pause");
        assert_eq!(
            (p.planned, p.injected, p.confirmed, p.skipped, p.unconfirmed),
            (3, 1, 1, 2, 0)
        );
        assert_eq!(p.reasons.len(), 2);
        assert_eq!(p.reasons[0].reason, "no worker held a lock within 2s");
        assert!(p.reasons[1].reason.contains("no event"), "{:?}", p.reasons);
        let r = by("revoke-lease");
        assert_eq!((r.planned, r.injected, r.confirmed), (1, 1, 1));
        assert_eq!(
            windows[2].effect.as_ref().map(|e| e.status),
            Some(EffectStatus::Confirmed)
        );
        let x = by("partition");
        assert_eq!((x.injected, x.confirmed, x.unconfirmed), (1, 0, 1));
        // planned = injected + skipped, unconfirmed = injected - confirmed.
        for c in &counts {
            assert_eq!(c.planned, c.injected + c.skipped, "{c:?}");
            assert_eq!(c.unconfirmed, c.injected - c.confirmed, "{c:?}");
        }
        assert_eq!(inconclusive(&needs(), &counts), None);
    }

    #[test]
    fn a_session_end_not_observed_is_unconfirmed_and_no_record_is_unchecked() {
        let schedule = vec![planned(1, "expire-session")];
        let d = serde_json::json!({"target": {"workers": [{"worker": 0, "pid": 5, "lease": 77}]}});
        let mut windows = vec![window(1, "expire-session", "ok", d.clone())];
        // Another session's end, and this one's long after the window.
        let obs = vec![
            Observation::SessionEnded {
                time_ns: 1_100_000_000,
                session: 78,
                worker: None,
            },
            Observation::SessionEnded {
                time_ns: 60_000_000_000,
                session: 77,
                worker: None,
            },
        ];
        let counts = confirm(&mut windows, &schedule, Some(&obs), false);
        assert_eq!((counts[0].injected, counts[0].confirmed), (1, 0));
        assert!(inconclusive(&needs(), &counts).is_some());
        let mut windows = vec![window(1, "expire-session", "ok", d)];
        let counts = confirm(&mut windows, &schedule, None, false);
        assert_eq!(counts[0].unchecked, 1);
        assert_eq!(inconclusive(&needs(), &counts), None);
    }

    #[test]
    fn inconclusive_only_when_a_finding_is_needed_and_nothing_took_effect() {
        let schedule = vec![planned(1, "pause"), planned(2, "pause")];
        let gone = FaultEffect::unconfirmed("pid 9 had exited (a zombie, state Z)");
        let mut windows = vec![
            window(1, "pause", "ok", with_effect(gone.clone())),
            window(2, "pause", "ok", with_effect(gone)),
        ];
        let counts = confirm(&mut windows, &schedule, None, false);
        let why = inconclusive(&needs(), &counts).unwrap_or_default();
        assert!(
            why.starts_with("no fault took effect (2 injected, 0 confirmed: fault 1: pid 9"),
            "{why}"
        );
        assert!(why.contains("stale_rejected >=1"), "{why}");
        // Nothing needed: a run with no finding to show may pass without one.
        assert_eq!(inconclusive(&[], &counts), None);
        // Nothing planned: nothing to confirm.
        assert_eq!(inconclusive(&needs(), &[]), None);
        // One confirmed is enough.
        windows[1].detail = with_effect(FaultEffect::confirmed("pid 9 seen stopped"));
        let counts = confirm(&mut windows, &schedule, None, false);
        assert_eq!(inconclusive(&needs(), &counts), None);
        // None injected at all (the run ended first): inconclusive too.
        let counts = confirm(&mut [], &schedule, None, false);
        assert_eq!((counts[0].planned, counts[0].skipped), (2, 2));
        let why = inconclusive(&needs(), &counts).unwrap_or_default();
        assert!(
            why.starts_with("no fault was injected (2 planned, all skipped"),
            "{why}"
        );
        // A legacy record (no effect recorded) is unchecked: left to the expectations.
        let mut windows = vec![window(1, "pause", "ok", serde_json::json!({}))];
        let counts = confirm(&mut windows, &schedule[..1], None, false);
        assert_eq!(counts[0].unchecked, 1);
        assert_eq!(inconclusive(&needs(), &counts), None);
    }
}
