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
        if r.passed {
            "PASS: every expectation met"
        } else {
            "FAIL: an expectation was not met"
        }
    );
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
        "  {:<13} {:<8} {} acknowledged increments, {} lost",
        "counter",
        c.counter.valid.to_string(),
        c.counter.acknowledged,
        c.counter.lost
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
    let _ = writeln!(
        s,
        "  {} faults injected; {} keepalives lost; backend {}, etcd {}, seed {}",
        r.faults.len(),
        r.stats.keepalive_lost,
        r.run.backend,
        r.run.etcd_version,
        r.run.seed
    );
    for p in r.problems.iter().take(5) {
        let _ = writeln!(s, "  note: {p}");
    }
    let _ = writeln!(
        s,
        "report: {}",
        run_dir.join(crate::rundir::REPORT_HTML).display()
    );
    s
}
