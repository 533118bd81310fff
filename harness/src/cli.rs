//! Commands only: parse arguments, call the stage, map the outcome to an exit code
//! (0 every expectation met, 1 a check failed or an expectation was not met,
//! 2 bad input or the harness could not run).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::run::{Overrides, RunError};
use crate::scenario::{BackendKind, EtcdVersion, Scenario};
use crate::{assess, output, worker};

pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

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

#[derive(Subcommand)]
enum Command {
    /// Run one scenario end to end and check it.
    Scenario {
        /// The scenario file (TOML).
        file: PathBuf,
        #[arg(long)]
        seed: Option<u64>,
        /// auto | process | docker
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
    /// (label `fencecheck.run`).
    Clean {
        /// Also remove the images fencecheck built.
        #[arg(long)]
        images: bool,
    },
    /// Measure fencecheck's own machinery (figures, never pass/fail).
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// (internal) One lock-contending worker process.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        config: String,
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
    },
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

fn runtime(multi: bool) -> std::io::Result<tokio::runtime::Runtime> {
    if multi {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
}

fn error(msg: impl std::fmt::Display) -> i32 {
    eprintln!("fencecheck: error: {msg}");
    EXIT_ERROR
}

pub fn main() -> i32 {
    // Printing into a closed pipe (`fencecheck … | head`) ends the process quietly,
    // as for any Unix tool, instead of panicking in println!.
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            // testcontainers logs what the docker backend reports itself (a
            // container that exits before its ready line becomes the run's one-line
            // error), so its own lines stay out of the default output.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,testcontainers=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
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
    match cli.command {
        Command::Scenario {
            file,
            seed,
            backend,
            duration,
            workers,
            etcd,
            out,
            quiet,
        } => {
            let scenario = match Scenario::load(&file) {
                Ok(s) => s,
                Err(e) => return error(e),
            };
            let o = Overrides {
                seed,
                backend,
                duration,
                workers,
                etcd,
                out,
            };
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            let result = rt.block_on(async {
                tokio::select! {
                    r = crate::run::run(&file, scenario, &o, quiet) => Some(r),
                    // Outside the main phase (start-up, wind-down) Ctrl-C drops the run:
                    // every child is killed and continued by its Drop.
                    _ = tokio::signal::ctrl_c() => None,
                }
            });
            match result {
                Some(Ok((report, dir))) => {
                    print!("{}", output::verdict_table(&report, &dir));
                    if report.passed {
                        EXIT_PASS
                    } else {
                        EXIT_FAIL
                    }
                }
                Some(Err(RunError::Interrupted(d))) => {
                    error(format!("interrupted; recorded files are in {d}"))
                }
                Some(Err(RunError::Harness(e))) => error(format!("{e:#}")),
                None => error("interrupted"),
            }
        }
        Command::Suite {
            paths,
            seed,
            backend,
            etcd,
            duration,
            out,
            quiet,
        } => {
            let paths = if paths.is_empty() {
                vec![PathBuf::from("scenarios")]
            } else {
                paths
            };
            let files = match crate::suite::scenario_files(&paths) {
                Ok(f) => f,
                Err(e) => return error(format!("{e:#}")),
            };
            let out = out.unwrap_or_else(crate::suite::default_suite_dir);
            let o = Overrides {
                seed,
                backend,
                duration,
                workers: None,
                etcd,
                out: None,
            };
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            let res = rt.block_on(async {
                tokio::select! {
                    r = crate::suite::run_suite(&files, &o, &out, quiet) => Some(r),
                    _ = tokio::signal::ctrl_c() => None,
                }
            });
            match res {
                Some(Ok(outcomes)) => {
                    print!("{}", crate::suite::summary_table(&outcomes, &out));
                    if outcomes.iter().any(|o| o.report.is_none()) {
                        EXIT_ERROR
                    } else if outcomes
                        .iter()
                        .all(|o| o.report.as_ref().is_some_and(|r| r.passed))
                    {
                        EXIT_PASS
                    } else {
                        EXIT_FAIL
                    }
                }
                Some(Err(e)) => error(format!("{e:#}")),
                None => error("interrupted"),
            }
        }
        Command::Check { run_dir } | Command::Report { run_dir } => {
            match assess::assess(&run_dir) {
                Ok(report) => {
                    print!("{}", output::verdict_table(&report, &run_dir));
                    if report.passed {
                        EXIT_PASS
                    } else {
                        EXIT_FAIL
                    }
                }
                Err(e) => error(format!("{e:#}")),
            }
        }
        Command::Validate {
            files,
            schedule,
            seed,
        } => {
            let mut bad = 0;
            for f in &files {
                match Scenario::load(f) {
                    Ok(s) => {
                        println!(
                            "{}: ok ({}, {} workers, {} faults)",
                            f.display(),
                            s.name,
                            s.workload.workers,
                            s.faults.len()
                        );
                        if schedule {
                            let seed = seed.or(s.seed).unwrap_or(0);
                            println!("  schedule with seed {seed}:");
                            for p in crate::nemesis::plan(&s, seed) {
                                println!(
                                    "  #{:<3} at {:>8.3}s  {:<12} {:<24} for {:.3}s",
                                    p.id,
                                    p.at.as_secs_f64(),
                                    p.kind.to_string(),
                                    p.target.to_string(),
                                    p.duration.as_secs_f64()
                                );
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        bad += 1;
                    }
                }
            }
            if bad > 0 {
                EXIT_ERROR
            } else {
                EXIT_PASS
            }
        }
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
        } => {
            let opts = faultproxy::bench::BenchOptions {
                round_trips,
                bulk_bytes,
                ..Default::default()
            };
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            match rt.block_on(faultproxy::bench::bench(opts)) {
                Ok(r) => {
                    println!("{r}");
                    EXIT_PASS
                }
                Err(e) => error(format!("bench: {e}")),
            }
        }
        Command::Images { etcd } => {
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            match rt.block_on(crate::backend::docker::build_images(&etcd)) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    EXIT_PASS
                }
                Err(e) => error(format!("{e:#}")),
            }
        }
        Command::Clean { images } => {
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            match rt.block_on(crate::backend::docker::clean(images)) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    EXIT_PASS
                }
                Err(e) => error(format!("{e:#}")),
            }
        }
        Command::Worker { config } => {
            let cfg: worker::WorkerConfig = match serde_json::from_str(&config) {
                Ok(c) => c,
                Err(e) => return error(format!("bad worker config: {e}")),
            };
            match runtime(false)
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(worker::run(cfg)))
            {
                Ok(()) => EXIT_PASS,
                Err(e) => error(format!("worker: {e:#}")),
            }
        }
        Command::Storage {
            listen,
            log,
            fencing,
        } => {
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(e) => return error(e),
            };
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            match rt.block_on(fencecheck_storage::serve(
                listen, log, fencing, None, shutdown,
            )) {
                Ok(()) => EXIT_PASS,
                Err(e) => error(format!("storage: {e:#}")),
            }
        }
    }
}
