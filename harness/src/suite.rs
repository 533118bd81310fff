//! `fencecheck suite`: every scenario of a folder (or a list), one after another,
//! one summary table, one `index.html` linking every run's report.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use fencecheck_reports::{descriptor, Report, SuiteEntry};

use crate::run::{self, Overrides, RunError};

/// One scenario's outcome in a suite.
pub struct Outcome {
    pub file: PathBuf,
    pub name: String,
    /// The run's directory (its report.json and report.html).
    pub run_dir: PathBuf,
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
    shard: Option<Shard>,
) -> Result<Vec<Outcome>> {
    let mut scenarios = Vec::new();
    for f in files {
        scenarios.push((f.clone(), crate::plan::load_for(f, base.backend)?));
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut outcomes = Vec::new();
    // A shard that owns no scenario still leaves an index and a record to merge.
    write_index(out, &outcomes, shard)?;
    for (i, (file, scenario)) in scenarios.into_iter().enumerate() {
        let name = scenario.name.clone();
        // One line per scenario even when quiet: a nightly log shows where it is.
        eprint!("[{}/{}] {name:<22} ", i + 1, files.len());
        if !quiet {
            eprintln!();
        }
        let run_dir = out.join(&name);
        let o = Overrides {
            out: Some(run_dir.clone()),
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
            run_dir,
            report,
            error,
            elapsed_s,
        };
        eprintln!("{}", summary_line(&outcome));
        outcomes.push(outcome);
        write_index(out, &outcomes, shard)?;
    }
    Ok(outcomes)
}

/// PASS, INCOMPLETE, INCONCLUSIVE, FAIL, or ERROR for a run that could not run.
pub fn verdict_word(o: &Outcome) -> &'static str {
    match &o.report {
        Some(r) if r.passed => "PASS",
        Some(r) if r.incomplete.is_some() => "INCOMPLETE",
        Some(r) if r.inconclusive.is_some() => "INCONCLUSIVE",
        Some(_) => "FAIL",
        None => "ERROR",
    }
}

pub fn counts(o: &Outcome) -> String {
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
        String::from("\nscenario                    service           resource            verdict   time    key counts\n");
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
            "{:<27} {:<17} {:<19} {:<7} {:>6.1}s   {}\n",
            o.name,
            service,
            resource,
            verdict_word(o),
            o.elapsed_s,
            counts(o)
        ));
    }
    // What each check that failed a run asks, once for the suite.
    for d in descriptor::ALL {
        let failed = outcomes
            .iter()
            .filter_map(|o| o.report.as_ref())
            .any(|r| crate::output::failed_checks(r).contains(d));
        if failed {
            s.push_str(&format!("  {}: {}\n", d.name, d.summary));
        }
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

fn write_index(out: &Path, outcomes: &[Outcome], shard: Option<Shard>) -> Result<()> {
    write_record(out, outcomes, shard)?;
    write_index_html(out, outcomes)
}

/// `index.html` in `out`, linking each run's report relative to `out`.
fn write_index_html(out: &Path, outcomes: &[Outcome]) -> Result<()> {
    let entries: Vec<SuiteEntry> = outcomes
        .iter()
        .map(|o| SuiteEntry {
            scenario: o.name.clone(),
            passed: o.report.as_ref().is_some_and(|r| r.passed),
            verdict_line: counts(o),
            elapsed_s: o.elapsed_s,
            report_html: relative(out, &o.run_dir.join(crate::record::rundir::REPORT_HTML)),
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

/// `target` as a link from a page in `from`: relative when both resolve (so a
/// downloaded artifact's links still work), else absolute.
fn relative(from: &Path, target: &Path) -> String {
    let abs = |p: &Path| {
        // The report may not exist yet (a run that could not run): resolve its folder.
        let (dir, name) = match (p.parent(), p.file_name()) {
            (Some(d), Some(n)) => (d, Some(n)),
            _ => (p, None),
        };
        dir.canonicalize().ok().map(|d| match name {
            Some(n) => d.join(n),
            None => d,
        })
    };
    let (Some(from), Some(to)) = (from.canonicalize().ok(), abs(target)) else {
        return target.display().to_string();
    };
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut parts: Vec<String> = from
        .components()
        .skip(common)
        .map(|_| "..".into())
        .collect();
    parts.extend(
        to.components()
            .skip(common)
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// What a suite ran, for `--merge` (which reads it back): `suite.json` in the
/// suite directory.
pub const RECORD: &str = "suite.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    /// `--shard I/N` when the suite was a shard.
    shard: Option<String>,
    runs: Vec<RecordRun>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordRun {
    file: PathBuf,
    name: String,
    /// The run directory, relative to the suite directory.
    dir: String,
    elapsed_s: f64,
    error: Option<String>,
}

fn write_record(out: &Path, outcomes: &[Outcome], shard: Option<Shard>) -> Result<()> {
    let rec = Record {
        shard: shard.map(|s| s.to_string()),
        runs: outcomes
            .iter()
            .map(|o| RecordRun {
                file: o.file.clone(),
                name: o.name.clone(),
                dir: o
                    .run_dir
                    .strip_prefix(out)
                    .unwrap_or(&o.run_dir)
                    .display()
                    .to_string(),
                elapsed_s: o.elapsed_s,
                error: o.error.clone(),
            })
            .collect(),
    };
    let path = out.join(RECORD);
    std::fs::write(&path, serde_json::to_vec_pretty(&rec)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `--shard I/N`: the I-th of N parts (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let bad = || format!("{s:?}: expected I/N with 1 <= I <= N, e.g. 1/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The shard rule: a file belongs to shard 1 + (h mod N), h the first 8 bytes
    /// (big-endian) of the SHA-256 of its file name. It depends on the file alone,
    /// so adding a scenario never moves another one to a different shard, and it
    /// is the same wherever the checkout lives.
    pub fn owns(&self, file: &Path) -> bool {
        use sha2::Digest;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.display().to_string());
        let d = sha2::Sha256::digest(name.as_bytes());
        let mut h = [0u8; 8];
        h.copy_from_slice(&d[..8]);
        u64::from_be_bytes(h) % u64::from(self.count) == u64::from(self.index - 1)
    }
}

/// The files of `files` (sorted as given) this shard runs; every file with none.
pub fn select(files: Vec<PathBuf>, shard: Option<Shard>) -> Vec<PathBuf> {
    match shard {
        None => files,
        Some(sh) => files.into_iter().filter(|f| sh.owns(f)).collect(),
    }
}

/// `suite --merge DIR…`: reads the `suite.json` and run reports each suite
/// directory holds and writes one `index.html` (and `suite.json`) in `out`,
/// linking every run where it is. The outcomes, in the order of the directories.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    for d in dirs {
        let path = d.join(RECORD);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {} (is {} a suite directory?)",
                path.display(),
                d.display()
            )
        })?;
        let rec: Record = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a suite record", path.display()))?;
        for r in rec.runs {
            let run_dir = d.join(&r.dir);
            let report = if r.error.is_none() {
                let p = run_dir.join(crate::record::rundir::REPORT_JSON);
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("cannot read {}", p.display()))?;
                Some(
                    serde_json::from_str::<Report>(&text)
                        .with_context(|| format!("{}: not a report", p.display()))?,
                )
            } else {
                None
            };
            outcomes.push(Outcome {
                file: r.file,
                name: r.name,
                run_dir,
                report,
                error: r.error,
                elapsed_s: r.elapsed_s,
            });
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_index(out, &outcomes, None)?;
    Ok(outcomes)
}
