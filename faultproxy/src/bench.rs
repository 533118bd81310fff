//! Loopback benchmark: what does a fault-free proxy cost?
//!
//! The proxy runs on the caller's runtime; the echo/sink servers and the
//! clients run on their own OS threads with blocking sockets, standing in
//! for the separate processes the proxy sits between in fencecheck. All of
//! them share the machine's cores, as they do in a real run.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::Proxy;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Timed ping-pong round trips per path.
    pub round_trips: usize,
    /// Untimed round trips first, to warm caches and the scheduler.
    pub warmup_round_trips: usize,
    /// Ping size in bytes.
    pub message_size: usize,
    /// Bytes sent per bulk transfer.
    pub bulk_bytes: u64,
    /// Bulk transfers per path; the median is reported.
    pub bulk_runs: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            round_trips: 20_000,
            warmup_round_trips: 2_000,
            message_size: 64,
            bulk_bytes: 1 << 30,
            bulk_runs: 5,
        }
    }
}

/// Round-trip latency distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttFigures {
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
}

/// Results of [`bench()`].
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub options: BenchOptions,
    pub direct_rtt: RttFigures,
    pub proxied_rtt: RttFigures,
    /// Median bulk throughput, in MB/s (10^6 bytes per second).
    pub direct_mbps: f64,
    pub proxied_mbps: f64,
    /// Process CPU time (user + system) per GB moved in the bulk runs; None
    /// where the platform does not report it. Shows how close the box was
    /// to CPU-bound: on 2 cores the proxy's extra socket hops compete with
    /// the client and server for the same cores.
    pub direct_cpu_s_per_gb: Option<f64>,
    pub proxied_cpu_s_per_gb: Option<f64>,
    /// Logical CPUs the process could see, for context.
    pub cpus: usize,
}

impl BenchReport {
    /// Extra p50 round-trip time due to the proxy (zero if none measured).
    pub fn added_p50(&self) -> Duration {
        self.proxied_rtt.p50.saturating_sub(self.direct_rtt.p50)
    }

    /// Proxied throughput as a fraction of direct.
    pub fn throughput_ratio(&self) -> f64 {
        if self.direct_mbps > 0.0 {
            self.proxied_mbps / self.direct_mbps
        } else {
            0.0
        }
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "faultproxy loopback bench ({} cpus; {} x {} B round trips; {} x {} MiB bulk, median)",
            self.cpus,
            o.round_trips,
            o.message_size,
            o.bulk_runs,
            o.bulk_bytes >> 20
        )?;
        writeln!(
            f,
            "{:<10} {:>12} {:>12} {:>12} {:>10} {:>12}",
            "path", "rtt p50 us", "rtt p99 us", "rtt mean us", "bulk MB/s", "cpu s/GB"
        )?;
        for (name, rtt, mbps, cpu) in [
            (
                "direct",
                &self.direct_rtt,
                self.direct_mbps,
                self.direct_cpu_s_per_gb,
            ),
            (
                "proxied",
                &self.proxied_rtt,
                self.proxied_mbps,
                self.proxied_cpu_s_per_gb,
            ),
        ] {
            let cpu = cpu.map_or_else(|| "-".to_string(), |c| format!("{c:.2}"));
            writeln!(
                f,
                "{:<10} {:>12.1} {:>12.1} {:>12.1} {:>10.0} {:>12}",
                name,
                us(rtt.p50),
                us(rtt.p99),
                us(rtt.mean),
                mbps,
                cpu
            )?;
        }
        write!(
            f,
            "added p50: {:.1} us; proxied/direct throughput: {:.0}%",
            us(self.added_p50()),
            self.throughput_ratio() * 100.0
        )
    }
}

/// A blocking server on its own OS threads. In fencecheck the proxy's peers
/// are separate processes (etcd, the storage service, clients), so the bench
/// keeps them off the proxy's runtime as well.
struct ThreadServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
}

impl ThreadServer {
    fn start(handler: fn(std::net::TcpStream)) -> io::Result<ThreadServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        // Connection threads end when their client hangs up.
                        let _ = thread::Builder::new()
                            .name("bench-conn".into())
                            .spawn(move || handler(conn));
                    }
                }
            })?;
        Ok(ThreadServer {
            addr,
            stop,
            accept: Some(accept),
        })
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept so it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn echo(mut s: std::net::TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

/// Reads until EOF, then answers with the byte count (u64, big endian), so
/// the sender's clock stops only when every byte has arrived.
fn sink(mut s: std::net::TcpStream) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(_) => return,
        }
    }
    let _ = s.write_all(&total.to_be_bytes());
}

fn measure_rtt(addr: SocketAddr, opts: &BenchOptions) -> io::Result<RttFigures> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let msg = vec![0x5au8; opts.message_size.max(1)];
    let mut back = vec![0u8; msg.len()];
    for _ in 0..opts.warmup_round_trips {
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
    }
    let mut samples = Vec::with_capacity(opts.round_trips);
    for _ in 0..opts.round_trips.max(1) {
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let sum: Duration = samples.iter().sum();
    Ok(RttFigures {
        p50: pick(0.50),
        p99: pick(0.99),
        mean: sum / samples.len() as u32,
    })
}

fn measure_bulk(addr: SocketAddr, bytes: u64) -> io::Result<f64> {
    let mut s = std::net::TcpStream::connect(addr)?;
    let buf = vec![0xa5u8; 256 * 1024];
    let t = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        s.write_all(&buf[..n])?;
        left -= n as u64;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let mut ack = [0u8; 8];
    s.read_exact(&mut ack)?;
    let secs = t.elapsed().as_secs_f64();
    let got = u64::from_be_bytes(ack);
    if got != bytes {
        return Err(io::Error::other(format!(
            "sink received {got} of {bytes} bytes"
        )));
    }
    Ok(bytes as f64 / 1e6 / secs)
}

/// Runs a blocking client on its own named thread, off the runtime, so the
/// proxy's workers stay free and profiles tell the parties apart.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    rx.await
        .map_err(|_| io::Error::other("bench client thread panicked"))?
}

#[cfg(target_os = "linux")]
fn cpu_seconds() -> Option<f64> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru is valid for writes of one rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: getrusage succeeded and filled it in.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

#[cfg(not(target_os = "linux"))]
fn cpu_seconds() -> Option<f64> {
    None
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Measures round-trip latency and bulk throughput on loopback, directly and
/// through a fault-free [`Proxy`]. Run it on a multi-threaded runtime in a
/// release build; a debug build measures the debug build.
pub async fn bench(opts: BenchOptions) -> io::Result<BenchReport> {
    let echo = ThreadServer::start(echo)?;
    let sink = ThreadServer::start(sink)?;
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let echo_proxy = Proxy::start(loopback, echo.addr).await?;
    let sink_proxy = Proxy::start(loopback, sink.addr).await?;

    let (direct_addr, proxied_addr) = (echo.addr, echo_proxy.local_addr());
    let o = opts.clone();
    let direct_rtt = blocking(move || measure_rtt(direct_addr, &o)).await?;
    let o = opts.clone();
    let proxied_rtt = blocking(move || measure_rtt(proxied_addr, &o)).await?;

    // Interleaved so a noisy neighbour hurts both paths alike.
    let mut direct = Vec::new();
    let mut proxied = Vec::new();
    let (mut direct_cpu, mut proxied_cpu) = (Some(0.0), Some(0.0));
    for _ in 0..opts.bulk_runs.max(1) {
        let c0 = cpu_seconds();
        let (addr, bytes) = (sink.addr, opts.bulk_bytes);
        direct.push(blocking(move || measure_bulk(addr, bytes)).await?);
        let c1 = cpu_seconds();
        let addr = sink_proxy.local_addr();
        proxied.push(blocking(move || measure_bulk(addr, bytes)).await?);
        let c2 = cpu_seconds();
        direct_cpu = direct_cpu.zip(c0.zip(c1)).map(|(acc, (a, b))| acc + b - a);
        proxied_cpu = proxied_cpu.zip(c1.zip(c2)).map(|(acc, (a, b))| acc + b - a);
    }
    let gb = opts.bulk_runs.max(1) as f64 * opts.bulk_bytes as f64 / 1e9;

    echo_proxy.shutdown().await;
    sink_proxy.shutdown().await;
    Ok(BenchReport {
        options: opts,
        direct_rtt,
        proxied_rtt,
        direct_mbps: median(direct),
        proxied_mbps: median(proxied),
        direct_cpu_s_per_gb: direct_cpu.map(|c| c / gb),
        proxied_cpu_s_per_gb: proxied_cpu.map(|c| c / gb),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
    })
}
