//! A set of proxies steered by one-line commands instead of in-process calls:
//! for proxies that run where the harness is not (a pod on a node that is not
//! the harness's machine, which may not reach it). The proxies' host serves the
//! commands on a unix socket ([`serve_unix`]); the controller sends them over
//! whatever reaches that socket (an exec into the pod) and reads one answer
//! line per command ([`Op::line`], [`parse_answer`]).
//!
//! Commands (`I`: the proxy's index in the set, in the order it was started):
//! - `I set latency US JITTER_US`, `I set blackhole`, `I set bandwidth BPS`:
//!   the fault in both directions;
//! - `I clear` (both directions), `I clear-all`, `I reject on|off`, `I reset`;
//! - `I stats`: the proxy's counters;
//! - `add LISTEN UPSTREAM`: starts one more proxy; the answer is `ok I`, its
//!   index ([`serve_unix`] only: a set that grows while it is steered).
//!
//! Answers: `ok`, `ok` and the eleven counters of [`Stats`] in their declared
//! order (for `stats`), or `error WHY`.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{Direction, Fault, Proxy, Stats};

/// What one command asks of one proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The fault in both directions.
    Set(Fault),
    /// Every fault off, both directions.
    Clear,
    /// Every fault off, refusing new connections too.
    ClearAll,
    /// Refuse new connections (and keep refusing) or stop refusing.
    Reject(bool),
    /// Reset every connection it holds.
    Reset,
    Stats,
}

impl Op {
    /// The command line for proxy `i` (no newline).
    pub fn line(&self, i: usize) -> String {
        match self {
            Op::Set(Fault::Latency { latency, jitter }) => format!(
                "{i} set latency {} {}",
                latency.as_micros(),
                jitter.as_micros()
            ),
            Op::Set(Fault::Blackhole) => format!("{i} set blackhole"),
            Op::Set(Fault::Bandwidth { bytes_per_sec }) => {
                format!("{i} set bandwidth {bytes_per_sec}")
            }
            Op::Clear => format!("{i} clear"),
            Op::ClearAll => format!("{i} clear-all"),
            Op::Reject(on) => format!("{i} reject {}", if *on { "on" } else { "off" }),
            Op::Reset => format!("{i} reset"),
            Op::Stats => format!("{i} stats"),
        }
    }

    /// Parses a command line into the proxy's index and the op.
    pub fn parse(line: &str) -> Result<(usize, Op), String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let i: usize = w
            .first()
            .ok_or("empty command")?
            .parse()
            .map_err(|_| format!("expected a proxy index first, got {line:?}"))?;
        let num = |k: usize| -> Result<u64, String> {
            w.get(k)
                .ok_or_else(|| format!("{line:?}: missing a number"))?
                .parse()
                .map_err(|_| format!("{line:?}: expected a number at word {}", k + 1))
        };
        let op = match (w.get(1).copied(), w.get(2).copied()) {
            (Some("set"), Some("latency")) if w.len() == 5 => Op::Set(Fault::Latency {
                latency: Duration::from_micros(num(3)?),
                jitter: Duration::from_micros(num(4)?),
            }),
            (Some("set"), Some("blackhole")) if w.len() == 3 => Op::Set(Fault::Blackhole),
            (Some("set"), Some("bandwidth")) if w.len() == 4 => Op::Set(Fault::Bandwidth {
                bytes_per_sec: num(3)?,
            }),
            (Some("clear"), None) => Op::Clear,
            (Some("clear-all"), None) => Op::ClearAll,
            (Some("reject"), Some("on")) if w.len() == 3 => Op::Reject(true),
            (Some("reject"), Some("off")) if w.len() == 3 => Op::Reject(false),
            (Some("reset"), None) => Op::Reset,
            (Some("stats"), None) => Op::Stats,
            _ => return Err(format!("unknown command {line:?}")),
        };
        Ok((i, op))
    }
}

/// Carries out one command line on `proxies` and gives the answer line (no
/// newline).
pub fn answer(proxies: &[Proxy], line: &str) -> String {
    let (i, op) = match Op::parse(line) {
        Ok(x) => x,
        Err(e) => return format!("error {e}"),
    };
    let Some(p) = proxies.get(i) else {
        return format!("error no proxy {i} (there are {})", proxies.len());
    };
    match apply(p, op) {
        Some(s) => format!("ok {}", stats_words(&s)),
        None => "ok".into(),
    }
}

/// Carries out `op` on `p`; the counters for [`Op::Stats`].
pub fn apply(p: &Proxy, op: Op) -> Option<Stats> {
    match op {
        Op::Set(f) => p.set(Direction::Both, f),
        Op::Clear => p.clear(Direction::Both),
        Op::ClearAll => p.clear_all(),
        Op::Reject(on) => p.reject_new(on),
        Op::Reset => p.reset_connections(),
        Op::Stats => return Some(p.stats()),
    }
    None
}

fn stats_words(s: &Stats) -> String {
    [
        s.connections_accepted,
        s.connections_active,
        s.connections_rejected,
        s.connections_reset,
        s.upstream_connect_failures,
        s.bytes_upstream,
        s.bytes_downstream,
        s.bytes_dropped_upstream,
        s.bytes_dropped_downstream,
        s.bytes_delayed_upstream,
        s.bytes_delayed_downstream,
    ]
    .map(|n| n.to_string())
    .join(" ")
}

/// An answer line: `Ok(None)` for `ok`, `Ok(Some(stats))` for a `stats`
/// answer, `Err(why)` for `error WHY` or anything unreadable.
pub fn parse_answer(line: &str) -> Result<Option<Stats>, String> {
    let line = line.trim();
    if let Some(why) = line.strip_prefix("error") {
        return Err(why.trim().to_string());
    }
    let Some(rest) = line.strip_prefix("ok") else {
        return Err(format!("not an answer: {line:?}"));
    };
    let n: Vec<u64> = rest
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("not an answer: {line:?}"))?;
    match n.as_slice() {
        [] => Ok(None),
        [a, b, c, d, e, f, g, h, i, j, k] => Ok(Some(Stats {
            connections_accepted: *a,
            connections_active: *b,
            connections_rejected: *c,
            connections_reset: *d,
            upstream_connect_failures: *e,
            bytes_upstream: *f,
            bytes_downstream: *g,
            bytes_dropped_upstream: *h,
            bytes_dropped_downstream: *i,
            bytes_delayed_upstream: *j,
            bytes_delayed_downstream: *k,
        })),
        _ => Err(format!("a stats answer has 11 counters: {line:?}")),
    }
}

/// The command that starts one more proxy.
pub fn add_line(listen: std::net::SocketAddr, upstream: std::net::SocketAddr) -> String {
    format!("add {listen} {upstream}")
}

/// Carries out an `add` line: the new proxy's index, or why not.
async fn add(proxies: &tokio::sync::RwLock<Vec<Proxy>>, line: &str) -> String {
    let w: Vec<&str> = line.split_whitespace().collect();
    let (Some(l), Some(u), 3) = (
        w.get(1).and_then(|a| a.parse().ok()),
        w.get(2).and_then(|a| a.parse().ok()),
        w.len(),
    ) else {
        return format!("error expected add LISTEN UPSTREAM (host:port each), got {line:?}");
    };
    match Proxy::start(l, u).await {
        Ok(p) => {
            let mut all = proxies.write().await;
            all.push(p);
            format!("ok {}", all.len() - 1)
        }
        Err(e) => format!("error proxy {l} -> {u}: {e}"),
    }
}

/// Answers commands on a unix socket at `path` (replaced if it is there), one
/// connection at a time or several, a line each, until the process ends.
pub async fn serve_unix(proxies: Vec<Proxy>, path: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)?;
    let proxies = std::sync::Arc::new(tokio::sync::RwLock::new(proxies));
    loop {
        let (conn, _) = listener.accept().await?;
        let proxies = proxies.clone();
        tokio::spawn(async move {
            let (r, mut w) = conn.into_split();
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut a = if line.starts_with("add ") {
                    add(&proxies, &line).await
                } else {
                    answer(&proxies.read().await, &line)
                };
                a.push('\n');
                if w.write_all(a.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_reads_back_as_written() {
        let ops = [
            Op::Set(Fault::Latency {
                latency: Duration::from_millis(50),
                jitter: Duration::from_micros(2500),
            }),
            Op::Set(Fault::Blackhole),
            Op::Set(Fault::Bandwidth {
                bytes_per_sec: 1000,
            }),
            Op::Clear,
            Op::ClearAll,
            Op::Reject(true),
            Op::Reject(false),
            Op::Reset,
            Op::Stats,
        ];
        for op in ops {
            assert_eq!(Op::parse(&op.line(7)), Ok((7, op)), "{}", op.line(7));
        }
        assert!(Op::parse("x set blackhole").is_err());
        assert!(Op::parse("0 set latency 5").is_err());
        assert!(Op::parse("0 frobnicate").is_err());
    }

    #[test]
    fn answers_read_back() {
        let s = Stats {
            connections_accepted: 1,
            bytes_dropped_downstream: 9,
            bytes_delayed_downstream: 11,
            ..Stats::default()
        };
        assert_eq!(
            parse_answer(&format!("ok {}", stats_words(&s))),
            Ok(Some(s))
        );
        assert_eq!(parse_answer("ok"), Ok(None));
        assert_eq!(parse_answer("error no proxy 3"), Err("no proxy 3".into()));
        assert!(parse_answer("ok 1 2").is_err());
        assert!(parse_answer("").is_err());
    }

    #[tokio::test]
    async fn a_blackhole_set_by_command_drops_real_bytes() {
        use tokio::io::AsyncReadExt;
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = c.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let p = Proxy::start("127.0.0.1:0".parse().unwrap(), up)
            .await
            .unwrap();
        let dir = std::env::temp_dir().join(format!("faultproxy-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("ctl.sock");
        let served = vec![p.clone()];
        let s2 = sock.clone();
        tokio::spawn(async move { serve_unix(served, &s2).await });
        let conn = loop {
            match tokio::net::UnixStream::connect(&sock).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let (r, mut w) = conn.into_split();
        let mut lines = BufReader::new(r).lines();
        w.write_all(format!("{}\n", add_line("127.0.0.1:0".parse().unwrap(), up)).as_bytes())
            .await
            .unwrap();
        assert_eq!(lines.next_line().await.unwrap().unwrap(), "ok 1");
        w.write_all(b"add nowhere 127.0.0.1:1\n").await.unwrap();
        let refused = lines.next_line().await.unwrap().unwrap();
        assert!(refused.starts_with("error expected add"), "{refused}");
        let mut ask = async |line: String| {
            w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
            parse_answer(&lines.next_line().await.unwrap().unwrap())
        };
        assert_eq!(ask(Op::Set(Fault::Blackhole).line(0)).await, Ok(None));
        assert!(ask(Op::Stats.line(2)).await.is_err(), "no proxy 2");
        let mut c = tokio::net::TcpStream::connect(p.local_addr())
            .await
            .unwrap();
        c.write_all(b"hello").await.unwrap();
        // The bytes are read and dropped: poll the counters until they say so.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let dropped = loop {
            let s = ask(Op::Stats.line(0)).await.unwrap().unwrap();
            if s.bytes_dropped_upstream >= 5 || tokio::time::Instant::now() > deadline {
                break s.bytes_dropped_upstream;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(dropped, 5);
        assert_eq!(ask(Op::Clear.line(0)).await, Ok(None));
        c.write_all(b"again").await.unwrap();
        let mut back = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut back))
            .await
            .expect("echoed once the fault is off")
            .unwrap();
        assert_eq!(&back, b"again");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
