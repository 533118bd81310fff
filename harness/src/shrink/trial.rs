//! Running a candidate: N runs of this same binary (`fencecheck scenario`), each
//! with a fresh seed, in a subprocess so that every run's clean-up and signal
//! handling stay its own; stopped as soon as the K-of-N outcome is decided.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::scenario::BackendKind;

/// What a run costs beyond the scenario's own duration (start-up of the service
/// and the storage, heal, final reads, checks) until one has been measured.
pub const STARTUP: Duration = Duration::from_secs(5);

/// The expectations a run failed: name → what was expected. `inconclusive` and
/// `incomplete` stand for those verdicts.
pub type Unmet = BTreeMap<String, String>;

/// One run's outcome.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Exit 1, failing (at least) the expectations being shrunk for.
    Reproduced(Unmet),
    /// Exit 1, but not those: another failure, which must not be shrunk towards.
    Other(Unmet),
    /// Exit 0.
    Passed,
    /// Exit 2 or worse: the candidate could not run; the first line of the error.
    Error(String),
}

/// One candidate's runs.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub runs: u32,
    pub reproduced: u32,
    pub passed: u32,
    pub other: u32,
    pub errors: u32,
    pub seeds: Vec<u64>,
    /// Every exit-1 run's unmet expectations (for the baseline's target).
    pub failed: Vec<Unmet>,
    pub first_error: Option<String>,
}

/// Keep, reject, or stop the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Reject,
    /// The budget would run out before the next run.
    Budget,
    Interrupted,
}

/// Runs candidates and keeps the tallies, the seeds and the clock.
pub struct Runner {
    exe: PathBuf,
    pub work: PathBuf,
    backend: Option<BackendKind>,
    next_seed: u64,
    started: Instant,
    pub budget: Duration,
    /// Time held back for the final measurement.
    pub reserve: Duration,
    /// The most a run took beyond its scenario's duration so far.
    overhead: Duration,
    /// The expectations a run must fail to count (unset: any exit 1 counts).
    pub target: Option<Vec<String>>,
    pub runs: u32,
    pub errors: u32,
    pub other: u32,
    pub candidates: u32,
    log: std::fs::File,
    /// Each run is awaited on this runtime (the search itself is plain code).
    rt: tokio::runtime::Runtime,
    bar: ProgressBar,
    quiet: bool,
    /// For the progress line: the fault count of the best candidate so far.
    pub faults_now: usize,
    pub faults_start: usize,
}

impl Runner {
    pub fn new(
        work: &Path,
        backend: Option<BackendKind>,
        first_seed: u64,
        budget: Duration,
        quiet: bool,
    ) -> Result<Runner> {
        let exe = std::env::current_exe().context("cannot find this fencecheck binary")?;
        std::fs::create_dir_all(work)
            .with_context(|| format!("cannot create the work folder {}", work.display()))?;
        let log_path = work.join("shrink.jsonl");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot write {}", log_path.display()))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a runtime")?;
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        };
        Ok(Runner {
            exe,
            work: work.to_path_buf(),
            backend,
            next_seed: first_seed,
            started: Instant::now(),
            budget,
            reserve: Duration::ZERO,
            overhead: STARTUP,
            target: None,
            runs: 0,
            errors: 0,
            other: 0,
            candidates: 0,
            log,
            rt,
            bar,
            quiet,
            faults_now: 0,
            faults_start: 0,
        })
    }

    /// `--backend`, passed to every run.
    pub fn backend(&self) -> Option<BackendKind> {
        self.backend
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What one run of a scenario lasting `d` is expected to take.
    pub fn estimate(&self, d: Duration) -> Duration {
        d + self.overhead
    }

    /// A line above the progress spinner (none with `--quiet`).
    pub fn say(&self, line: &str) {
        if !self.quiet {
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn show(&self, step: &str, i: u32, n: u32, seed: u64) {
        self.bar.set_message(format!(
            "candidate {} ({step}): run {i}/{n}, seed {seed} · faults {} → {} · {} runs · {} of {}",
            self.candidates,
            self.faults_start,
            self.faults_now,
            self.runs,
            clock(self.elapsed()),
            clock(self.budget)
        ));
    }

    /// Writes the candidate and runs it up to `n` times with fresh seeds. With
    /// `early`, stops as soon as `k` reproductions are reached or can no longer be.
    pub fn trial(
        &mut self,
        step: &str,
        text: &str,
        duration: Duration,
        (n, k): (u32, u32),
        early: bool,
    ) -> Result<(Decision, Tally)> {
        self.candidates += 1;
        let id = self.candidates;
        let dir = self.work.join(format!("c{id:03}"));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let file = dir.join("scenario.toml");
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
        let mut t = Tally::default();
        for i in 1..=n {
            let misses = t.runs - t.reproduced;
            if early && (t.reproduced >= k || misses > n - k) {
                break;
            }
            let est = self.estimate(duration);
            if self.elapsed() + est + self.reserve > self.budget {
                if t.runs == 0 {
                    // Never run: not a candidate tried.
                    self.candidates -= 1;
                    let _ = std::fs::remove_dir_all(&dir);
                }
                return Ok((Decision::Budget, t));
            }
            let seed = self.next_seed;
            self.next_seed += 1;
            self.show(step, i, n, seed);
            let run_dir = dir.join(format!("run-{seed}"));
            let began = Instant::now();
            let Some(outcome) = self.rt.block_on(self.run_one(&file, seed, &run_dir, est))? else {
                return Ok((Decision::Interrupted, t));
            };
            let took = began.elapsed();
            self.overhead = self.overhead.max(took.saturating_sub(duration));
            self.runs += 1;
            t.runs += 1;
            t.seeds.push(seed);
            let (word, unmet) = match &outcome {
                Outcome::Reproduced(u) => {
                    t.reproduced += 1;
                    t.failed.push(u.clone());
                    ("reproduced", Some(u))
                }
                Outcome::Other(u) => {
                    t.other += 1;
                    self.other += 1;
                    t.failed.push(u.clone());
                    ("other failure", Some(u))
                }
                Outcome::Passed => {
                    t.passed += 1;
                    ("passed", None)
                }
                Outcome::Error(e) => {
                    t.errors += 1;
                    self.errors += 1;
                    t.first_error.get_or_insert_with(|| e.clone());
                    ("error", None)
                }
            };
            let line = serde_json::json!({
                "candidate": id,
                "step": step,
                "seed": seed,
                "outcome": word,
                "unmet": unmet.map(|u| u.keys().cloned().collect::<Vec<_>>()),
                "error": match &outcome { Outcome::Error(e) => Some(e.as_str()), _ => None },
                "secs": took.as_secs_f64(),
            });
            let _ = writeln!(self.log, "{line}");
            // A run that could not run is kept for its logs; the others only
            // cost disk (an etcd data directory each) once classified.
            if !matches!(outcome, Outcome::Error(_)) {
                let _ = std::fs::remove_dir_all(&run_dir);
            }
        }
        let decision = if t.reproduced >= k {
            Decision::Keep
        } else {
            Decision::Reject
        };
        Ok((decision, t))
    }

    /// One run; `None` when the user interrupted it.
    async fn run_one(
        &self,
        file: &Path,
        seed: u64,
        run_dir: &Path,
        est: Duration,
    ) -> Result<Option<Outcome>> {
        let log_path = run_dir.with_extension("log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot write {}", log_path.display()))?;
        let err = log.try_clone().context("cannot share the run's log")?;
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("scenario")
            .arg(file)
            .args(["--seed", &seed.to_string(), "--quiet", "--out"])
            .arg(run_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        if let Some(b) = self.backend {
            cmd.args(["--backend", backend_name(b)]);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", self.exe.display()))?;
        // A run that hangs is a harness problem, not a verdict: generous, then
        // the same SIGINT a user would send, so it still cleans up.
        let limit = est * 3 + Duration::from_secs(60);
        let status = tokio::select! {
            s = child.wait() => Some(s.context("waiting for a run")?),
            _ = tokio::time::sleep(limit) => {
                interrupt(&mut child).await;
                return Ok(Some(Outcome::Error(format!(
                    "the run took longer than {} and was interrupted (log: {})",
                    clock(limit),
                    log_path.display()
                ))));
            }
            _ = tokio::signal::ctrl_c() => {
                interrupt(&mut child).await;
                return Ok(None);
            }
        };
        let code = status.and_then(|s| s.code());
        Ok(Some(classify(
            code,
            run_dir,
            &log_path,
            self.target.as_deref(),
        )))
    }
}

/// SIGINT, as a user would send it (the run cleans up), then SIGKILL if it
/// does not end within a minute.
async fn interrupt(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGINT,
        );
    }
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

fn backend_name(b: BackendKind) -> &'static str {
    b.as_str()
}

/// What a finished run says: exit 0 passed; exit 1 failed, and which
/// expectations (from its report.json); anything else could not run.
pub fn classify(
    code: Option<i32>,
    run_dir: &Path,
    log: &Path,
    target: Option<&[String]>,
) -> Outcome {
    match code {
        Some(0) => Outcome::Passed,
        Some(1) => match unmet(run_dir) {
            Ok(u) => {
                let same = target.is_none_or(|t| t.iter().all(|name| u.contains_key(name)));
                if same {
                    Outcome::Reproduced(u)
                } else {
                    Outcome::Other(u)
                }
            }
            Err(e) => Outcome::Error(format!("{e:#}")),
        },
        other => {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let last = text
                .lines()
                .rev()
                .find(|l| l.contains("error"))
                .or_else(|| text.lines().last())
                .unwrap_or("no output");
            let how = other.map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
            Outcome::Error(format!("{how}: {}", last.trim()))
        }
    }
}

/// The expectations a recorded run did not meet (report.json,
/// docs/report-schema.md), with `inconclusive`/`incomplete` for those verdicts.
pub fn unmet(run_dir: &Path) -> Result<Unmet> {
    let path = run_dir.join(crate::record::rundir::REPORT_JSON);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read the run's report", path.display()))?;
    let r: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let mut out = Unmet::new();
    for e in r["expectations"].as_array().into_iter().flatten() {
        if e["met"] == false {
            let name = e["name"].as_str().unwrap_or("?").to_string();
            let expected = match &e["expected"] {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            out.insert(name, expected);
        }
    }
    for verdict in ["inconclusive", "incomplete"] {
        if r.get(verdict).is_some_and(|v| !v.is_null()) {
            out.insert(verdict.into(), String::new());
        }
    }
    Ok(out)
}

/// "4m10s", "58s".
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
