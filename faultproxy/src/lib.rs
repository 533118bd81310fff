//! Fault-injecting L4 TCP proxy for fencecheck's nemesis.
//!
//! The kernel on the test machines has no netem, so faults between cluster
//! members (and between clients and the cluster) are injected by putting one
//! [`Proxy`] in front of every link and steering it in-process.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use faultproxy::{Direction, Fault, Proxy};
//! use std::time::Duration;
//!
//! let upstream = "127.0.0.1:2379".parse().unwrap();
//! let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), upstream).await?;
//! // clients dial proxy.local_addr() instead of the upstream
//! proxy.set(Direction::Both, Fault::Latency { latency: Duration::from_millis(50), jitter: Duration::from_millis(5) });
//! proxy.set(Direction::Upstream, Fault::Blackhole);
//! proxy.clear_all();
//! proxy.reset_connections();
//! proxy.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! See the crate README for the exact fault semantics.

pub mod bench;
pub mod ctl;
mod pump;
#[cfg(target_os = "linux")]
mod splice;
#[cfg(not(target_os = "linux"))]
mod splice {
    //! No splice(2): every link takes the copying path.
    use std::io;
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

    pub(crate) fn unsupported(_: &io::Error) -> bool {
        true
    }

    pub(crate) enum Pipe {}

    impl Pipe {
        pub(crate) fn new() -> Option<Pipe> {
            None
        }
        pub(crate) async fn fill(&self, _: &OwnedReadHalf) -> io::Result<usize> {
            match *self {}
        }
        pub(crate) async fn drain_to(&self, _: &OwnedWriteHalf, _: usize) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn read_into(&self, _: &mut [u8]) -> io::Result<usize> {
            match *self {}
        }
    }
}

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Which way bytes flow through a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to server (proxy's accepted side to the upstream).
    Upstream,
    /// Server to client.
    Downstream,
    /// Both of the above.
    Both,
}

impl Direction {
    fn covers_upstream(self) -> bool {
        matches!(self, Direction::Upstream | Direction::Both)
    }
    fn covers_downstream(self) -> bool {
        matches!(self, Direction::Downstream | Direction::Both)
    }
}

/// A fault that applies to one direction of every connection of a proxy.
///
/// Faults of different kinds combine (latency + bandwidth, say); setting a
/// fault of a kind already present replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every chunk read is forwarded `latency ± jitter` (uniform) after it
    /// was read. Delays are measured from the read, so they do not add up
    /// across chunks; order is preserved (a chunk never overtakes an earlier
    /// one, so with jitter some chunks wait a little longer than drawn).
    Latency { latency: Duration, jitter: Duration },
    /// Bytes are read and discarded; connections stay open. Discarded bytes
    /// are never delivered, even after the fault is cleared.
    Blackhole,
    /// Forwarding is paced to at most this many bytes per second (bursts of
    /// at most ~10 ms worth of bytes).
    Bandwidth { bytes_per_sec: u64 },
}

/// The kind of a [`Fault`], for removing one fault and keeping the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    Latency,
    Blackhole,
    Bandwidth,
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Latency { .. } => FaultKind::Latency,
            Fault::Blackhole => FaultKind::Blackhole,
            Fault::Bandwidth { .. } => FaultKind::Bandwidth,
        }
    }
}

/// Latency fault parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    pub latency: Duration,
    pub jitter: Duration,
}

/// Faults active in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkFaults {
    pub latency: Option<Latency>,
    pub blackhole: bool,
    pub bandwidth: Option<u64>,
}

impl LinkFaults {
    fn apply(&mut self, fault: Fault) {
        match fault {
            Fault::Latency { latency, jitter } => self.latency = Some(Latency { latency, jitter }),
            Fault::Blackhole => self.blackhole = true,
            Fault::Bandwidth { bytes_per_sec } => self.bandwidth = Some(bytes_per_sec),
        }
    }

    fn remove(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::Latency => self.latency = None,
            FaultKind::Blackhole => self.blackhole = false,
            FaultKind::Bandwidth => self.bandwidth = None,
        }
    }

    /// True when bytes may be copied straight through.
    pub fn is_clear(&self) -> bool {
        *self == LinkFaults::default()
    }
}

/// Snapshot of every fault configured on a proxy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultState {
    pub upstream: LinkFaults,
    pub downstream: LinkFaults,
    /// New connections are accepted and immediately reset.
    pub reject_new: bool,
}

/// Counters since the proxy started. Byte counts are bytes delivered to the
/// far side; dropped counts are bytes swallowed by a blackhole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub connections_accepted: u64,
    pub connections_active: u64,
    pub connections_rejected: u64,
    pub connections_reset: u64,
    /// Accepted connections whose upstream could not be dialled.
    pub upstream_connect_failures: u64,
    pub bytes_upstream: u64,
    pub bytes_downstream: u64,
    pub bytes_dropped_upstream: u64,
    pub bytes_dropped_downstream: u64,
    /// Bytes a latency fault held back for a while (counted when read, before
    /// they are delivered); a zero draw holds nothing back and is not counted.
    pub bytes_delayed_upstream: u64,
    pub bytes_delayed_downstream: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conns accepted={} active={} rejected={} reset={} dial_failed={} | bytes up={} down={} dropped up={} down={} delayed up={} down={}",
            self.connections_accepted,
            self.connections_active,
            self.connections_rejected,
            self.connections_reset,
            self.upstream_connect_failures,
            self.bytes_upstream,
            self.bytes_downstream,
            self.bytes_dropped_upstream,
            self.bytes_dropped_downstream,
            self.bytes_delayed_upstream,
            self.bytes_delayed_downstream,
        )
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    accepted: AtomicU64,
    active: AtomicU64,
    rejected: AtomicU64,
    reset: AtomicU64,
    dial_failed: AtomicU64,
    pub(crate) bytes: [AtomicU64; 2],
    pub(crate) dropped: [AtomicU64; 2],
    pub(crate) delayed: [AtomicU64; 2],
}

/// Index into per-direction counters: 0 = upstream, 1 = downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    Up = 0,
    Down = 1,
}

impl Way {
    pub(crate) fn pick(self, state: &FaultState) -> LinkFaults {
        match self {
            Way::Up => state.upstream,
            Way::Down => state.downstream,
        }
    }
}

struct Shared {
    upstream: Mutex<SocketAddr>,
    counters: Counters,
}

/// The control side. Dropping the last handle (i.e. the last [`Proxy`]
/// clone) drops the watch senders, which is what tells the tasks to stop.
struct Control {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    faults: watch::Sender<FaultState>,
    resets: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    accept_task: Mutex<Option<JoinHandle<()>>>,
}

/// Handle to a running proxy. Cheap to clone; every clone steers the same
/// proxy. When the last clone is dropped the proxy stops accepting and closes
/// its connections (in the background; use [`Proxy::shutdown`] to wait).
#[derive(Clone)]
pub struct Proxy {
    ctl: Arc<Control>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("local_addr", &self.ctl.local_addr)
            .field("upstream", &self.upstream())
            .field("faults", &self.faults())
            .finish()
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing holding these locks can leave the value half-updated.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Proxy {
    /// Binds `listen` (port 0 picks a free port) and starts forwarding every
    /// accepted connection to `upstream`. Must be called inside a tokio
    /// runtime; the proxy's tasks run on that runtime.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            counters: Counters::default(),
        });
        let (faults, faults_rx) = watch::channel(FaultState::default());
        let (resets, resets_rx) = watch::channel(0u64);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            listener,
            shared.clone(),
            faults_rx,
            resets_rx,
            shutdown_rx,
        ));
        Ok(Proxy {
            ctl: Arc::new(Control {
                shared,
                local_addr,
                faults,
                resets,
                shutdown,
                accept_task: Mutex::new(Some(task)),
            }),
        })
    }

    /// The address clients should dial.
    pub fn local_addr(&self) -> SocketAddr {
        self.ctl.local_addr
    }

    /// Where new connections are forwarded.
    pub fn upstream(&self) -> SocketAddr {
        *lock(&self.ctl.shared.upstream)
    }

    /// Forward new connections to `addr` (existing ones keep their upstream).
    pub fn set_upstream(&self, addr: SocketAddr) {
        *lock(&self.ctl.shared.upstream) = addr;
    }

    /// Adds `fault` in `direction`, replacing a fault of the same kind. Takes
    /// effect on existing and new connections from the next chunk read.
    pub fn set(&self, direction: Direction, fault: Fault) {
        self.ctl.faults.send_modify(|s| {
            if direction.covers_upstream() {
                s.upstream.apply(fault);
            }
            if direction.covers_downstream() {
                s.downstream.apply(fault);
            }
        });
    }

    /// Removes the fault of `kind` in `direction`, keeping the others.
    pub fn remove(&self, direction: Direction, kind: FaultKind) {
        self.ctl.faults.send_modify(|s| {
            if direction.covers_upstream() {
                s.upstream.remove(kind);
            }
            if direction.covers_downstream() {
                s.downstream.remove(kind);
            }
        });
    }

    /// Removes every fault in `direction`.
    pub fn clear(&self, direction: Direction) {
        self.ctl.faults.send_modify(|s| {
            if direction.covers_upstream() {
                s.upstream = LinkFaults::default();
            }
            if direction.covers_downstream() {
                s.downstream = LinkFaults::default();
            }
        });
    }

    /// Removes every fault, including [`Proxy::reject_new`].
    pub fn clear_all(&self) {
        self.ctl.faults.send_replace(FaultState::default());
    }

    /// While on, new connections are accepted and immediately reset (RST);
    /// existing connections are untouched.
    pub fn reject_new(&self, on: bool) {
        self.ctl.faults.send_modify(|s| s.reject_new = on);
    }

    /// Current fault configuration.
    pub fn faults(&self) -> FaultState {
        *self.ctl.faults.borrow()
    }

    /// Aborts every connection established before this call: both of its
    /// sockets are closed with SO_LINGER 0, so both peers see a RST. The
    /// proxy keeps accepting; this is an action, not a lasting fault.
    pub fn reset_connections(&self) {
        self.ctl.resets.send_modify(|g| *g += 1);
    }

    /// Counters since start; see [`Stats`].
    pub fn stats(&self) -> Stats {
        let c = &self.ctl.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            connections_accepted: get(&c.accepted),
            connections_active: get(&c.active),
            connections_rejected: get(&c.rejected),
            connections_reset: get(&c.reset),
            upstream_connect_failures: get(&c.dial_failed),
            bytes_upstream: get(&c.bytes[0]),
            bytes_downstream: get(&c.bytes[1]),
            bytes_dropped_upstream: get(&c.dropped[0]),
            bytes_dropped_downstream: get(&c.dropped[1]),
            bytes_delayed_upstream: get(&c.delayed[0]),
            bytes_delayed_downstream: get(&c.delayed[1]),
        }
    }

    /// Stops accepting (the listening socket is closed), closes every
    /// connection (plain close, FIN), and waits until all of the proxy's
    /// tasks have finished. Affects every clone of this handle.
    pub async fn shutdown(&self) {
        self.ctl.shutdown.send_replace(true);
        let task = lock(&self.ctl.accept_task).take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    faults: watch::Receiver<FaultState>,
    resets: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    let conn_shutdown = shutdown.clone();
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut shutdown) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            res = listener.accept() => {
                let client = match res {
                    Ok((client, _)) => client,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "faultproxy accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                if faults.borrow().reject_new {
                    shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    abort(&client);
                    continue;
                }
                shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
                let upstream = *lock(&shared.upstream);
                // Subscribing here, before the task runs, means a reset issued
                // after accept() returned also covers this connection.
                let mut resets = resets.clone();
                resets.mark_unchanged();
                conns.spawn(run_connection(
                    client,
                    upstream,
                    shared.clone(),
                    faults.clone(),
                    resets,
                    conn_shutdown.clone(),
                ));
            }
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Resolves once shutdown was requested or every handle is gone.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // Err means every handle was dropped, which is a stop request too.
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Close with RST rather than FIN.
fn abort(stream: &TcpStream) {
    if let Err(e) = stream.set_zero_linger() {
        tracing::debug!(error = %e, "SO_LINGER 0 failed; closing normally");
    }
}

struct ActiveGuard<'a>(&'a Counters);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn run_connection(
    client: TcpStream,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    faults: watch::Receiver<FaultState>,
    mut resets: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let counters = &shared.counters;
    counters.active.fetch_add(1, Ordering::Relaxed);
    let _active = ActiveGuard(counters);

    let dial = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream));
    let dialled = tokio::select! {
        r = dial => r,
        // A reset or shutdown must not wait for a slow dial.
        r = resets.changed() => {
            if r.is_ok() {
                counters.reset.fetch_add(1, Ordering::Relaxed);
                abort(&client);
            }
            return;
        }
        _ = stopped(&mut shutdown) => return,
    };
    let server = match dialled {
        Ok(Ok(s)) => s,
        res => {
            let err = match res {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_string(),
            };
            tracing::debug!(%upstream, error = %err, "faultproxy upstream dial failed");
            counters.dial_failed.fetch_add(1, Ordering::Relaxed);
            // Look like a refused connection to the client.
            abort(&client);
            return;
        }
    };
    // Latency through the proxy matters more than segment count.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let outcome = {
        let up = pump::pump(&mut cr, &mut sw, Way::Up, faults.clone(), counters);
        let down = pump::pump(&mut sr, &mut cw, Way::Down, faults, counters);
        tokio::select! {
            r = async { tokio::try_join!(up, down) } => match r {
                Ok(_) => Outcome::Done,
                Err(_) => Outcome::Failed,
            },
            r = resets.changed() => match r {
                Ok(()) => Outcome::Reset,
                Err(_) => Outcome::Shutdown,
            },
            _ = stopped(&mut shutdown) => Outcome::Shutdown,
        }
    };
    match outcome {
        Outcome::Done | Outcome::Shutdown => {}
        Outcome::Reset | Outcome::Failed => {
            // A failed side (peer reset, broken pipe) is passed on as a reset
            // so the other peer does not mistake it for a clean close.
            if outcome == Outcome::Reset {
                counters.reset.fetch_add(1, Ordering::Relaxed);
            }
            abort(cr.as_ref());
            abort(sr.as_ref());
            // Dropping a write half normally sends FIN first; the peer should
            // see only the RST.
            cw.forget();
            sw.forget();
        }
    }
}

#[derive(PartialEq, Eq)]
enum Outcome {
    Done,
    Failed,
    Reset,
    Shutdown,
}
