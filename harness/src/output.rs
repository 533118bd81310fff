//! What the terminal shows at the end of a run or a check: a short verdict table
//! and where the report is.

use std::fmt::Write;
use std::path::Path;

use fencecheck_reports::Report;

/// The verdict line's reason for a failed run: which problem, or which
/// expectations (stated or defaulted) were not met.
fn failure(r: &Report) -> String {
    if r.problems.iter().any(|p| p.contains(": client error: ")) {
        return "a lock client broke the protocol (see the notes)".into();
    }
    if r.problems
        .iter()
        .any(|p| p.starts_with("storage not empty before the run"))
    {
        return "the storage held data before the run (see the notes)".into();
    }
    let unmet: Vec<String> = r
        .expectations
        .iter()
        .filter(|e| !e.met)
        .map(|e| {
            if e.default {
                format!("{} (default {})", e.name, e.expected)
            } else {
                e.name.clone()
            }
        })
        .collect();
    if unmet.is_empty() {
        return "nothing was tested (see the notes)".into();
    }
    format!("not met: {}", unmet.join(", "))
}

/// Why a fencing count with unjudged writes is a lower bound.
const UNJUDGED: &str = "writes unjudged: a write whose answer was unknown, or that named \
    no grant the harness observed, is not judged, so stale accepted counts only the judged ones";

/// The confirmation line: per fault kind, planned / injected / confirmed /
/// skipped (`faults: pause 3 planned, 3 injected, 3 confirmed, 0 skipped`),
/// the unconfirmed among the injected named when there are any.
pub fn fault_line(r: &Report) -> Option<String> {
    if r.fault_counts.is_empty() {
        return None;
    }
    let kinds: Vec<String> = r
        .fault_counts
        .iter()
        .map(|c| {
            format!(
                "{} {} planned, {} injected, {} confirmed{}, {} skipped",
                c.kind,
                c.planned,
                c.injected,
                c.confirmed,
                if c.unconfirmed > 0 {
                    format!(" ({} unconfirmed)", c.unconfirmed)
                } else {
                    String::new()
                },
                c.skipped
            )
        })
        .collect();
    Some(format!("faults: {}", kinds.join("; ")))
}

/// The fencing row's counts, with its unjudged writes: a stale-accepted count
/// that left writes unjudged is only a lower bound, and says so.
pub fn fencing_counts(r: &Report) -> String {
    let f = &r.checks.fencing;
    let lb = f.lower_bound.is_some() || f.unjudged > 0;
    let mut t = format!(
        "{} writes: {} stale accepted, {} stale rejected, {} fresh rejected",
        f.writes,
        floor(f.stale_accepted, lb),
        f.stale_rejected,
        f.fresh_rejected
    );
    if f.unjudged > 0 {
        t += &format!(", {} writes unjudged", f.unjudged);
    }
    match (f.lower_bound.is_some(), f.unjudged > 0) {
        (true, _) => t += " (lower bound: HTTP storage)",
        (false, true) => t += " (lower bound)",
        _ => {}
    }
    t
}

/// The exclusion row's counts.
pub fn exclusion_counts(x: &fencecheck_reports::ExclusionCheck) -> String {
    let mut t = format!(
        "{} of {} acquisitions never granted by the service (phantom grants), {} overlaps \
         with both sessions alive; {} matched to an observed grant",
        x.phantom, x.acquisitions, x.unexplained_overlaps, x.matched
    );
    if x.unobserved > 0 {
        t += &format!(", {} unjudged (never observed)", x.unobserved);
    }
    if x.overlaps_unjudged > 0 {
        t += &format!(", {} overlaps unjudged (no session)", x.overlaps_unjudged);
    }
    t
}

/// The token row's counts, with the grants the harness never saw made.
pub fn token_counts(t: &fencecheck_reports::TokenCheck) -> String {
    let mut s = format!(
        "{} grants: {} tokens went backwards, {} repeated",
        t.grants, t.regressions, t.repeats
    );
    if t.unverified > 0 {
        s += &format!(
            ", {} unverified (never observed at the service: their order is the client's word)",
            t.unverified
        );
    }
    if t.valid == fencecheck_reports::Validity::Unknown {
        s += if t.grants == 0 {
            " (no grant in the service's order to judge a token by)"
        } else {
            " (no token sent)"
        };
    }
    s
}

/// A count with its lower-bound mark: "≥ 3".
fn floor(n: u64, lower: bool) -> String {
    if lower {
        format!("≥ {n}")
    } else {
        n.to_string()
    }
}

pub fn verdict_table(r: &Report, run_dir: &Path) -> String {
    let mut s = String::new();
    verdict_lines(&mut s, r);
    check_rows(&mut s, r);
    finding_rows(&mut s, r);
    lower_bound_notes(&mut s, r);
    expectation_rows(&mut s, r);
    run_lines(&mut s, r);
    let _ = writeln!(
        s,
        "report: {}",
        run_dir.join(crate::record::rundir::REPORT_HTML).display()
    );
    s
}

/// The verdict line, then what the run did not test.
fn verdict_lines(s: &mut String, r: &Report) {
    let verdict = if r.incomplete.is_some() {
        "INCOMPLETE: the run never reached its end (no heal phase, no final reads)".to_string()
    } else if let Some(why) = &r.inconclusive {
        format!("INCONCLUSIVE: {why}")
    } else if r.passed {
        "PASS: every expectation met".to_string()
    } else {
        format!("FAIL: {}", failure(r))
    };
    let _ = writeln!(s, "\n{} — {verdict}", r.run.scenario);
    if let Some(why) = &r.incomplete {
        let _ = writeln!(s, "  {why}");
    }
    // Coverage gaps of a run that failed anyway: the verdict line has them
    // when it is INCONCLUSIVE.
    if r.inconclusive.is_none() {
        for gap in &r.coverage {
            let _ = writeln!(s, "  not tested: {gap}");
        }
    }
}

/// One row per check of the recorded history.
fn check_rows(s: &mut String, r: &Report) {
    let c = &r.checks;
    let _ = writeln!(s, "  {:<13} {:<8} counts", "check", "verdict");
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {}",
        "fencing",
        c.fencing.valid.to_string(),
        fencing_counts(r)
    );
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {} overlapping holds in {} holds (informational: a lease lock is not a mutex)",
        "mutex",
        c.mutex.valid.to_string(),
        c.mutex.overlaps,
        c.mutex.holds
    );
    if let Some(x) = &c.exclusion {
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {}",
            "exclusion",
            x.valid.to_string(),
            exclusion_counts(x)
        );
    }
    counter_row(s, r);
    if let Some(l) = &c.linearizable {
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} operations, model {}, {:.0} ms",
            "linearizable",
            l.valid.to_string(),
            l.operations,
            l.model,
            l.elapsed_ms
        );
    }
    if let Some(t) = &c.token {
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {}",
            "token",
            t.valid.to_string(),
            token_counts(t)
        );
    }
}

/// The counter row: lost increments, with why a count is only a lower bound.
fn counter_row(s: &mut String, r: &Report) {
    let c = &r.checks;
    let counter_lb = c.counter.lower_bound.as_deref();
    let inconsistent = r
        .expectations
        .iter()
        .find(|e| e.name == "lost_updates")
        .and_then(|e| e.actual.split_once("(counter inconsistent: "))
        .map(|(_, why)| format!(" — inconsistent: {}", why.trim_end_matches(')')));
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {} acknowledged increments, {} lost{}{}{}",
        "counter",
        c.counter.valid.to_string(),
        c.counter.acknowledged,
        floor(c.counter.lost, counter_lb.is_some()),
        match c.counter.lost_fraction {
            Some(f) if f > 0.0 => format!(" ({:.1}% of the acknowledged)", f * 100.0),
            _ => String::new(),
        },
        inconsistent.unwrap_or_default(),
        if counter_lb.is_some() {
            " (lower bound: HTTP storage)"
        } else {
            ""
        }
    );
}

/// The findings from the service's own record (when it was observed).
fn finding_rows(s: &mut String, r: &Report) {
    let f = &r.findings;
    if f.observed {
        let g = &f.grant_validity;
        let u = &f.unsafe_window;
        let used = g
            .after_session_end
            .saturating_sub(g.caught_by_client)
            .saturating_sub(g.during_client_fault);
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} of {} grants told after the session had ended ({} caught by the client{})",
            "grant-valid",
            fencecheck_reports::Validity::from_bool(used == 0).to_string(),
            g.after_session_end,
            g.grants,
            g.caught_by_client,
            if g.during_client_fault > 0 {
                format!(
                    ", {} told while a fault froze or cut off the client",
                    g.during_client_fault
                )
            } else {
                String::new()
            }
        );
        let lb = u.lower_bound.is_some();
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} holds unsafe ({} outlived their session, {} granted on an ended one): \
             {} writes refused, {} accepted, {} reads; window p50 {}{:.0} ms, max {}{:.0} ms{}",
            "unsafe-window",
            "finding",
            u.holds,
            u.holds - u.granted_dead.min(u.holds),
            u.granted_dead,
            floor(u.writes_refused, lb),
            floor(u.writes_accepted, lb),
            floor(u.reads, lb),
            if lb { "≥ " } else { "" },
            u.p50_ms,
            if lb { "≥ " } else { "" },
            u.max_ms,
            if lb { " (lower bound: HTTP storage)" } else { "" }
        );
        if u.holds > 0 {
            let p = &u.post_loss;
            let n = p.told + p.untold;
            let (br, ba) = (
                floor(p.before.writes_refused, lb),
                floor(p.before.writes_accepted, lb),
            );
            let text = if p.told == 0 {
                format!(
                    "0 of {n} unsafe holders said they had lost the lock before letting go: \
                     every write of the windows came before they knew ({br} refused, {ba} accepted)"
                )
            } else {
                format!(
                    "{} of {n} unsafe holders said they had lost the lock before letting go, p50 \
                     {:.0} ms (max {:.0} ms) after it went; before they knew: {br} writes \
                     refused, {ba} accepted; after: {} refused, {} accepted",
                    p.told,
                    p.believed_p50_ms,
                    p.believed_max_ms,
                    floor(p.after.writes_refused, lb),
                    floor(p.after.writes_accepted, lb),
                )
            };
            let _ = writeln!(s, "  {:<13} {:<8} {text}", "post-loss", "finding");
        }
    }
    if f.observed {
        let l = &f.liveness;
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} waits left waiting ≥ {} s while the lock was free at the service",
            "liveness",
            "finding",
            l.stuck_waits,
            l.threshold_ms / 1000
        );
    }
}

/// The one-line reason for every count marked as a lower bound.
fn lower_bound_notes(s: &mut String, r: &Report) {
    let (c, f) = (&r.checks, &r.findings);
    let fence_lb = c.fencing.lower_bound.as_deref();
    let mut reasons: Vec<&str> = Vec::new();
    for why in [
        fence_lb.or((c.fencing.unjudged > 0).then_some(UNJUDGED)),
        c.counter.lower_bound.as_deref(),
        f.unsafe_window.lower_bound.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        if !reasons.contains(&why) {
            reasons.push(why);
        }
    }
    for why in reasons {
        let _ = writeln!(s, "  ≥ lower bound — {why}");
    }
}

/// The scenario's expectations, stated or defaulted, each met or not.
fn expectation_rows(s: &mut String, r: &Report) {
    if !r.expectations.is_empty() {
        let _ = writeln!(
            s,
            "  {:<20} {:<9} {:<7}",
            "expectation", "expected", "actual"
        );
        for e in &r.expectations {
            let _ = writeln!(
                s,
                "  {:<20} {:<9} {:<7} {}{}",
                e.name,
                e.expected,
                e.actual,
                if e.met { "met" } else { "NOT MET" },
                if e.default { " (default)" } else { "" }
            );
        }
    }
}

/// The storage's retries, the faults and why any was not confirmed, the run.
fn run_lines(s: &mut String, r: &Report) {
    if r.stats.serialization_retries > 0 {
        let _ = writeln!(
            s,
            "  {} storage transactions retried after a serialization failure (40001)",
            r.stats.serialization_retries
        );
    }
    if let Some(line) = fault_line(r) {
        let _ = writeln!(s, "  {line}");
    }
    for (kind, why) in r
        .fault_counts
        .iter()
        .flat_map(|c| c.reasons.iter().map(move |why| (&c.kind, why)))
        .take(5)
    {
        let _ = writeln!(
            s,
            "    fault {} ({kind}) {}: {}",
            why.id,
            why.status.as_str(),
            why.reason
        );
    }
    let _ = writeln!(
        s,
        "  {} faults injected{}; {} sessions lost; {} workers; backend {}, {} {}, seed {}",
        injected(r),
        match r
            .faults
            .iter()
            .filter(|f| f.outcome != "fail" && f.detail["aim"].get("seen").is_some())
            .count()
        {
            0 => String::new(),
            n => format!(" ({n} aimed)"),
        },
        r.stats.keepalive_lost,
        r.run.behaviour,
        r.run.backend,
        r.run.service,
        if r.run.service_version.is_empty() {
            &r.run.etcd_version
        } else {
            &r.run.service_version
        },
        r.run.seed
    );
    for p in r.problems.iter().take(5) {
        let _ = writeln!(s, "  note: {p}");
    }
}

/// Faults injected: the confirmation tally's when the report has one (a fault
/// whose injection failed is not injected), else every fault window (a run
/// recorded before faults were confirmed).
fn injected(r: &Report) -> u64 {
    if r.fault_counts.is_empty() {
        r.faults.len() as u64
    } else {
        r.fault_counts.iter().map(|c| c.injected).sum()
    }
}
