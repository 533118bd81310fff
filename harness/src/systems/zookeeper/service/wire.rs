//! Expiring a session the way ZooKeeper's own tests do: a second connection
//! resumes it (its id and password) and closes it; the ensemble then ends it
//! everywhere — ephemerals deleted, the owner's next request answered "expired" —
//! exactly as a timed-out session ends.
//!
//! The password is not asked of the worker: a ZooKeeper server derives it from the
//! session id alone (`ZooKeeperServer.generatePasswd`: `java.util.Random` seeded
//! with `id ^ 0xB3415C00`, 16 bytes) and checks a resume against that, so the
//! harness derives it too. A wrong password would be refused (a connect answer with
//! session id 0), which this module reports; the test suite checks that a real
//! session is ended this way. The crate the workers use cannot resume a session
//! from a bare id and password (its `SessionInfo` is opaque), hence the few jute
//! records written by hand here.

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `ZooKeeperServer.superSecret`.
const SUPER_SECRET: i64 = 0xB341_5C00;
/// `ZooDefs.OpCode.closeSession`.
const OP_CLOSE_SESSION: i32 = -11;

/// The password a ZooKeeper server gives session `id`.
pub fn session_password(id: i64) -> [u8; 16] {
    // java.util.Random, as specified in its javadoc.
    const MULT: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;
    let mut seed = ((id ^ SUPER_SECRET) as u64 ^ MULT) & MASK;
    let mut next_int = || {
        seed = (seed.wrapping_mul(MULT).wrapping_add(0xB)) & MASK;
        (seed >> 16) as u32
    };
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(4) {
        let mut rnd = next_int();
        for b in chunk {
            *b = rnd as u8;
            rnd >>= 8;
        }
    }
    out
}

/// Reads one length-prefixed frame.
async fn read_frame(s: &mut TcpStream) -> Result<Vec<u8>> {
    let len = s.read_i32().await.context("reading a frame length")?;
    if !(0..=1 << 20).contains(&len) {
        bail!("bad frame length {len}");
    }
    let mut buf = vec![0; len as usize];
    s.read_exact(&mut buf).await.context("reading a frame")?;
    Ok(buf)
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// What one attempt to close a session found.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// The member answered the closeSession.
    Yes,
    /// The member does not know the session (already ended, or wrong password).
    Refused,
}

/// Resumes `session` on member `addr` and closes it. The connect and the
/// closeSession go in one write: a live owner whose connection the resume cut
/// reconnects at once and would steal the session back (the server keeps one
/// connection per session) before a close sent after the connect answer. The
/// caller bounds the time and retries on an error.
pub async fn close_session(addr: SocketAddr, session: i64) -> Result<Closed> {
    let mut s = TcpStream::connect(addr).await.context("connect")?;
    // ConnectRequest: protocolVersion, lastZxidSeen (0: never "ahead" of the
    // server), timeOut, sessionId, passwd, readOnly.
    let mut req = Vec::with_capacity(45);
    req.extend_from_slice(&0i32.to_be_bytes());
    req.extend_from_slice(&0i64.to_be_bytes());
    req.extend_from_slice(&2000i32.to_be_bytes());
    req.extend_from_slice(&session.to_be_bytes());
    req.extend_from_slice(&16i32.to_be_bytes());
    req.extend_from_slice(&session_password(session));
    req.push(0);
    // RequestHeader { xid, type = closeSession }, no body.
    let mut close = 1i32.to_be_bytes().to_vec();
    close.extend_from_slice(&OP_CLOSE_SESSION.to_be_bytes());
    let mut both = frame(&req);
    both.extend_from_slice(&frame(&close));
    s.write_all(&both)
        .await
        .context("sending connect and close")?;
    // ConnectResponse: protocolVersion, timeOut, sessionId (0: refused), passwd.
    let resp = read_frame(&mut s).await.context(
        "no connect answer (the member may not be serving, or the owner took the session back)",
    )?;
    let got = resp
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_be_bytes)
        .context("short connect answer")?;
    if got != session {
        return Ok(Closed::Refused);
    }
    // ReplyHeader { xid, zxid, err }.
    let reply = read_frame(&mut s).await.context("no closeSession answer")?;
    let err = reply
        .get(12..16)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_be_bytes)
        .context("short closeSession answer")?;
    if err != 0 {
        bail!("closeSession answered error {err}");
    }
    Ok(Closed::Yes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_java_random_of_the_id() {
        // id ^ superSecret = 0: java.util.Random(0), whose first ints are the
        // well-known -1155484576, -723955400, 1033096058, -1690734402; nextBytes
        // lays each int out low byte first.
        let p = session_password(SUPER_SECRET);
        let ints: Vec<i32> = p
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(ints, [-1155484576, -723955400, 1033096058, -1690734402]);
    }
}
