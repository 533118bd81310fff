//! Commands only: parse arguments, call the stage, map the outcome to an exit code
//! (0 every expectation met, 1 a check failed or an expectation was not met,
//! 2 bad input or the harness could not run).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::exit::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS};
use crate::run::{Overrides, RunError};
use crate::scenario::{BackendKind, EtcdVersion, Scenario};
use crate::{assess, output, worker};

#[derive(Parser)]
#[command(
    name = "fencecheck",
    version,
    about = "Chaos harness for distributed locks with fencing tokens"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (expected e.g. 30s, 1m)"))
}

/// `--aim[=EVENT]` and `--aim-count N`, on `scenario` and `suite`.
#[derive(clap::Args)]
struct AimArgs {
    /// Aim every fault: each fires on the moment that matters for its kind
    /// (a holder paused, or its session ended, between its read and its
    /// write; links cut or members hit right after a grant) instead of at
    /// its time; `--aim=EVENT` aims every fault at grant, read, write or
    /// acquire. Kinds, targets and durations are kept.
    #[arg(long, value_name = "EVENT", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    aim: Option<crate::scenario::Aim>,
    /// At most N injections of each aimed fault (e.g. 1: one fault per
    /// `[[fault]]`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    aim_count: Option<u32>,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scenario end to end and check it.
    Scenario {
        /// The scenario file (TOML).
        file: PathBuf,
        #[arg(long)]
        seed: Option<u64>,
        /// auto | process | docker | kubernetes
        #[arg(long)]
        backend: Option<BackendKind>,
        /// Override the scenario's duration (e.g. 30s).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        #[arg(long)]
        workers: Option<u32>,
        /// Override `[cluster] etcd`: 3.5 or 3.4.
        #[arg(long)]
        etcd: Option<EtcdVersion>,
        /// Run directory (default runs/<scenario>-<UTC time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress output; the verdict table only.
        #[arg(long, short)]
        quiet: bool,
        /// Also write the verdict as JUnit XML here (one testsuite, a testcase per
        /// check and per expectation).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        #[command(flatten)]
        aim: AimArgs,
    },
    /// Run every scenario of a folder (or the files named), one summary table, one
    /// index.html linking every report. Exit 1 if any expectation is unmet.
    Suite {
        /// Scenario files or folders (default: scenarios/).
        paths: Vec<PathBuf>,
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long)]
        backend: Option<BackendKind>,
        #[arg(long)]
        etcd: Option<EtcdVersion>,
        /// Override every scenario's duration.
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Suite directory (default runs/suite-<UTC time>); one run dir per scenario.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, short)]
        quiet: bool,
        /// Also write JUnit XML here (a testsuite per run).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        #[command(flatten)]
        aim: AimArgs,
        /// Run only part I of N (1-based): a scenario belongs to part
        /// 1 + (SHA-256 of its file name mod N).
        #[arg(long, value_name = "I/N")]
        shard: Option<crate::suite::Shard>,
        /// Print the scenario files this suite (or shard) would run, one per
        /// line, and run nothing.
        #[arg(long, conflicts_with = "merge")]
        list: bool,
        /// The paths are suite directories (shards) already run: merge what they
        /// recorded into one index.html in --out (and --junit), running nothing.
        #[arg(long, conflicts_with = "shard")]
        merge: bool,
    },
    /// Shrink a failing scenario (a file, or a run directory: its recorded
    /// scenario and seed) to the smallest one found that still fails the same way
    /// in at least K of N fresh-seed runs. Exit 0 written, 1 it does not fail, 2
    /// bad input.
    Shrink {
        /// A scenario file, or a run directory.
        input: PathBuf,
        /// Where to write the result (default scenarios/regressions/<name>-shrunk.toml).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Runs per candidate (N), each with a fresh seed.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// Failures of N that keep a candidate (K).
        #[arg(long, default_value_t = 8)]
        k: u32,
        /// Wall-time limit; when it runs out the smallest scenario so far is written.
        #[arg(long, default_value = "20m", value_parser = parse_duration)]
        budget: Duration,
        #[arg(long)]
        backend: Option<BackendKind>,
        /// Folder for the candidates, their logs and shrink.jsonl (default
        /// runs/shrink-<name>-<UTC time>).
        #[arg(long)]
        work: Option<PathBuf>,
        #[arg(long, short)]
        quiet: bool,
    },
    /// Re-run every checker on a recorded run, offline.
    Check { run_dir: PathBuf },
    /// Re-render the report of a recorded run.
    Report { run_dir: PathBuf },
    /// Parse and validate scenario files without running them.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also print each file's fault schedule (same seed → same schedule).
        #[arg(long)]
        schedule: bool,
        /// Seed for --schedule (default: the scenario's own).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Check a history from any source for linearizability (one operation per line:
    /// {"client","call_ns","return_ns","key","op","arg","out"[,"unknown"]}).
    /// Exit 0 linearizable, 1 not, 2 bad input, 3 unknown (time budget ran out).
    Lincheck {
        file: PathBuf,
        /// kv (read/write/cas register) or fenced (write [value, token] accepted iff
        /// token >= max).
        #[arg(long, default_value = "kv")]
        model: String,
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Build (or find) the docker backend's images, FROM scratch, no registry.
    Images {
        /// etcd versions to build an image for (default: 3.5).
        #[arg(long = "etcd", default_values_t = [EtcdVersion::V3_5])]
        etcd: Vec<EtcdVersion>,
    },
    /// Remove every container, network and volume earlier docker runs left behind
    /// (label `fencecheck.run`); a run still in progress (its reaper running) is
    /// left alone
    Clean {
        /// Also remove the images fencecheck built.
        #[arg(long)]
        images: bool,
        /// Remove runs in progress too.
        #[arg(long)]
        force: bool,
    },
    /// A local single-node Kubernetes cluster (etcd, kube-apiserver, kubelet on
    /// this machine's Docker engine, from what ci/bootstrap.sh built).
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Measure fencecheck's own machinery (figures, never pass/fail).
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// (internal) One lock-contending worker process. Its service's access
    /// material, if any, comes from the environment (`FENCECHECK_WORKER_ACCESS`),
    /// not the command line.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        config: String,
    },
    /// (internal) Fault proxies of a run's links hosted away from the harness
    /// (a pod on a node that is not the harness's machine), steered by one-line
    /// commands (`links.rs`).
    #[command(hide = true)]
    Links {
        #[command(subcommand)]
        action: LinksAction,
    },
    /// (internal) The fencing storage service.
    #[command(hide = true)]
    Storage {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        fencing: fencecheck_storage::Fencing,
        #[arg(long, default_value = "flush")]
        durability: fencecheck_storage::Durability,
    },
}

#[derive(Subcommand)]
enum LinksAction {
    /// Starts a proxy per LISTEN=UPSTREAM (indexes 0.. in order; more can be
    /// added by command) and answers commands on SOCKET until killed.
    Serve {
        #[arg(long)]
        socket: PathBuf,
        #[arg(value_parser = crate::links::serve::parse_pair)]
        pairs: Vec<(std::net::SocketAddr, std::net::SocketAddr)>,
    },
    /// Joins stdin and stdout to a `serve`'s SOCKET until stdin ends.
    Ctl {
        #[arg(long)]
        socket: PathBuf,
    },
}

#[derive(Subcommand)]
enum ClusterAction {
    /// Start it and wait until its node is Ready; prints the kubeconfig path.
    /// Already up: says so. Exit 0 up, 2 it could not start.
    Up(ClusterDir),
    /// Stop it, remove its pods' containers and its state. Exit 0 nothing left.
    Down(ClusterDir),
    /// Each component up or down, and the node's Ready condition. Exit 0 up and
    /// Ready, 1 not.
    Status(ClusterDir),
}

#[derive(clap::Args)]
struct ClusterDir {
    /// Its state directory: pids, logs, data, the kubeconfig (default
    /// ~/.cache/fencecheck/cluster).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl ClusterDir {
    fn get(self) -> PathBuf {
        self.dir.unwrap_or_else(crate::cluster::state::default_dir)
    }
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Added latency (p50/p99) and throughput through the fault proxy, no fault,
    /// versus direct, on loopback.
    Proxy {
        /// Ping-pong round trips to time.
        #[arg(long, default_value_t = 20_000)]
        round_trips: usize,
        /// Bytes per bulk-transfer run.
        #[arg(long, default_value_t = 1 << 30)]
        bulk_bytes: u64,
    },
}

/// Runs `f` on a fresh tokio runtime; a runtime that cannot start is exit 2.
fn block_on<F: std::future::Future<Output = i32>>(multi: bool, f: F) -> i32 {
    let rt = if multi {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    match rt {
        Ok(rt) => rt.block_on(f),
        Err(e) => error(e),
    }
}

fn error(msg: impl std::fmt::Display) -> i32 {
    eprintln!("fencecheck: error: {msg}");
    EXIT_ERROR
}

/// Prints what a service-driving command shows on stdout. SIGPIPE is ignored for
/// those (see `main`), so a closed pipe (`… | head`) is an error to drop here, not
/// a panic after the run is recorded.
fn stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn verdict(passed: bool) -> i32 {
    if passed {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}

pub fn main() -> i32 {
    init_logging();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                EXIT_ERROR
            } else {
                EXIT_PASS
            };
        }
    };
    sigpipe_for(&cli.command);
    run(cli.command)
}

/// Logs to stderr, at the level `RUST_LOG` asks, else warnings.
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            // testcontainers logs what the docker backend reports itself (a
            // container that exits before its ready line becomes the run's one-line
            // error), and a system's client may warn on what fault injection makes
            // routine (`System::quiet_logs`): only their errors, if that.
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                format!("warn,testcontainers=off{}", crate::systems::quiet_logs()).into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Printing into a closed pipe (`fencecheck check … | head`) ends an offline
/// command quietly, as for any Unix tool, instead of panicking in println!.
fn sigpipe_for(command: &Command) {
    // The commands that drive services keep Rust's default (SIGPIPE ignored): a
    // write into a Unix socket the Docker engine has closed — a killed container's log
    // stream, a pooled API connection — is then an error the code handles, not a
    // signal that kills the harness mid-run (seen: `kill.toml` on docker, exit by
    // SIGPIPE after the leader's restart).
    let drives_services = matches!(
        command,
        Command::Scenario { .. }
            | Command::Suite { .. }
            | Command::Images { .. }
            | Command::Cluster { .. }
            | Command::Clean { .. }
            | Command::Bench { .. }
            | Command::Worker { .. }
            | Command::Storage { .. }
            | Command::Links { .. }
            | Command::Shrink { .. }
    );
    if !drives_services {
        // SAFETY: restoring the default disposition of one signal before any thread
        // starts (nothing has spawned one yet).
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// The command's own function; its exit code.
fn run(command: Command) -> i32 {
    match command {
        Command::Scenario {
            file,
            seed,
            backend,
            duration,
            workers,
            etcd,
            out,
            quiet,
            junit,
            aim,
        } => {
            let o = Overrides {
                seed,
                backend,
                duration,
                workers,
                etcd,
                out,
                aim: aim.aim,
                aim_count: aim.aim_count,
            };
            scenario(&file, &o, quiet, junit.as_deref())
        }
        Command::Suite {
            paths,
            seed,
            backend,
            etcd,
            duration,
            out,
            quiet,
            junit,
            shard,
            list,
            merge,
            aim,
        } => {
            let o = Overrides {
                seed,
                backend,
                duration,
                workers: None,
                etcd,
                out: None,
                aim: aim.aim,
                aim_count: aim.aim_count,
            };
            let ci = SuiteCi { junit, shard, list };
            if merge {
                suite_merge(&paths, out, ci.junit.as_deref())
            } else {
                suite(paths, &o, out, quiet, ci)
            }
        }
        Command::Shrink {
            input,
            out,
            runs,
            k,
            budget,
            backend,
            work,
            quiet,
        } => crate::shrink::command(crate::shrink::Args {
            input,
            out,
            runs,
            k,
            budget,
            backend,
            work,
            quiet,
        }),
        Command::Check { run_dir } | Command::Report { run_dir } => check(&run_dir),
        Command::Validate {
            files,
            schedule,
            seed,
        } => validate(&files, schedule, seed),
        Command::Lincheck {
            file,
            model,
            timeout,
        } => lincheck::command(&file, &model, timeout),
        Command::Bench {
            what:
                BenchWhat::Proxy {
                    round_trips,
                    bulk_bytes,
                },
        } => bench_proxy(round_trips, bulk_bytes),
        Command::Images { etcd } => lines(crate::backend::docker::build_images(&etcd)),
        Command::Clean { images, force } => lines(crate::backend::docker::clean(images, force)),
        Command::Cluster { action } => cluster(action),
        Command::Worker { config } => worker(&config),
        Command::Storage {
            listen,
            log,
            fencing,
            durability,
        } => storage(listen, log, fencing, durability),
        Command::Links { action } => block_on(false, async move {
            let r = match action {
                LinksAction::Serve { socket, pairs } => {
                    crate::links::serve::serve(&socket, &pairs).await
                }
                LinksAction::Ctl { socket } => crate::links::serve::ctl(&socket).await,
            };
            match r {
                Ok(()) => EXIT_PASS,
                Err(e) => error(format!("{e:#}")),
            }
        }),
    }
}

/// `fencecheck scenario`: one run, its verdict table, exit 0/1/2.
fn scenario(
    arg: &std::path::Path,
    o: &Overrides,
    quiet: bool,
    junit: Option<&std::path::Path>,
) -> i32 {
    let file = match Scenario::locate(arg) {
        Ok(f) => f,
        Err(e) => return error(e),
    };
    let scenario = match crate::plan::load_for(&file, o.backend) {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    let name = scenario.name.clone();
    let started = std::time::Instant::now();
    block_on(true, async {
        let result = tokio::select! {
            r = crate::run::run(&file, scenario, o, quiet) => r,
            // Outside the main phase (start-up, wind-down) Ctrl-C drops the run:
            // every child is killed and continued by its Drop.
            _ = tokio::signal::ctrl_c() => return error("interrupted"),
        };
        match result {
            Ok((report, dir)) => {
                stdout(&output::verdict_table(&report, &dir));
                let passed = report.passed;
                let outcome = crate::suite::Outcome {
                    file: file.clone(),
                    name,
                    run_dir: dir,
                    report: Some(report),
                    error: None,
                    elapsed_s: started.elapsed().as_secs_f64(),
                };
                crate::junit::append_step_summary(&crate::junit::markdown_run(&outcome));
                if let Some(path) = junit {
                    if let Err(e) = crate::junit::write(path, std::slice::from_ref(&outcome)) {
                        return error(format!("{e:#}"));
                    }
                }
                verdict(passed)
            }
            Err(RunError::Interrupted(d)) => {
                error(format!("interrupted; recorded files are in {d}"))
            }
            Err(RunError::Scenario(e)) => {
                could_not_run(e.to_string(), &file, name, started, o, junit)
            }
            Err(RunError::Harness(e)) => {
                could_not_run(format!("{e:#}"), &file, name, started, o, junit)
            }
        }
    })
}

/// A scenario that could not run: exit 2, and for CI the error as a JUnit
/// `<error>` and a job-summary line.
fn could_not_run(
    msg: String,
    file: &std::path::Path,
    name: String,
    started: std::time::Instant,
    o: &Overrides,
    junit: Option<&std::path::Path>,
) -> i32 {
    let outcome = crate::suite::Outcome {
        file: file.to_path_buf(),
        name,
        run_dir: o.out.clone().unwrap_or_default(),
        report: None,
        error: Some(msg.clone()),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    crate::junit::append_step_summary(&crate::junit::markdown_run(&outcome));
    if let Some(path) = junit {
        if let Err(e) = crate::junit::write(path, std::slice::from_ref(&outcome)) {
            eprintln!("fencecheck: error: {e:#}");
        }
    }
    error(msg)
}

/// The suite's CI options: JUnit, shard, list only.
struct SuiteCi {
    junit: Option<PathBuf>,
    shard: Option<crate::suite::Shard>,
    list: bool,
}

/// The end of a suite or a merge: the table, the step summary, JUnit, the exit
/// code (2 if a run could not run, else 1 if any failed).
fn suite_end(
    outcomes: &[crate::suite::Outcome],
    out: &std::path::Path,
    junit: Option<&std::path::Path>,
) -> i32 {
    stdout(&crate::suite::summary_table(outcomes, out));
    crate::junit::append_step_summary(&crate::junit::markdown_suite(
        outcomes,
        &out.join("index.html"),
    ));
    if let Some(path) = junit {
        if let Err(e) = crate::junit::write(path, outcomes) {
            return error(format!("{e:#}"));
        }
    }
    if outcomes.iter().any(|o| o.report.is_none()) {
        EXIT_ERROR
    } else {
        verdict(
            outcomes
                .iter()
                .all(|o| o.report.as_ref().is_some_and(|r| r.passed)),
        )
    }
}

/// `fencecheck suite`: every scenario (of the shard), one table, one index.html.
fn suite(
    paths: Vec<PathBuf>,
    o: &Overrides,
    out: Option<PathBuf>,
    quiet: bool,
    ci: SuiteCi,
) -> i32 {
    let paths = if paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        paths
    };
    let files = match crate::suite::scenario_files(&paths) {
        Ok(f) => crate::suite::select(f, ci.shard),
        Err(e) => return error(format!("{e:#}")),
    };
    if ci.list {
        for f in &files {
            stdout(&format!("{}\n", f.display()));
        }
        return EXIT_PASS;
    }
    let out = out.unwrap_or_else(crate::suite::default_suite_dir);
    block_on(true, async {
        let res = tokio::select! {
            r = crate::suite::run_suite(&files, o, &out, quiet, ci.shard) => r,
            _ = tokio::signal::ctrl_c() => return error("interrupted"),
        };
        match res {
            Ok(outcomes) => suite_end(&outcomes, &out, ci.junit.as_deref()),
            Err(e) => error(format!("{e:#}")),
        }
    })
}

/// `fencecheck suite --merge DIR…`: the shards' records, one index, one table.
fn suite_merge(dirs: &[PathBuf], out: Option<PathBuf>, junit: Option<&std::path::Path>) -> i32 {
    if dirs.is_empty() {
        return error("--merge needs the suite directories to merge");
    }
    let out = out.unwrap_or_else(crate::suite::default_suite_dir);
    match crate::suite::merge(dirs, &out) {
        Ok(outcomes) => suite_end(&outcomes, &out, junit),
        Err(e) => error(format!("{e:#}")),
    }
}

/// `fencecheck check` / `report`: every checker again, offline.
fn check(run_dir: &std::path::Path) -> i32 {
    match assess::assess(run_dir) {
        Ok(report) => {
            print!("{}", output::verdict_table(&report, run_dir));
            verdict(report.passed)
        }
        Err(e) => error(format!("{e:#}")),
    }
}

fn validate(files: &[PathBuf], schedule: bool, seed: Option<u64>) -> i32 {
    // A folder is its `*.toml` files, as for `suite`.
    let files = match crate::suite::scenario_files(files) {
        Ok(f) => f,
        Err(e) => return error(format!("{e:#}")),
    };
    let mut bad = 0;
    for f in &files {
        let s = match Scenario::locate(f).and_then(|p| crate::plan::load(&p)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
                continue;
            }
        };
        println!(
            "{}: ok ({}, {} {} member(s), {} workers, {} faults)",
            f.display(),
            s.name,
            s.cluster.members.0,
            s.lock.service,
            s.workload.workers,
            s.faults.len()
        );
        if schedule {
            let seed = seed.or(s.seed).unwrap_or(0);
            println!("  schedule with seed {seed}:");
            for p in crate::nemesis::plan(&s, seed) {
                println!(
                    "  #{:<3} {} {:>8.3}s  {:<14} {:<24} for {:.3}s{}",
                    p.id,
                    if p.aim.is_some() { "armed" } else { "at   " },
                    p.at.as_secs_f64(),
                    p.kind.to_string(),
                    p.target.to_string(),
                    p.duration.as_secs_f64(),
                    p.aim.map(|a| format!(", aimed at {a}")).unwrap_or_default()
                );
            }
        }
    }
    if bad > 0 {
        EXIT_ERROR
    } else {
        EXIT_PASS
    }
}

fn bench_proxy(round_trips: usize, bulk_bytes: u64) -> i32 {
    let opts = faultproxy::bench::BenchOptions {
        round_trips,
        bulk_bytes,
        ..Default::default()
    };
    block_on(true, async {
        match faultproxy::bench::bench(opts).await {
            Ok(r) => {
                println!("{r}");
                EXIT_PASS
            }
            Err(e) => error(format!("bench: {e}")),
        }
    })
}

/// Commands that print what they did, line by line.
fn lines(f: impl std::future::Future<Output = anyhow::Result<Vec<String>>>) -> i32 {
    block_on(true, async {
        match f.await {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
                EXIT_PASS
            }
            Err(e) => error(format!("{e:#}")),
        }
    })
}

/// `fencecheck cluster up|down|status`.
fn cluster(action: ClusterAction) -> i32 {
    let say = |m: &str| eprintln!("· {m}");
    block_on(true, async {
        match action {
            ClusterAction::Up(d) => match crate::cluster::up(&d.get(), &say).await {
                Ok(crate::cluster::Up::AlreadyUp { kubeconfig }) => {
                    stdout(&format!(
                        "cluster already up\nkubeconfig: {}\n",
                        kubeconfig.display()
                    ));
                    EXIT_PASS
                }
                Ok(crate::cluster::Up::Started {
                    kubeconfig,
                    ready_after,
                    lines,
                }) => {
                    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
                    text.push_str(&format!(
                        "cluster up in {:.1} s\nkubeconfig: {}\n",
                        ready_after.as_secs_f64(),
                        kubeconfig.display()
                    ));
                    stdout(&text);
                    EXIT_PASS
                }
                Err(e) => error(format!("cluster up: {e:#}")),
            },
            ClusterAction::Down(d) => match crate::cluster::down(&d.get(), &|_| {}).await {
                Ok(lines) => {
                    stdout(&lines.iter().map(|l| format!("{l}\n")).collect::<String>());
                    EXIT_PASS
                }
                Err(e) => error(format!("cluster down: {e:#}")),
            },
            ClusterAction::Status(d) => match crate::cluster::status(&d.get()).await {
                Ok(s) => {
                    stdout(&s.lines.iter().map(|l| format!("{l}\n")).collect::<String>());
                    verdict(s.up)
                }
                Err(e) => error(format!("cluster status: {e:#}")),
            },
        }
    })
}

fn worker(config: &str) -> i32 {
    let mut cfg: worker::WorkerConfig = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => return error(format!("bad worker config: {e}")),
    };
    if let Ok(access) = std::env::var(worker::ACCESS_ENV) {
        match serde_json::from_str(&access) {
            Ok(a) => cfg.lock.access = Some(a),
            Err(e) => return error(format!("bad {}: {e}", worker::ACCESS_ENV)),
        }
    }
    block_on(false, async {
        match worker::run(cfg).await {
            Ok(()) => EXIT_PASS,
            Err(e) => error(format!("worker: {e:#}")),
        }
    })
}

fn storage(
    listen: std::net::SocketAddr,
    log: PathBuf,
    fencing: fencecheck_storage::Fencing,
    durability: fencecheck_storage::Durability,
) -> i32 {
    block_on(true, async {
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        match fencecheck_storage::serve(listen, log, fencing, durability, None, shutdown).await {
            Ok(()) => EXIT_PASS,
            Err(e) => error(format!("storage: {e:#}")),
        }
    })
}
