//! What the terminal shows at the end of a run or a check: a short verdict table
//! and where the report is.

use std::fmt::Write;
use std::path::Path;

use fencecheck_reports::descriptor::{self, Descriptor, Fails};
use fencecheck_reports::{Report, Validity};

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
    // What each check that failed the run asks, so the verdict reads without
    // the docs.
    for d in failed_checks(r) {
        let _ = writeln!(s, "  {}: {}", d.name, d.summary);
    }
}

/// Does this row fail the run? INVALID in a run that did not pass, when its
/// check must hold by default (its descriptor's rule: not `mutex`, whose
/// verdict is informational). A run that passed with an INVALID check expected
/// it (a negative control).
pub fn row_fails(r: &Report, row: &Row) -> bool {
    row.valid == Some(Validity::Invalid) && !r.passed && row.check.fails == Fails::ByDefault
}

/// The checks that kept this run from passing, in the descriptors' order: an
/// expectation of theirs unmet (stated or defaulted: every check that must
/// hold has one), a coverage gap, a planned fault not injected or not
/// confirmed. An INVALID check whose expectation allows it is not one.
pub fn failed_checks(r: &Report) -> Vec<&'static Descriptor> {
    if r.passed {
        return Vec::new();
    }
    let unmet: Vec<&Descriptor> = r
        .expectations
        .iter()
        .filter(|e| !e.met)
        .filter_map(|e| descriptor::judged_by(&e.name))
        .collect();
    let fault_gap = r
        .fault_counts
        .iter()
        .any(|c| c.skipped > 0 || c.unconfirmed > c.unchecked);
    let gap = !r.coverage.is_empty() || r.inconclusive.is_some();
    descriptor::ALL
        .iter()
        .copied()
        .filter(|d| {
            unmet.contains(d)
                || (d.name == descriptor::COVERAGE.name && gap)
                || (d.name == descriptor::FAULTS.name && fault_gap)
        })
        .collect()
}

/// One row of the verdict table: a check or a finding, its verdict and counts.
pub struct Row {
    pub check: &'static Descriptor,
    /// `valid`, `INVALID`, `unknown`; `None` for a finding (shown `finding`).
    pub valid: Option<Validity>,
    pub counts: String,
}

/// Every row a report has, in the descriptors' order: the checks of the recorded
/// history, then the findings from the service's own record (when it was
/// observed). The terminal, the JUnit file and its Markdown table render these.
pub fn rows(r: &Report) -> Vec<Row> {
    let c = &r.checks;
    let mut out = Vec::new();
    for d in descriptor::ALL {
        let counts = match d.name {
            "fencing" => Some(fencing_counts(r)),
            "mutex" => Some(mutex_counts(&c.mutex)),
            "exclusion" => c.exclusion.as_ref().map(exclusion_counts),
            "counter" => Some(counter_counts(r)),
            "linearizable" => c.linearizable.as_ref().map(|l| {
                format!(
                    "{} operations, model {}, {:.0} ms",
                    l.operations, l.model, l.elapsed_ms
                )
            }),
            "token" => c.token.as_ref().map(token_counts),
            _ => None,
        };
        if let Some(counts) = counts {
            out.push(Row {
                check: d,
                valid: c.validity(d),
                counts,
            });
        }
    }
    out.extend(finding_rows(r));
    out
}

/// The mutex row's counts, with why it never fails a run.
fn mutex_counts(m: &fencecheck_reports::MutexCheck) -> String {
    let why = match descriptor::MUTEX.fails {
        Fails::Informational(why) => format!(" ({why})"),
        _ => String::new(),
    };
    format!("{} overlapping holds in {} holds{why}", m.overlaps, m.holds)
}

/// The table's rows, each `name verdict counts`.
fn check_rows(s: &mut String, r: &Report) {
    let _ = writeln!(s, "  {:<13} {:<8} counts", "check", "verdict");
    for row in rows(r) {
        let verdict = row
            .valid
            .map_or_else(|| "finding".to_string(), |v| v.to_string());
        let _ = writeln!(s, "  {:<13} {:<8} {}", row.check.name, verdict, row.counts);
    }
}

/// The counter row's counts: lost increments, with why a count is only a lower
/// bound.
fn counter_counts(r: &Report) -> String {
    let c = &r.checks;
    let counter_lb = c.counter.lower_bound.as_deref();
    let inconsistent = r
        .expectations
        .iter()
        .find(|e| e.name == "lost_updates")
        .and_then(|e| e.actual.split_once("(counter inconsistent: "))
        .map(|(_, why)| format!(" — inconsistent: {}", why.trim_end_matches(')')));
    format!(
        "{} acknowledged increments, {} lost{}{}{}",
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
    )
}

/// The findings from the service's own record (when it was observed).
fn finding_rows(r: &Report) -> Vec<Row> {
    let f = &r.findings;
    if !f.observed {
        return Vec::new();
    }
    let g = &f.grant_validity;
    let used = g
        .after_session_end
        .saturating_sub(g.caught_by_client)
        .saturating_sub(g.during_client_fault);
    let mut out = vec![Row {
        check: &descriptor::GRANT_VALID,
        valid: Some(Validity::from_bool(used == 0)),
        counts: format!(
            "{} of {} grants told after the session had ended ({} caught by the client{})",
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
        ),
    }];
    let u = &f.unsafe_window;
    let lb = u.lower_bound.is_some();
    out.push(Row {
        check: &descriptor::UNSAFE_WINDOW,
        valid: None,
        counts: format!(
            "{} holds unsafe ({} outlived their session, {} granted on an ended one): \
             {} writes refused, {} accepted, {} reads; window p50 {}{:.0} ms, max {}{:.0} ms{}",
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
            if lb {
                " (lower bound: HTTP storage)"
            } else {
                ""
            }
        ),
    });
    if u.holds > 0 {
        out.push(Row {
            check: &descriptor::POST_LOSS,
            valid: None,
            counts: post_loss_counts(&u.post_loss, lb),
        });
    }
    out.push(Row {
        check: &descriptor::LIVENESS,
        valid: None,
        counts: format!(
            "{} waits left waiting ≥ {} s while the lock was free at the service; {} holders \
             never told that the service had ended their session",
            f.liveness.stuck_waits,
            f.liveness.threshold_ms / 1000,
            f.liveness.untold_holders
        ),
    });
    out
}

/// The post-loss row: what the unsafe holders did before and after they knew.
fn post_loss_counts(p: &fencecheck_reports::PostLoss, lb: bool) -> String {
    let n = p.told + p.untold;
    let (br, ba) = (
        floor(p.before.writes_refused, lb),
        floor(p.before.writes_accepted, lb),
    );
    if p.told == 0 {
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
    }
}

/// The one-line reason for every count marked as a lower bound.
fn lower_bound_notes(s: &mut String, r: &Report) {
    let (c, f) = (&r.checks, &r.findings);
    let fence_lb = c.fencing.lower_bound.clone();
    // Why a fencing count with unjudged writes is a lower bound: the fencing
    // descriptor's rule.
    let unjudged = descriptor::FENCING
        .lower_bound
        .and_then(|l| l.unjudged)
        .filter(|_| c.fencing.unjudged > 0)
        .map(|why| format!("writes unjudged: {why}"));
    let mut reasons: Vec<String> = Vec::new();
    for why in [
        fence_lb.or(unjudged),
        c.counter.lower_bound.clone(),
        f.unsafe_window.lower_bound.clone(),
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
