//! One direction of one proxied connection.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::splice::{unsupported, Pipe};
use crate::{Counters, FaultState, Latency, LinkFaults, Way};

/// User-space buffer for small messages, faulted links, and platforms
/// without splice.
const BUF_SIZE: usize = 64 * 1024;
/// A splice at least this big means the link is still carrying bulk data.
const BULK_CHUNK: usize = 4 * 1024;
/// Cap on bytes held back by a latency fault; past it the pump stops reading
/// so the sender sees TCP backpressure instead of the proxy growing memory.
const MAX_QUEUED: usize = 8 << 20;

struct Delayed {
    due: Instant,
    data: Vec<u8>,
}

struct Pump<'a> {
    way: Way,
    cfg: LinkFaults,
    faults: watch::Receiver<FaultState>,
    counters: &'a Counters,
    queue: VecDeque<Delayed>,
    queued: usize,
    last_due: Option<Instant>,
    /// Earliest instant the bandwidth limiter lets the next byte out.
    next_free: Instant,
    rng: SplitMix64,
}

/// Copies `src` to `dst`, applying the faults configured for `way`, until
/// `src` reaches EOF (which is passed on as a write shutdown) or an I/O
/// error occurs.
pub(crate) async fn pump(
    src: &mut OwnedReadHalf,
    dst: &mut OwnedWriteHalf,
    way: Way,
    mut faults: watch::Receiver<FaultState>,
    counters: &Counters,
) -> io::Result<()> {
    let cfg = way.pick(&faults.borrow_and_update());
    let mut p = Pump {
        way,
        cfg,
        faults,
        counters,
        queue: VecDeque::new(),
        queued: 0,
        last_due: None,
        next_free: Instant::now(),
        rng: SplitMix64::new(),
    };
    // Small messages go through a user-space buffer (fewest syscalls, lowest
    // latency); once reads come back full the link is carrying bulk data and
    // switches to splice(2), which skips two memory copies per byte. A short
    // splice switches back.
    let mut buf: Vec<u8> = Vec::new();
    let mut pipe: Option<Pipe> = None;
    let mut can_splice = true;
    let mut bulk = false;
    let mut src_open = true;
    loop {
        if p.queue.is_empty() {
            if !src_open {
                break;
            }
            p.refresh();
            if bulk && p.cfg.is_clear() {
                if pipe.is_none() {
                    pipe = Pipe::new();
                }
                if let Some(pp) = &pipe {
                    match splice_step(&mut p, pp, src, dst, &mut buf).await {
                        Ok(0) => src_open = false,
                        Ok(n) => bulk = n >= BULK_CHUNK,
                        Err(e) if unsupported(&e) => can_splice = false,
                        Err(e) => return Err(e),
                    }
                    if can_splice {
                        continue;
                    }
                }
                bulk = false;
                can_splice = false;
                pipe = None;
            }
            let buf = ensure(&mut buf);
            let n = src.read(buf).await?;
            if n == 0 {
                src_open = false;
                continue;
            }
            bulk = can_splice && n == buf.len();
            p.on_read(&buf[..n], dst).await?;
        } else {
            let due = p.queue.front().map_or_else(Instant::now, |c| c.due);
            let buf = ensure(&mut buf);
            // Keep reading while chunks wait so each chunk's delay starts
            // when it arrives, not when the previous one was sent.
            tokio::select! {
                biased;
                _ = sleep_until(due) => p.flush_due(dst).await?,
                r = src.read(buf), if src_open && p.queued < MAX_QUEUED => {
                    let n = r?;
                    if n == 0 {
                        src_open = false;
                    } else {
                        p.on_read(&buf[..n], dst).await?;
                    }
                }
            }
        }
    }
    // A FIN is held back by a blackhole like any other byte, but it is not
    // lost: it goes out once the blackhole is lifted.
    loop {
        // changed() marks the new value seen, so read it unconditionally
        // rather than through refresh().
        p.cfg = p.way.pick(&p.faults.borrow_and_update());
        if !p.cfg.blackhole {
            break;
        }
        if p.faults.changed().await.is_err() {
            return Ok(());
        }
    }
    // The peer may already be gone; there is nobody left to tell.
    let _ = dst.shutdown().await;
    Ok(())
}

/// One splice round trip through the pipe: socket to pipe, then pipe to
/// socket (or through the slow path if a fault appeared meanwhile). Returns
/// the bytes taken from `src`, 0 at EOF.
async fn splice_step(
    p: &mut Pump<'_>,
    pipe: &Pipe,
    src: &OwnedReadHalf,
    dst: &mut OwnedWriteHalf,
    buf: &mut Vec<u8>,
) -> io::Result<usize> {
    let n = pipe.fill(src).await?;
    if n == 0 {
        return Ok(0);
    }
    p.refresh();
    if p.cfg.is_clear() {
        pipe.drain_to(dst, n).await.map_err(fatal)?;
        p.delivered(n);
        return Ok(n);
    }
    // A fault arrived while the bytes sat in the pipe: give them the same
    // treatment as bytes read afterwards.
    let buf = ensure(buf);
    let mut left = n;
    while left > 0 {
        let want = left.min(buf.len());
        let m = pipe.read_into(&mut buf[..want]).map_err(fatal)?;
        if m == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        left -= m;
        p.on_read(&buf[..m], dst).await.map_err(fatal)?;
    }
    Ok(n)
}

/// Once bytes are in the pipe, no error may be mistaken for "splice
/// unsupported, fall back to copying": dropping the pipe would lose them.
fn fatal(e: io::Error) -> io::Error {
    if unsupported(&e) {
        io::Error::other(e)
    } else {
        e
    }
}

fn ensure(buf: &mut Vec<u8>) -> &mut [u8] {
    if buf.is_empty() {
        buf.resize(BUF_SIZE, 0);
    }
    buf
}

impl Pump<'_> {
    fn refresh(&mut self) {
        if self.faults.has_changed().unwrap_or(false) {
            self.cfg = self.way.pick(&self.faults.borrow_and_update());
        }
    }

    async fn on_read(&mut self, data: &[u8], dst: &mut OwnedWriteHalf) -> io::Result<()> {
        let read_at = Instant::now();
        self.refresh();
        if self.cfg.blackhole {
            self.discard(data.len());
            return Ok(());
        }
        if let Some(lat) = self.cfg.latency {
            let wait = self.rng.delay(lat);
            if !wait.is_zero() {
                self.counters.delayed[self.way as usize]
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            self.enqueue(read_at + wait, data);
        } else if !self.queue.is_empty() {
            // Latency was just removed; queue behind the delayed chunks so
            // order is kept.
            self.enqueue(read_at, data);
        } else {
            self.write(dst, data).await?;
        }
        Ok(())
    }

    fn enqueue(&mut self, due: Instant, data: &[u8]) {
        let due = self.last_due.map_or(due, |last| due.max(last));
        self.last_due = Some(due);
        self.queued += data.len();
        self.queue.push_back(Delayed {
            due,
            data: data.to_vec(),
        });
    }

    async fn flush_due(&mut self, dst: &mut OwnedWriteHalf) -> io::Result<()> {
        let now = Instant::now();
        while self.queue.front().is_some_and(|c| c.due <= now) {
            let Some(chunk) = self.queue.pop_front() else {
                break;
            };
            self.queued -= chunk.data.len();
            self.refresh();
            if self.cfg.blackhole {
                self.discard(chunk.data.len());
            } else {
                self.write(dst, &chunk.data).await?;
            }
        }
        Ok(())
    }

    fn discard(&self, n: usize) {
        self.counters.dropped[self.way as usize].fetch_add(n as u64, Ordering::Relaxed);
    }

    fn delivered(&self, n: usize) {
        self.counters.bytes[self.way as usize].fetch_add(n as u64, Ordering::Relaxed);
    }

    async fn write(&mut self, dst: &mut OwnedWriteHalf, data: &[u8]) -> io::Result<()> {
        let Some(rate) = self.cfg.bandwidth else {
            dst.write_all(data).await?;
            self.delivered(data.len());
            return Ok(());
        };
        let rate = rate.max(1);
        // Pieces of ~10 ms worth keep bursts short at any rate.
        let piece = (rate / 100).clamp(1, BUF_SIZE as u64) as usize;
        for part in data.chunks(piece) {
            let now = Instant::now();
            // Idle time earns no credit: the budget restarts at `now`.
            let start = if self.next_free > now {
                sleep_until(self.next_free).await;
                self.next_free
            } else {
                now
            };
            dst.write_all(part).await?;
            self.delivered(part.len());
            let nanos = (part.len() as u128 * 1_000_000_000 / rate as u128) as u64;
            self.next_free = start + Duration::from_nanos(nanos);
        }
        Ok(())
    }
}

/// Small PRNG for jitter; statistical quality is irrelevant here and it keeps
/// the dependency list short.
struct SplitMix64(u64);

static SEED: AtomicU64 = AtomicU64::new(0);

impl SplitMix64 {
    fn new() -> Self {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        SplitMix64(t ^ n)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `latency ± jitter`, uniform, never negative.
    fn delay(&mut self, lat: Latency) -> Duration {
        let base = lat.latency.as_nanos().min(u64::MAX as u128) as u64;
        let j = lat.jitter.as_nanos().min((u64::MAX / 4) as u128) as u64;
        if j == 0 {
            return lat.latency;
        }
        let offset = self.next() % (2 * j + 1);
        Duration::from_nanos((base + offset).saturating_sub(j))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let mut rng = SplitMix64::new();
        let lat = Latency {
            latency: Duration::from_millis(50),
            jitter: Duration::from_millis(10),
        };
        let draws: Vec<Duration> = (0..10_000).map(|_| rng.delay(lat)).collect();
        assert!(draws
            .iter()
            .all(|d| *d >= Duration::from_millis(40) && *d <= Duration::from_millis(60)));
        let lo = draws
            .iter()
            .filter(|d| **d < Duration::from_millis(45))
            .count();
        let hi = draws
            .iter()
            .filter(|d| **d > Duration::from_millis(55))
            .count();
        assert!(lo > 1000 && hi > 1000, "lo={lo} hi={hi}");
    }

    #[test]
    fn jitter_larger_than_latency_clamps_at_zero() {
        let mut rng = SplitMix64::new();
        let lat = Latency {
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(5),
        };
        assert!((0..1000).any(|_| rng.delay(lat) == Duration::ZERO));
    }
}
