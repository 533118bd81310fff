//! `fencecheck-reaper`: the docker backend's safety net for a harness that dies
//! without cleaning up (SIGKILL, OOM, a power cut of the terminal), in the spirit of
//! testcontainers' Ryuk, built locally `FROM scratch` like fencecheck's other images.
//!
//! It runs in a container of its own with the Docker socket mounted, listens on a
//! TCP port the harness reaches through a loopback-published port, and speaks one
//! line per request:
//!
//! ```text
//! harness → reaper:  label=fencecheck.run=fc0123456789\n
//! reaper → harness:  ACK\n
//! ```
//!
//! The harness keeps that connection open for the whole run. When the last
//! connection that registered a label closes — however the harness ended; the
//! kernel closes a killed process's sockets — the reaper removes every container
//! (unpaused first, forced, with its anonymous volumes), volume and network
//! carrying a registered label, and exits (its container is auto-removed). Nothing
//! is removed while a connection is open. If no harness ever connects within
//! `--connect-timeout`, it reaps the `--label` given on its command line, so a
//! harness killed between starting the reaper and connecting leaves nothing either.
//! Containers with the `--spare` label (the reaper itself) are left alone.
//!
//! `fencecheck-reaper kube …` is the kubernetes backend's reaper instead: a pod
//! that watches the run's Lease and deletes the run's namespace once the harness
//! stops renewing it (see `kube.rs`).

mod docker;
mod kube;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Printed once the listener is bound: the harness waits for this line.
const READY_LINE: &str = "reaper listening";

struct Args {
    listen: String,
    socket: String,
    labels: Vec<String>,
    spare: Option<String>,
    connect_timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        listen: "0.0.0.0:8080".into(),
        socket: "/var/run/docker.sock".into(),
        labels: Vec::new(),
        spare: None,
        connect_timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => a.listen = value()?,
            "--socket" => a.socket = value()?,
            "--label" => a.labels.push(value()?),
            "--spare" => a.spare = Some(value()?),
            "--connect-timeout" => {
                let s = value()?;
                let secs: u64 = s
                    .parse()
                    .map_err(|_| format!("--connect-timeout {s}: whole seconds"))?;
                a.connect_timeout = Duration::from_secs(secs);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Registered labels and live connections.
#[derive(Default)]
struct State {
    labels: Vec<String>,
    /// Connections that registered at least one label and are still open.
    open: usize,
    /// Whether any connection ever registered.
    ever: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("kube") {
        std::process::exit(kube::main(std::env::args().skip(2)));
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fencecheck-reaper: {e}");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(&args.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fencecheck-reaper: cannot listen on {}: {e}", args.listen);
            std::process::exit(2);
        }
    };
    println!("{READY_LINE} on {}", args.listen);
    let shared: Shared = Arc::default();
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve(conn, &shared));
            }
        });
    }
    let labels = wait_for_the_end(&shared, &args);
    let docker = docker::Docker::new(&args.socket);
    let removed = reap(&docker, &labels, args.spare.as_deref());
    println!("reaped {removed} object(s) labelled {labels:?}; exiting");
}

/// Blocks until every registered connection has closed (or none came in time);
/// returns the labels to reap.
fn wait_for_the_end(shared: &Shared, args: &Args) -> Vec<String> {
    let (lock, cv) = &**shared;
    let deadline = Instant::now() + args.connect_timeout;
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if st.ever && st.open == 0 {
            println!("the harness has gone");
            return st.labels.clone();
        }
        if !st.ever {
            let now = Instant::now();
            if now >= deadline {
                println!("no harness connected in time");
                return args.labels.clone();
            }
            st = cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        } else {
            st = cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One harness connection: registers each `label=` line and answers ACK, until the
/// connection ends (EOF or any error: both mean the harness is gone).
fn serve(conn: TcpStream, shared: &Shared) {
    let (lock, cv) = &**shared;
    let mut registered = false;
    let mut out = match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
        let Some(label) = line.trim().strip_prefix("label=") else {
            let _ = out.write_all(b"ERR expected label=KEY=VALUE\n");
            continue;
        };
        {
            let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
            if !st.labels.iter().any(|l| l == label) {
                st.labels.push(label.to_string());
            }
            if !registered {
                registered = true;
                st.open += 1;
                st.ever = true;
            }
        }
        println!("watching {label}");
        if out.write_all(b"ACK\n").is_err() {
            break;
        }
    }
    if registered {
        let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
        st.open -= 1;
        cv.notify_all();
    }
}

/// Removes everything carrying one of `labels`, pass after pass, until a pass finds
/// nothing at least `SETTLE` after the first: a create the dead harness had sent
/// may still be completing in the engine when the first pass looks. Gives up after
/// `DEADLINE`. Returns how many objects were removed.
fn reap(d: &docker::Docker, labels: &[String], spare: Option<&str>) -> usize {
    const SETTLE: Duration = Duration::from_secs(2);
    const DEADLINE: Duration = Duration::from_secs(25);
    let start = Instant::now();
    let mut removed = 0;
    loop {
        let mut found = 0;
        for label in labels {
            match d.reap_pass(label, spare) {
                Ok(p) => {
                    found += p.found;
                    removed += p.removed;
                }
                Err(e) => {
                    eprintln!("fencecheck-reaper: {label}: {e}");
                    found += 1;
                }
            }
        }
        if found == 0 && start.elapsed() >= SETTLE {
            return removed;
        }
        if start.elapsed() >= DEADLINE {
            eprintln!("fencecheck-reaper: giving up with {found} object(s) left");
            return removed;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
