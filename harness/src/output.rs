//! What the terminal shows at the end of a run or a check: a short verdict table
//! and where the report is.

use std::fmt::Write;
use std::path::Path;

use fencecheck_reports::Report;

pub fn verdict_table(r: &Report, run_dir: &Path) -> String {
    let mut s = String::new();
    let c = &r.checks;
    let _ = writeln!(
        s,
        "\n{} — {}",
        r.run.scenario,
        if r.incomplete.is_some() {
            "INCOMPLETE: the run never reached its end (no heal phase, no final reads)"
        } else if r.passed {
            "PASS: every expectation met"
        } else if r.problems.iter().any(|p| p.contains(": client error: ")) {
            "FAIL: a lock client broke the protocol (see the notes)"
        } else {
            "FAIL: an expectation was not met"
        }
    );
    if let Some(why) = &r.incomplete {
        let _ = writeln!(s, "  {why}");
    }
    let _ = writeln!(s, "  {:<13} {:<8} counts", "check", "verdict");
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {} writes: {} stale accepted, {} stale rejected, {} fresh rejected",
        "fencing",
        c.fencing.valid.to_string(),
        c.fencing.writes,
        c.fencing.stale_accepted,
        c.fencing.stale_rejected,
        c.fencing.fresh_rejected
    );
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {} overlapping holds in {} holds",
        "mutex",
        c.mutex.valid.to_string(),
        c.mutex.overlaps,
        c.mutex.holds
    );
    let _ = writeln!(
        s,
        "  {:<13} {:<8} {} acknowledged increments, {} lost{}",
        "counter",
        c.counter.valid.to_string(),
        c.counter.acknowledged,
        c.counter.lost,
        match c.counter.lost_fraction {
            Some(f) if f > 0.0 => format!(" ({:.1}% of the acknowledged)", f * 100.0),
            _ => String::new(),
        }
    );
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
            "  {:<13} {:<8} {} grants: {} tokens went backwards, {} repeated{}",
            "token",
            t.valid.to_string(),
            t.grants,
            t.regressions,
            t.repeats,
            if t.valid == fencecheck_reports::Validity::Unknown {
                " (no token sent)"
            } else {
                ""
            }
        );
    }
    let f = &r.findings;
    if f.observed {
        let g = &f.grant_validity;
        let u = &f.unsafe_window;
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} of {} grants told after the session had ended ({} caught by the client)",
            "grant-valid", "finding", g.after_session_end, g.grants, g.caught_by_client
        );
        let _ = writeln!(
            s,
            "  {:<13} {:<8} {} holds outlived their session: {} writes refused, {} accepted, {} reads; \
             window p50 {:.0} ms, max {:.0} ms",
            "unsafe-window", "finding", u.holds, u.writes_refused, u.writes_accepted, u.reads,
            u.p50_ms, u.max_ms
        );
    }
    if !r.expectations.is_empty() {
        let _ = writeln!(
            s,
            "  {:<20} {:<9} {:<7}",
            "expectation", "expected", "actual"
        );
        for e in &r.expectations {
            let _ = writeln!(
                s,
                "  {:<20} {:<9} {:<7} {}",
                e.name,
                e.expected,
                e.actual,
                if e.met { "met" } else { "NOT MET" }
            );
        }
    }
    if r.stats.serialization_retries > 0 {
        let _ = writeln!(
            s,
            "  {} storage transactions retried after a serialization failure (40001)",
            r.stats.serialization_retries
        );
    }
    let _ = writeln!(
        s,
        "  {} faults injected; {} sessions lost; {} workers; backend {}, {} {}, seed {}",
        r.faults.len(),
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
    let _ = writeln!(
        s,
        "report: {}",
        run_dir.join(crate::record::rundir::REPORT_HTML).display()
    );
    s
}
