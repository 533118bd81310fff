//! One link's fault proxy, wherever it runs: in the harness's process
//! ([`Link::Here`]), or in a `fencecheck links serve` elsewhere — a pod on a
//! node that is not this machine — steered through a [`Ctl`] ([`Link::Away`]).
//! The nemesis asks both the same things (`faultproxy::ctl::Op`); a link away
//! answers through a round trip, and says so when it cannot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use faultproxy::ctl::Op;
use faultproxy::{Fault, Proxy, Stats};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};

/// How long one command may take to be answered.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long a new command line may take to be ready (`links ctl` waits 30 s
/// for the server).
const READY_WITHIN: Duration = Duration::from_secs(40);

type Reader = Lines<BufReader<Box<dyn AsyncRead + Send + Unpin>>>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// One command line to a `links serve`: what is written, what is read, and
/// what carries them (the exec), held for as long as they are used.
pub struct Pipe {
    pub w: Writer,
    pub r: Box<dyn AsyncRead + Send + Unpin>,
    pub carrier: Box<dyn std::any::Any + Send + Sync>,
}

/// Opens a new command line (another exec of `links ctl`).
pub type Open = Box<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Pipe>> + Send>>
        + Send
        + Sync,
>;

struct Line {
    w: Writer,
    r: Reader,
    _carrier: Box<dyn std::any::Any + Send + Sync>,
}

/// The command line to a `links serve`: one command and its answer at a time.
/// A line that breaks (an exec ended by the API server or a load balancer, a
/// command unanswered in time) is dropped and opened anew for the next
/// command, and the command is sent again unless it starts a proxy (an `add`
/// that was carried out but whose answer was lost must not bind twice).
pub struct Ctl {
    line: tokio::sync::Mutex<Option<Line>>,
    open: Open,
    /// Where the proxies are, for errors ("pod links").
    pub what: String,
    /// How many times the line was opened again after it broke.
    reopened: std::sync::atomic::AtomicU64,
}

impl Ctl {
    /// Opens the first line and waits until it is ready.
    pub async fn open(open: Open, what: String) -> Result<Arc<Ctl>> {
        let ctl = Arc::new(Ctl {
            line: tokio::sync::Mutex::new(None),
            open,
            what,
            reopened: std::sync::atomic::AtomicU64::new(0),
        });
        let first = ctl.fresh().await?;
        *ctl.line.lock().await = Some(first);
        Ok(ctl)
    }

    /// How many times the line broke and was opened again.
    pub fn reopened(&self) -> u64 {
        self.reopened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new line, once `links ctl` on it says [`super::serve::READY`]: it has
    /// reached the server and reads what is sent from now on.
    async fn fresh(&self) -> Result<Line> {
        let p = (self.open)().await?;
        let mut r = BufReader::new(p.r).lines();
        let first = tokio::time::timeout(READY_WITHIN, r.next_line())
            .await
            .map_err(|_| {
                anyhow!(
                    "{}: links ctl did not start within {READY_WITHIN:?}",
                    self.what
                )
            })?
            .with_context(|| format!("{}: links ctl", self.what))?
            .with_context(|| format!("{}: links ctl ended before it was ready", self.what))?;
        anyhow::ensure!(
            first.trim() == super::serve::READY,
            "{}: links ctl said {first:?} first",
            self.what
        );
        Ok(Line {
            w: p.w,
            r,
            _carrier: p.carrier,
        })
    }

    /// Sends `op` for proxy `i` and reads its answer.
    pub async fn ask(&self, i: usize, op: Op) -> Result<Option<Stats>> {
        let line = op.line(i);
        let answer = self.round_trip(&line, true).await?;
        faultproxy::ctl::parse_answer(&answer).map_err(|e| anyhow!("{}: {line:?}: {e}", self.what))
    }

    /// Starts one more proxy there, listening on `listen`: a link to `upstream`.
    pub async fn add(self: &Arc<Self>, listen: SocketAddr, upstream: SocketAddr) -> Result<Link> {
        let line = faultproxy::ctl::add_line(listen, upstream);
        let answer = self.round_trip(&line, false).await?;
        let index = answer
            .strip_prefix("ok ")
            .and_then(|i| i.trim().parse().ok())
            .ok_or_else(|| anyhow!("{}: {line:?}: {answer}", self.what))?;
        Ok(Link::Away {
            ctl: self.clone(),
            index,
            listen,
        })
    }

    async fn round_trip(&self, line: &str, again: bool) -> Result<String> {
        let mut held = self.line.lock().await;
        let first = match held.as_mut() {
            Some(l) => self.once(l, line).await,
            None => Err(anyhow!("{}: no command line", self.what)),
        };
        let e = match first {
            Ok(a) => return Ok(a),
            Err(e) => e,
        };
        // Broken or out of step: never used again.
        *held = None;
        let fresh = self
            .fresh()
            .await
            .with_context(|| format!("opening the command line again after: {e:#}"))?;
        self.reopened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let l = held.insert(fresh);
        if !again {
            bail!("{e:#} (the command line was opened again; not sent twice)");
        }
        self.once(l, line)
            .await
            .with_context(|| format!("sent again on a new command line after: {e:#}"))
    }

    async fn once(&self, l: &mut Line, line: &str) -> Result<String> {
        let round = async {
            l.w.write_all(format!("{line}\n").as_bytes()).await?;
            l.w.flush().await?;
            l.r.next_line().await
        };
        tokio::time::timeout(ANSWER_WITHIN, round)
            .await
            .map_err(|_| {
                anyhow!(
                    "{}: no answer to {line:?} within {ANSWER_WITHIN:?}",
                    self.what
                )
            })?
            .with_context(|| format!("{}: {line:?}", self.what))?
            .with_context(|| format!("{}: the command line closed at {line:?}", self.what))
    }
}

#[derive(Clone)]
pub enum Link {
    Here(Proxy),
    Away {
        ctl: Arc<Ctl>,
        /// Its index in the `links serve` that runs it.
        index: usize,
        /// Where it listens, as the workers reach it.
        listen: SocketAddr,
    },
}

impl Link {
    /// Where a client of the link connects.
    pub fn listen(&self) -> SocketAddr {
        match self {
            Link::Here(p) => p.local_addr(),
            Link::Away { listen, .. } => *listen,
        }
    }

    /// `op` on this link's proxy; the counters for [`Op::Stats`].
    pub async fn apply(&self, op: Op) -> Result<Option<Stats>> {
        match self {
            Link::Here(p) => Ok(faultproxy::ctl::apply(p, op)),
            Link::Away { ctl, index, .. } => ctl.ask(*index, op).await,
        }
    }

    pub async fn set(&self, f: Fault) -> Result<()> {
        self.apply(Op::Set(f)).await.map(drop)
    }

    pub async fn clear(&self) -> Result<()> {
        self.apply(Op::Clear).await.map(drop)
    }

    pub async fn stats(&self) -> Result<Stats> {
        match self.apply(Op::Stats).await? {
            Some(s) => Ok(s),
            None => bail!("a stats command answered without counters"),
        }
    }

    /// Where it runs, for a report: "harness" or the `Ctl`'s place.
    pub fn place(&self) -> &str {
        match self {
            Link::Here(_) => "harness",
            Link::Away { ctl, .. } => &ctl.what,
        }
    }

    /// Stops a proxy of the harness's (the proxies away go with their host).
    pub async fn shutdown(&self) {
        if let Link::Here(p) = self {
            p.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A real `links serve` (its socket server over real proxies) and a way
    /// to open command lines to it as `links ctl` does: a connection to the
    /// socket, `ready` first. Call `broken_first` of them opens a line that
    /// says `ready` and then breaks.
    async fn served(
        p: &Proxy,
        dir: &std::path::Path,
        broken_first: usize,
    ) -> (Open, Arc<AtomicUsize>) {
        let sock = dir.join("ctl.sock");
        let proxies = vec![p.clone()];
        let s2 = sock.clone();
        tokio::spawn(async move { faultproxy::ctl::serve_unix(proxies, &s2).await });
        let opened = Arc::new(AtomicUsize::new(0));
        let count = opened.clone();
        let open: Open = Box::new(move || {
            let sock = sock.clone();
            let n = count.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n < broken_first {
                    let (ours, mut theirs) = tokio::io::duplex(64);
                    theirs.write_all(b"ready\n").await?;
                    drop(theirs);
                    let (r, w) = tokio::io::split(ours);
                    return Ok(Pipe {
                        w: Box::new(w),
                        r: Box::new(r),
                        carrier: Box::new(()),
                    });
                }
                let conn = loop {
                    match tokio::net::UnixStream::connect(&sock).await {
                        Ok(c) => break c,
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                };
                let (r, w) = conn.into_split();
                let r = tokio::io::AsyncReadExt::chain(&b"ready\n"[..], r);
                Ok(Pipe {
                    w: Box::new(w),
                    r: Box::new(r),
                    carrier: Box::new(()),
                })
            })
        });
        (open, opened)
    }

    /// A proxy to a port nothing listens on (the tests count no bytes).
    async fn proxy() -> (Proxy, SocketAddr) {
        let up: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let p = Proxy::start("127.0.0.1:0".parse().unwrap(), up)
            .await
            .unwrap();
        (p, up)
    }

    #[tokio::test]
    async fn a_link_away_is_steered_as_one_here_is() {
        let dir = tempfile::tempdir().unwrap();
        let (p, up) = proxy().await;
        let listen = p.local_addr();
        let (open, _) = served(&p, dir.path(), 0).await;
        let ctl = Ctl::open(open, "pod links".into()).await.unwrap();
        let away = Link::Away {
            ctl: ctl.clone(),
            index: 0,
            listen,
        };
        away.set(Fault::Blackhole).await.unwrap();
        assert!(p.faults().upstream.blackhole);
        away.clear().await.unwrap();
        assert!(p.faults().upstream.is_clear());
        assert_eq!(away.stats().await.unwrap(), p.stats());
        let missing = Link::Away {
            ctl: ctl.clone(),
            index: 3,
            listen,
        };
        let e = missing.clear().await.unwrap_err().to_string();
        assert!(e.contains("pod links") && e.contains("no proxy 3"), "{e}");
        // A refusal is an answer: the line is not opened again for it.
        assert_eq!(ctl.reopened(), 0);
        let added = ctl.add("127.0.0.1:0".parse().unwrap(), up).await.unwrap();
        assert!(matches!(added, Link::Away { index: 1, .. }));
        assert_eq!(away.listen(), Link::Here(p).listen());
    }

    /// A line that breaks is opened again and the command sent again on it;
    /// an `add` is not sent twice.
    #[tokio::test]
    async fn a_broken_command_line_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let (p, up) = proxy().await;
        let (open, opened) = served(&p, dir.path(), 1).await;
        let ctl = Ctl::open(open, "pod links".into()).await.unwrap();
        let away = Link::Away {
            ctl: ctl.clone(),
            index: 0,
            listen: p.local_addr(),
        };
        away.set(Fault::Blackhole).await.unwrap();
        assert!(p.faults().upstream.blackhole, "set on the second line");
        assert_eq!((ctl.reopened(), opened.load(Ordering::SeqCst)), (1, 2));

        std::fs::create_dir_all(dir.path().join("b")).unwrap();
        let (open, _) = served(&p, &dir.path().join("b"), 1).await;
        let ctl = Ctl::open(open, "pod links".into()).await.unwrap();
        let Err(e) = ctl.add("127.0.0.1:0".parse().unwrap(), up).await else {
            panic!("an add on a broken line went through");
        };
        let e = format!("{e:#}");
        assert!(e.contains("not sent twice"), "{e}");
        assert_eq!(ctl.reopened(), 1);
        // The next command goes on the new line.
        let again = Link::Away {
            ctl,
            index: 0,
            listen: p.local_addr(),
        };
        again.clear().await.unwrap();
        assert!(p.faults().upstream.is_clear());
    }
}
