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

type Reader = Lines<BufReader<Box<dyn AsyncRead + Send + Unpin>>>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The command line to a `links serve`: one command and its answer at a time.
pub struct Ctl {
    io: tokio::sync::Mutex<(Writer, Reader)>,
    /// Where the proxies are, for errors ("pod links").
    pub what: String,
    /// What carries the lines (the exec), held for as long as they are used.
    _carrier: Box<dyn std::any::Any + Send + Sync>,
}

impl Ctl {
    pub fn new(
        w: Writer,
        r: Box<dyn AsyncRead + Send + Unpin>,
        carrier: Box<dyn std::any::Any + Send + Sync>,
        what: String,
    ) -> Arc<Ctl> {
        Arc::new(Ctl {
            io: tokio::sync::Mutex::new((w, BufReader::new(r).lines())),
            what,
            _carrier: carrier,
        })
    }

    /// Waits for `links ctl`'s first line, [`super::serve::READY`]: it has
    /// reached the server and reads what is sent from now on.
    pub async fn ready(&self, within: Duration) -> Result<()> {
        let mut io = self.io.lock().await;
        let line = tokio::time::timeout(within, io.1.next_line())
            .await
            .map_err(|_| anyhow!("{}: links ctl did not start within {within:?}", self.what))?
            .with_context(|| format!("{}: links ctl", self.what))?
            .with_context(|| format!("{}: links ctl ended before it was ready", self.what))?;
        anyhow::ensure!(
            line.trim() == super::serve::READY,
            "{}: links ctl said {line:?} first",
            self.what
        );
        Ok(())
    }

    /// Sends `op` for proxy `i` and reads its answer.
    pub async fn ask(&self, i: usize, op: Op) -> Result<Option<Stats>> {
        let line = op.line(i);
        let answer = self.round_trip(&line).await?;
        faultproxy::ctl::parse_answer(&answer).map_err(|e| anyhow!("{}: {line:?}: {e}", self.what))
    }

    /// Starts one more proxy there, listening on `listen`: a link to `upstream`.
    pub async fn add(self: &Arc<Self>, listen: SocketAddr, upstream: SocketAddr) -> Result<Link> {
        let line = faultproxy::ctl::add_line(listen, upstream);
        let answer = self.round_trip(&line).await?;
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

    async fn round_trip(&self, line: &str) -> Result<String> {
        let mut io = self.io.lock().await;
        let (w, r) = &mut *io;
        let round = async {
            w.write_all(format!("{line}\n").as_bytes()).await?;
            w.flush().await?;
            r.next_line().await
        };
        let answer = tokio::time::timeout(ANSWER_WITHIN, round)
            .await
            .map_err(|_| {
                anyhow!(
                    "{}: no answer to {line:?} within {ANSWER_WITHIN:?}",
                    self.what
                )
            })?
            .with_context(|| format!("{}: {line:?}", self.what))?
            .with_context(|| format!("{}: the command line closed at {line:?}", self.what))?;
        Ok(answer)
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

    /// A `links serve` stand-in on the other end of an in-memory pipe: the
    /// real answer function over real proxies, so what crosses is the protocol.
    #[tokio::test]
    async fn a_link_away_is_steered_as_one_here_is() {
        let up: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let p = Proxy::start("127.0.0.1:0".parse().unwrap(), up)
            .await
            .unwrap();
        let listen = p.local_addr();
        let (ours, theirs) = tokio::io::duplex(4096);
        let served = vec![p.clone()];
        tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(theirs);
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let a = faultproxy::ctl::answer(&served, &l);
                w.write_all(format!("{a}\n").as_bytes()).await.unwrap();
            }
        });
        let (r, w) = tokio::io::split(ours);
        let ctl = Ctl::new(Box::new(w), Box::new(r), Box::new(()), "pod links".into());
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
        // `add` needs a real links server (`serve_unix`); here it is refused
        // by the answer function, which does not know it, and says so.
        assert!(ctl.add(listen, up).await.is_err());
        assert!(e.contains("pod links") && e.contains("no proxy 3"), "{e}");
        assert_eq!(away.listen(), Link::Here(p).listen());
    }
}
