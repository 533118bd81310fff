//! `fencecheck links serve|ctl` (internal): the fault proxies of a run's links
//! hosted by a process of their own, in a pod on a node that is not the
//! harness's machine, so that traffic between the node's workers and members
//! stays on the node and the node need not reach the harness. The harness
//! steers them through an exec of `links ctl` into that pod (`faultproxy::ctl`'s
//! line protocol), which it keeps open for the run.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use faultproxy::Proxy;

/// Where `serve` answers, in the pod (its root: a `FROM scratch` image has no
/// /tmp).
pub const SOCKET: &str = "/fencecheck-links.sock";
/// What `ctl` prints first, once it has reached the server.
pub const READY: &str = "ready";
/// How long `ctl` waits for `serve`'s socket to appear.
const CTL_WAIT: Duration = Duration::from_secs(30);

/// One `LISTEN=UPSTREAM` argument.
pub fn parse_pair(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, u) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected LISTEN=UPSTREAM (host:port=host:port)"))?;
    let l = l
        .parse()
        .map_err(|e| format!("{s:?}: listen address {l:?}: {e}"))?;
    let u = u
        .parse()
        .map_err(|e| format!("{s:?}: upstream address {u:?}: {e}"))?;
    Ok((l, u))
}

/// Starts a proxy per pair, in order (their indexes in the commands), then
/// answers on `socket` until killed. A listen address that cannot be bound is
/// an error before the socket exists, so the controller never sees half a set.
pub async fn serve(socket: &Path, pairs: &[(SocketAddr, SocketAddr)]) -> Result<()> {
    let mut proxies = Vec::new();
    for (l, u) in pairs {
        proxies.push(
            Proxy::start(*l, *u)
                .await
                .with_context(|| format!("proxy {l} -> {u}"))?,
        );
    }
    eprintln!(
        "fencecheck links: {} proxies up, commands on {}",
        proxies.len(),
        socket.display()
    );
    faultproxy::ctl::serve_unix(proxies, socket)
        .await
        .with_context(|| format!("serving {}", socket.display()))?;
    Ok(())
}

/// Joins stdin and stdout to `socket` (waiting up to [`CTL_WAIT`] for it), until
/// stdin ends.
pub async fn ctl(socket: &Path) -> Result<()> {
    let t0 = std::time::Instant::now();
    let conn = loop {
        match tokio::net::UnixStream::connect(socket).await {
            Ok(c) => break c,
            Err(e) if t0.elapsed() > CTL_WAIT => {
                bail!(
                    "no links server at {} after {CTL_WAIT:?}: {e}",
                    socket.display()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    // The controller sends nothing before this line: what an exec's stdin
    // carries before the process runs may be lost on the way.
    {
        use tokio::io::AsyncWriteExt;
        let mut out = tokio::io::stdout();
        out.write_all(format!("{READY}\n").as_bytes()).await?;
        out.flush().await?;
    }
    let (mut r, mut w) = conn.into_split();
    // Stdin's end is the controller's: the server then ends this connection
    // once it has answered what it was sent, and the answers are printed.
    let up = async {
        use tokio::io::AsyncWriteExt;
        let mut stdin = tokio::io::stdin();
        tokio::io::copy(&mut stdin, &mut w).await?;
        w.shutdown().await
    };
    let down = async {
        let mut stdout = tokio::io::stdout();
        tokio::io::copy(&mut r, &mut stdout).await
    };
    tokio::pin!(down);
    // The server gone ends it too, whatever stdin does.
    tokio::select! {
        d = &mut down => { d.context("the links server to stdout")?; }
        u = up => {
            u.context("stdin to the links server")?;
            down.await.context("the links server to stdout")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_or_say_which_half_is_wrong() {
        let (l, u) = parse_pair("10.0.0.2:30000=10.0.0.2:2379").unwrap();
        assert_eq!(l.port(), 30000);
        assert_eq!(u.port(), 2379);
        assert!(parse_pair("10.0.0.2:30000")
            .unwrap_err()
            .contains("LISTEN=UPSTREAM"));
        assert!(parse_pair("x=10.0.0.2:1")
            .unwrap_err()
            .contains("listen address"));
        assert!(parse_pair("10.0.0.2:1=y")
            .unwrap_err()
            .contains("upstream address"));
    }
}
