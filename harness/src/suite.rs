//! `fencecheck suite`: every scenario of a folder (or a list), one after another,
//! one summary table, one `index.html` linking every run's report.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use fencecheck_reports::{Report, SuiteEntry};

use crate::run::{self, Overrides, RunError};
use crate::scenario::Scenario;

/// One scenario's outcome in a suite.
pub struct Outcome {
    pub file: PathBuf,
    pub name: String,
    /// `None` when the harness could not run it (the error says why).
    pub report: Option<Report>,
    pub error: Option<String>,
    pub elapsed_s: f64,
}

/// The scenario files named: folders are expanded to their `*.toml`, sorted.
pub fn scenario_files(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(a)
                .with_context(|| format!("cannot read {}", a.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(a.clone());
        }
    }
    anyhow::ensure!(!out.is_empty(), "no scenario files found");
    Ok(out)
}

pub fn default_suite_dir() -> PathBuf {
    let ts = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from("runs").join(format!("suite-{ts}"))
}

/// Runs every file into `out/<scenario name>/`. Every file is validated first, so
/// a typo in the last one does not waste the run of the others.
pub async fn run_suite(
    files: &[PathBuf],
    base: &Overrides,
    out: &Path,
    quiet: bool,
) -> Result<Vec<Outcome>> {
    let mut scenarios = Vec::new();
    for f in files {
        scenarios.push((f.clone(), Scenario::load(f)?));
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut outcomes = Vec::new();
    for (i, (file, scenario)) in scenarios.into_iter().enumerate() {
        let name = scenario.name.clone();
        // One line per scenario even when quiet: a nightly log shows where it is.
        eprint!("[{}/{}] {name:<22} ", i + 1, files.len());
        if !quiet {
            eprintln!();
        }
        let o = Overrides {
            out: Some(out.join(&name)),
            ..base.clone()
        };
        let started = Instant::now();
        let res = run::run(&file, scenario, &o, quiet).await;
        let elapsed_s = started.elapsed().as_secs_f64();
        let (report, error) = match res {
            Ok((r, _)) => (Some(r), None),
            Err(RunError::Interrupted(d)) => {
                anyhow::bail!(
                    "interrupted; the suite so far is in {}, this run in {d}",
                    out.display()
                )
            }
            Err(RunError::Harness(e)) => (None, Some(format!("{e:#}"))),
            Err(RunError::Scenario(e)) => (None, Some(e.to_string())),
        };
        let outcome = Outcome {
            file,
            name,
            report,
            error,
            elapsed_s,
        };
        eprintln!("{}", summary_line(&outcome));
        outcomes.push(outcome);
        write_index(out, &outcomes)?;
    }
    Ok(outcomes)
}

fn verdict_word(o: &Outcome) -> &'static str {
    match &o.report {
        Some(r) if r.passed => "PASS",
        Some(_) => "FAIL",
        None => "ERROR",
    }
}

fn counts(o: &Outcome) -> String {
    match (&o.report, &o.error) {
        (Some(r), _) => {
            let c = &r.checks;
            format!(
                "stale accepted {}, stale rejected {}, overlaps {}, lost {}{}{}",
                c.fencing.stale_accepted,
                c.fencing.stale_rejected,
                c.mutex.overlaps,
                c.counter.lost,
                // Only the exception is named: most rows run the careful worker.
                if r.run.behaviour == "naive" {
                    ", naive worker"
                } else {
                    ""
                },
                c.linearizable
                    .as_ref()
                    .map(|l| format!(", linearizable {}", l.valid))
                    .unwrap_or_default()
            )
        }
        (None, Some(e)) => e.lines().next().unwrap_or_default().to_string(),
        (None, None) => String::new(),
    }
}

pub fn summary_line(o: &Outcome) -> String {
    format!(
        "{:<5} {:>6.1}s  {}",
        verdict_word(o),
        o.elapsed_s,
        counts(o)
    )
}

pub fn summary_table(outcomes: &[Outcome], out: &Path) -> String {
    let mut s =
        String::from("\nscenario               service          resource            verdict   time    key counts\n");
    for o in outcomes {
        let service = o
            .report
            .as_ref()
            .map(|r| format!("{} {}", r.run.service, r.run.service_version))
            .unwrap_or_else(|| "-".into());
        // The storage kind, without an http URL's address (it is in the report).
        let resource = o
            .report
            .as_ref()
            .map(|r| match r.run.resource.strip_prefix("http ") {
                Some(_) => "http".to_string(),
                None => r.run.resource.clone(),
            })
            .unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "{:<22} {:<16} {:<19} {:<7} {:>6.1}s   {}\n",
            o.name,
            service,
            resource,
            verdict_word(o),
            o.elapsed_s,
            counts(o)
        ));
    }
    let passed = outcomes
        .iter()
        .filter(|o| verdict_word(o) == "PASS")
        .count();
    s.push_str(&format!(
        "{passed}/{} passed; index: {}\n",
        outcomes.len(),
        out.join("index.html").display()
    ));
    s
}

fn write_index(out: &Path, outcomes: &[Outcome]) -> Result<()> {
    let entries: Vec<SuiteEntry> = outcomes
        .iter()
        .map(|o| SuiteEntry {
            scenario: o.name.clone(),
            passed: o.report.as_ref().is_some_and(|r| r.passed),
            verdict_line: counts(o),
            elapsed_s: o.elapsed_s,
            report_html: format!("{}/report.html", o.name),
            seed: o.report.as_ref().map(|r| r.run.seed).unwrap_or(0),
            service: o
                .report
                .as_ref()
                .map(|r| r.run.service.clone())
                .unwrap_or_default(),
            version: o
                .report
                .as_ref()
                .map(|r| r.run.service_version.clone())
                .unwrap_or_default(),
        })
        .collect();
    fencecheck_reports::write_index(out, &entries)?;
    Ok(())
}
