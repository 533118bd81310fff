//! End-to-end tests over real loopback sockets: a client, the proxy, and an
//! echo server, all on 127.0.0.1.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use faultproxy::{Direction, Fault, FaultKind, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Upper bound for things that must happen; generous because CI shares two
/// cores with other builds. Never used as a timing assertion.
const DEADLINE: Duration = Duration::from_secs(20);
/// How long "nothing arrives" is watched for.
const SILENCE: Duration = Duration::from_millis(300);

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn echo_server() -> Server {
    let listener = TcpListener::bind(any_port()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Server { addr, task }
}

/// Writes `greeting` to every connection, then echoes.
async fn greeting_server(greeting: &'static [u8]) -> Server {
    let listener = TcpListener::bind(any_port()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if s.write_all(greeting).await.is_ok() {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                }
            });
        }
    });
    Server { addr, task }
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {DEADLINE:?}"),
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let s = within("connect", TcpStream::connect(addr)).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    within("echo", s.read_exact(&mut back)).await.unwrap();
    back
}

async fn assert_roundtrip(s: &mut TcpStream, msg: &[u8]) {
    assert_eq!(roundtrip(s, msg).await, msg);
}

async fn assert_silent(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(SILENCE, s.read(&mut buf)).await {
        Err(_) => {}
        Ok(r) => panic!("expected silence, got {r:?} ({:?})", &buf[..]),
    }
}

/// The connection must end: EOF or an error, within the deadline. Returns
/// the error kind, if any.
async fn assert_closed(s: &mut TcpStream) -> Option<io::ErrorKind> {
    let mut buf = [0u8; 64];
    match within("close", s.read(&mut buf)).await {
        Ok(0) => None,
        Ok(n) => panic!("expected close, got {n} bytes"),
        Err(e) => Some(e.kind()),
    }
}

/// Polls `cond` until it holds or the deadline passes.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not true within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` and reads the same amount back concurrently.
async fn echo_bulk(s: TcpStream, data: Vec<u8>) -> Vec<u8> {
    let (mut r, mut w) = s.into_split();
    let len = data.len();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.unwrap();
        w
    });
    let mut back = vec![0u8; len];
    r.read_exact(&mut back).await.unwrap();
    drop(writer.await.unwrap());
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_through_many_concurrent_connections_and_large_payloads() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    const CONNS: usize = 32;
    const SIZE: usize = 2 << 20;
    let mut tasks = Vec::new();
    for i in 0..CONNS {
        let addr = proxy.local_addr();
        tasks.push(tokio::spawn(async move {
            let s = connect(addr).await;
            let data = pattern(i as u64, SIZE);
            let back = echo_bulk(s, data.clone()).await;
            assert!(back == data, "connection {i}: payload corrupted");
        }));
    }
    for t in tasks {
        within("bulk echo", t).await.unwrap();
    }
    assert_eq!(proxy.stats().connections_accepted, CONNS as u64);
    // A pump counts bytes after its write returns, which can be after the
    // client has already read them.
    let total = (CONNS * SIZE) as u64;
    eventually("byte counters catch up", || {
        let st = proxy.stats();
        st.bytes_upstream == total && st.bytes_downstream == total
    })
    .await;
    eventually("connections wind down", || {
        proxy.stats().connections_active == 0
    })
    .await;
}

#[tokio::test]
async fn half_close_is_forwarded() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    s.write_all(b"last words").await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    within("echo then EOF", s.read_to_end(&mut back))
        .await
        .unwrap();
    assert_eq!(back, b"last words");
}

#[tokio::test]
async fn latency_shows_up_in_round_trips() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut s, b"warm").await;

    let one_way = Duration::from_millis(50);
    proxy.set(
        Direction::Upstream,
        Fault::Latency {
            latency: one_way,
            jitter: Duration::ZERO,
        },
    );
    for _ in 0..3 {
        let t = Instant::now();
        assert_roundtrip(&mut s, b"ping").await;
        let rtt = t.elapsed();
        assert!(rtt >= one_way, "rtt {rtt:?} < {one_way:?}");
    }
    // Three pings of 4 bytes held back upstream; the echoes went straight back.
    let st = proxy.stats();
    assert_eq!(
        (st.bytes_delayed_upstream, st.bytes_delayed_downstream),
        (12, 0)
    );

    // Both directions: paid twice per round trip, also on new connections.
    proxy.set(
        Direction::Both,
        Fault::Latency {
            latency: Duration::from_millis(30),
            jitter: Duration::ZERO,
        },
    );
    let mut fresh = connect(proxy.local_addr()).await;
    for c in [&mut s, &mut fresh] {
        let t = Instant::now();
        assert_roundtrip(c, b"ping").await;
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(60), "rtt {rtt:?} < 60ms");
    }
    proxy.clear_all();
    assert_roundtrip(&mut s, b"healed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_keeps_order_and_minimum_delay() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let latency = Duration::from_millis(40);
    let jitter = Duration::from_millis(20);
    proxy.set(Direction::Both, Fault::Latency { latency, jitter });
    let s = connect(proxy.local_addr()).await;
    let (mut r, mut w) = s.into_split();

    // Many separate small writes, so the proxy sees many chunks whose drawn
    // delays differ by up to 2 * jitter; order must still hold.
    const MSGS: u32 = 200;
    let writer = tokio::spawn(async move {
        for i in 0..MSGS {
            w.write_all(&i.to_be_bytes()).await.unwrap();
            tokio::task::yield_now().await;
        }
        w
    });
    let t = Instant::now();
    let mut first = [0u8; 4];
    within("first echo", r.read_exact(&mut first))
        .await
        .unwrap();
    let floor = 2 * (latency - jitter);
    assert!(t.elapsed() >= floor, "first echo before {floor:?}");
    let mut rest = vec![0u8; (MSGS as usize - 1) * 4];
    within("all echoes", r.read_exact(&mut rest)).await.unwrap();
    let got: Vec<u32> = first
        .chunks(4)
        .chain(rest.chunks(4))
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..MSGS).collect::<Vec<_>>());
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn blackhole_swallows_then_heals_existing_and_new_connections() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut s, b"before").await;

    proxy.set(Direction::Upstream, Fault::Blackhole);
    s.write_all(b"lost").await.unwrap();
    assert_silent(&mut s).await;
    // Connections can still be opened; they just get no answers.
    let mut during = connect(proxy.local_addr()).await;
    during.write_all(b"also lost").await.unwrap();
    assert_silent(&mut during).await;
    eventually("bytes counted as dropped", || {
        proxy.stats().bytes_dropped_upstream == 13
    })
    .await;

    proxy.clear(Direction::Upstream);
    // Dropped bytes stay dropped: only the new request comes back.
    assert_roundtrip(&mut s, b"after").await;
    assert_roundtrip(&mut during, b"after too").await;
    let mut fresh = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut fresh, b"fresh").await;

    // Downstream: the request reaches the server, the answer does not.
    proxy.set(Direction::Downstream, Fault::Blackhole);
    s.write_all(b"unanswered").await.unwrap();
    assert_silent(&mut s).await;
    eventually("answer dropped", || {
        proxy.stats().bytes_dropped_downstream == 10
    })
    .await;
    proxy.clear_all();
    assert_roundtrip(&mut s, b"answered").await;
}

#[tokio::test]
async fn blackhole_holds_back_eof_until_healed() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut s, b"hi").await;
    proxy.set(Direction::Upstream, Fault::Blackhole);
    s.shutdown().await.unwrap();
    // The echo server would close on EOF; it must not have seen it.
    assert_silent(&mut s).await;
    proxy.clear_all();
    assert_eq!(assert_closed(&mut s).await, None);
}

#[tokio::test]
async fn reset_closes_live_connections_with_rst() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut conns = Vec::new();
    for i in 0..3u8 {
        let mut s = connect(proxy.local_addr()).await;
        assert_roundtrip(&mut s, &[i; 10]).await;
        conns.push(s);
    }
    proxy.reset_connections();
    for s in &mut conns {
        assert_eq!(assert_closed(s).await, Some(io::ErrorKind::ConnectionReset));
    }
    eventually("resets counted", || proxy.stats().connections_reset == 3).await;
    // An action, not a lasting fault.
    let mut fresh = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut fresh, b"still serving").await;
}

#[tokio::test]
async fn reject_refuses_new_connections_but_keeps_existing() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut old = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut old, b"old").await;

    proxy.reject_new(true);
    for _ in 0..3 {
        // The TCP handshake may complete (the kernel does it), but the
        // connection is reset before any byte is proxied.
        match TcpStream::connect(proxy.local_addr()).await {
            Err(_) => {}
            Ok(mut s) => {
                let _ = s.write_all(b"hello?").await;
                let closed = assert_closed(&mut s).await;
                assert!(
                    matches!(
                        closed,
                        Some(io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe)
                    ),
                    "rejected connection ended with {closed:?}"
                );
            }
        }
    }
    assert_roundtrip(&mut old, b"old still works").await;
    assert_eq!(proxy.stats().connections_rejected, 3);
    assert_eq!(proxy.stats().connections_accepted, 1);

    proxy.reject_new(false);
    let mut fresh = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut fresh, b"accepted again").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_limit_slows_bulk_transfer() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let rate: u64 = 2 << 20;
    proxy.set(
        Direction::Upstream,
        Fault::Bandwidth {
            bytes_per_sec: rate,
        },
    );
    let size = 1usize << 20;
    let data = pattern(7, size);
    let s = connect(proxy.local_addr()).await;
    let t = Instant::now();
    let back = within("limited transfer", echo_bulk(s, data.clone())).await;
    let elapsed = t.elapsed();
    assert!(back == data, "payload corrupted");
    // The limiter lets at most one ~10 ms piece out ahead of its budget.
    let floor = Duration::from_secs_f64((size as f64 - rate as f64 / 100.0) / rate as f64);
    assert!(
        elapsed >= floor,
        "1 MiB at {rate} B/s took {elapsed:?} < {floor:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_toggled_mid_bulk_transfer_keep_data_intact() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let size = 16usize << 20;
    let data = pattern(11, size);
    let s = connect(proxy.local_addr()).await;
    let (mut r, mut w) = s.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(256 * 1024) {
            w.write_all(chunk).await.unwrap();
        }
        w
    });
    let mut back = vec![0u8; size];
    let mut got = 0;
    let mut step = 0;
    while got < size {
        let n = within("bulk read", r.read(&mut back[got..])).await.unwrap();
        assert!(n > 0, "early EOF at {got}");
        got += n;
        // Switch between the spliced fast path and the delayed slow path
        // while bytes are in flight.
        let phase = got / (3 << 20);
        while step < phase {
            step += 1;
            if step % 2 == 1 {
                proxy.set(
                    Direction::Both,
                    Fault::Latency {
                        latency: Duration::from_millis(1),
                        jitter: Duration::from_micros(500),
                    },
                );
            } else {
                proxy.clear_all();
            }
        }
    }
    drop(within("writer", writer).await.unwrap());
    assert!(step >= 4, "only {step} fault toggles happened");
    assert!(back == data, "payload corrupted across fault changes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_dying_mid_bulk_transfer_resets_the_client() {
    // Reads 1 MiB, then goes away while the client is still streaming.
    let listener = TcpListener::bind(any_port()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        s.read_exact(&mut buf).await.unwrap();
        s.set_zero_linger().unwrap();
    });
    let proxy = Proxy::start(any_port(), addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    let chunk = vec![7u8; 256 * 1024];
    let streamed = within("client notices", async {
        let mut sent = 0usize;
        loop {
            match s.write_all(&chunk).await {
                Ok(()) => sent += chunk.len(),
                Err(e) => return (sent, e.kind()),
            }
            assert!(sent < 1 << 30, "writes never failed");
        }
    })
    .await;
    assert!(
        streamed.0 >= 1 << 20,
        "failed before the server read: {streamed:?}"
    );
    assert!(
        matches!(
            streamed.1,
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ),
        "{streamed:?}"
    );
    server.await.unwrap();
    eventually("connection torn down", || {
        proxy.stats().connections_active == 0
    })
    .await;
}

#[tokio::test]
async fn shutdown_stops_listening_and_closes_connections() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut s, b"hi").await;
    let other_handle = proxy.clone();
    within("shutdown", other_handle.shutdown()).await;
    assert_eq!(assert_closed(&mut s).await, None);
    let err = TcpStream::connect(proxy.local_addr()).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(proxy.stats().connections_active, 0);
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_proxy() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    let addr = proxy.local_addr();
    let mut s = connect(addr).await;
    assert_roundtrip(&mut s, b"hi").await;
    let clone = proxy.clone();
    drop(proxy);
    assert_roundtrip(&mut s, b"a clone keeps it alive").await;
    drop(clone);
    assert_eq!(assert_closed(&mut s).await, None);
    let end = Instant::now() + DEADLINE;
    loop {
        match TcpStream::connect(addr).await {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
            _ => assert!(Instant::now() < end, "listener still open"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn set_upstream_moves_new_connections_only() {
    let first = echo_server().await;
    let second = greeting_server(b"second").await;
    let proxy = Proxy::start(any_port(), first.addr).await.unwrap();
    let mut old = connect(proxy.local_addr()).await;
    assert_roundtrip(&mut old, b"first").await;

    proxy.set_upstream(second.addr);
    assert_eq!(proxy.upstream(), second.addr);
    let mut moved = connect(proxy.local_addr()).await;
    let mut greeting = [0u8; 6];
    within("greeting", moved.read_exact(&mut greeting))
        .await
        .unwrap();
    assert_eq!(&greeting, b"second");
    assert_roundtrip(&mut old, b"old stays on first").await;
}

#[tokio::test]
async fn unreachable_upstream_resets_the_client() {
    let gone = TcpListener::bind(any_port()).await.unwrap();
    let dead_addr = gone.local_addr().unwrap();
    drop(gone);
    let proxy = Proxy::start(any_port(), dead_addr).await.unwrap();
    let mut s = connect(proxy.local_addr()).await;
    assert_eq!(
        assert_closed(&mut s).await,
        Some(io::ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.stats().upstream_connect_failures, 1);
}

#[tokio::test]
async fn fault_state_is_reported() {
    let server = echo_server().await;
    let proxy = Proxy::start(any_port(), server.addr).await.unwrap();
    proxy.set(Direction::Downstream, Fault::Blackhole);
    proxy.set(
        Direction::Both,
        Fault::Bandwidth {
            bytes_per_sec: 1000,
        },
    );
    proxy.reject_new(true);
    let f = proxy.faults();
    assert!(f.downstream.blackhole && !f.upstream.blackhole);
    assert_eq!(f.upstream.bandwidth, Some(1000));
    assert_eq!(f.downstream.bandwidth, Some(1000));
    assert!(f.reject_new);
    proxy.remove(Direction::Downstream, Fault::Blackhole.kind());
    let f = proxy.faults();
    assert!(!f.downstream.blackhole);
    assert_eq!(f.downstream.bandwidth, Some(1000));
    proxy.set(Direction::Downstream, Fault::Blackhole);
    proxy.remove(Direction::Upstream, FaultKind::Bandwidth);
    assert_eq!(proxy.faults().upstream.bandwidth, None);
    assert!(proxy.faults().downstream.blackhole);
    proxy.set(
        Direction::Upstream,
        Fault::Bandwidth {
            bytes_per_sec: 1000,
        },
    );
    proxy.clear(Direction::Downstream);
    let f = proxy.faults();
    assert!(f.downstream.is_clear());
    assert_eq!(f.upstream.bandwidth, Some(1000));
    proxy.clear_all();
    assert_eq!(proxy.faults(), Default::default());
}
