//! ZooKeeper behind the seams, against real ZooKeeper 3.8 members started from
//! `ZkDeploy`'s member specs (Debian's jars, `ci/bootstrap.sh`), placed and their
//! files written as on the process backend, peers talking through real fault
//! proxies. No mocks.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use faultproxy::Proxy;
use fencecheck::record::observe::{Observation, ObservationWriter};
use fencecheck::scenario::{Scenario, ServiceKind};
use fencecheck::systems::client::{Acquire, ClientConfig, Granted, LockClient, Session};
use fencecheck::systems::members::{Deploy, MemberSpec, PeerPlace, Placement};
use fencecheck::systems::service::LockService;
use fencecheck::systems::zookeeper::client::ZkClient;
use fencecheck::systems::zookeeper::members::ZkDeploy;
use fencecheck::systems::zookeeper::service::{wait_ready, ZkService};

/// Members on 127.0.1.N as the process backend puts them; `base` keeps the tests
/// of this file (which run in parallel) on distinct IPs.
struct Ensemble {
    children: Vec<Option<Child>>,
    clients: Vec<SocketAddr>,
    members: Vec<MemberSpec>,
    logs: Vec<std::path::PathBuf>,
    _proxies: Vec<Proxy>,
    _dir: tempfile::TempDir,
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_addr(ip: &str) -> SocketAddr {
    let l = TcpListener::bind(format!("{ip}:0")).expect("bind a free port");
    l.local_addr().expect("local addr")
}

fn spawn(m: &MemberSpec, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("member log");
    Command::new(&m.program)
        .args(&m.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start a ZooKeeper member")
}

impl Ensemble {
    /// Starts `n` members and waits until each serves; returns the time that took.
    async fn start(n: usize, base: usize) -> (Ensemble, Duration) {
        let dir = tempfile::tempdir().expect("tempdir");
        let deploy = ZkDeploy::find(&|s| eprintln!("{s}")).expect("ZooKeeper installed");
        let mut addrs = Vec::new();
        let mut proxies = Vec::new();
        for i in 0..n {
            let ip = format!("127.0.1.{}", base + i);
            let mut peers = Vec::new();
            for _ in 0..2 {
                let listen = free_addr(&ip);
                let front: SocketAddr = format!("127.0.2.{}:0", base + i).parse().unwrap();
                let p = Proxy::start(front, listen).await.expect("peer proxy");
                peers.push(PeerPlace {
                    bind: listen,
                    advertise: p.local_addr().into(),
                });
                proxies.push(p);
            }
            let client = free_addr(&ip);
            addrs.push(Placement {
                index: i,
                client_bind: client,
                client,
                peers,
                data_dir: dir.path().join(format!("zk-{i}")).display().to_string(),
                config_dir: dir.path().display().to_string(),
                cluster_token: "fencecheck".into(),
            });
        }
        let scenario = Scenario::parse("name = \"zk\"\n", "zk.toml").expect("scenario");
        let members = deploy.members(&scenario, &addrs).expect("members");
        for (m, p) in members.iter().zip(&addrs) {
            fencecheck::backend::process::write_files(m, p).expect("member files");
        }
        assert!(deploy.version().starts_with("3.8"), "{}", deploy.version());
        let logs: Vec<_> = (0..n)
            .map(|i| dir.path().join(format!("zk-{i}.log")))
            .collect();
        let t0 = Instant::now();
        let children = members
            .iter()
            .zip(&logs)
            .map(|(m, l)| Some(spawn(m, l)))
            .collect();
        let e = Ensemble {
            children,
            clients: addrs.iter().map(|a| a.client).collect(),
            members,
            logs,
            _proxies: proxies,
            _dir: dir,
        };
        for (i, c) in e.clients.iter().enumerate() {
            if let Err(err) = wait_ready(&format!("zk {i}"), *c, Duration::from_secs(30)).await {
                panic!("{err:#}\n{}", e.log(i));
            }
        }
        (e, t0.elapsed())
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.logs[i]).unwrap_or_default()
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            c.kill().expect("kill");
            c.wait().expect("wait");
        }
    }

    fn restart(&mut self, i: usize) {
        assert!(self.children[i].is_none());
        self.children[i] = Some(spawn(&self.members[i], &self.logs[i]));
    }

    fn endpoints(&self) -> Vec<String> {
        self.clients.iter().map(|a| a.to_string()).collect()
    }

    async fn client(&self, worker: u32) -> (ZkClient, Session) {
        let cfg = ClientConfig {
            service: ServiceKind::Zookeeper,
            endpoints: self.endpoints(),
            ttl: Duration::from_secs(2),
            worker,
            token: fencecheck::scenario::TokenMode::Grant,
            behaviour: Default::default(),
            external: None,
            access: None,
            renew_deadline: None,
            retry_period: None,
        };
        let mut c = ZkClient::connect(&cfg).await.expect("client");
        let s = c.open_session().await.expect("session");
        (c, s)
    }
}

fn granted(a: Acquire) -> Granted {
    match a {
        Acquire::Granted(g) => g,
        other => panic!("not granted: {other:?}"),
    }
}

/// Polls `probe` every 50 ms until it holds or `deadline` passes.
async fn eventually<F, Fut>(what: &str, deadline: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    while !probe().await {
        assert!(Instant::now() < end, "{what}: not within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn observations(path: &Path) -> Vec<Observation> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("observation line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_lock_is_exclusive_ordered_and_seen_by_the_harness() {
    let (zk, _) = Ensemble::start(1, 11).await;
    let svc = ZkService::connect(&zk.clients).await.expect("service");
    assert_eq!(svc.leader().await.expect("leader"), 0);
    let obs_dir = tempfile::tempdir().unwrap();
    let obs_path = obs_dir.path().join("service.jsonl");
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let writer = ObservationWriter::create(&obs_path).unwrap();
    let svc = std::sync::Arc::new(svc);
    let observer = tokio::spawn({
        let svc = svc.clone();
        async move { svc.observe(writer, stop).await }
    });

    let (mut a, sa) = zk.client(1).await;
    let (mut b, sb) = zk.client(2).await;
    assert_ne!(sa.id, sb.id);
    let ga = granted(a.acquire("k0").await);
    assert_eq!(ga.session, sa.id);
    assert!(ga.id.starts_with("/fencecheck/locks/k0/_c_"), "{}", ga.id);

    let holders = svc.holders().await.expect("holders");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!((holders[0].worker, holders[0].grant), (1, ga.grant));
    assert_eq!(holders[0].pid, std::process::id());
    let mut sessions: Vec<_> = svc
        .sessions()
        .await
        .unwrap()
        .iter()
        .map(|s| s.worker)
        .collect();
    sessions.sort();
    assert_eq!(sessions, [1, 2]);

    // b waits behind a: its acquisition completes only after a lets go.
    let wait_b = tokio::spawn(async move {
        let g = b.acquire("k0").await;
        (b, g)
    });
    eventually("b's waiter node", Duration::from_secs(5), || async {
        observations(&obs_path)
            .iter()
            .any(|o| matches!(o, Observation::Created { session, .. } if *session == sb.id))
    })
    .await;
    assert!(!wait_b.is_finished(), "b was granted while a held the lock");
    a.release(&ga).await.expect("release");
    let (mut b, gb) = tokio::time::timeout(Duration::from_secs(5), wait_b)
        .await
        .expect("b granted after a's release")
        .unwrap();
    let gb = granted(gb);
    assert!(
        gb.grant > ga.grant,
        "czxid order: {} then {}",
        ga.grant,
        gb.grant
    );

    b.release(&gb).await.unwrap();
    b.close_session().await;
    eventually("b's session end observed", Duration::from_secs(5), || async {
        observations(&obs_path)
            .iter()
            .any(|o| matches!(o, Observation::SessionEnded { session, worker: Some(2), .. } if *session == sb.id))
    })
    .await;
    let obs = observations(&obs_path);
    let deleted: Vec<i64> = obs
        .iter()
        .filter_map(|o| match o {
            Observation::Deleted { grant, .. } => Some(*grant),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [ga.grant, gb.grant], "{obs:?}");
    assert!(sa.lost.borrow().is_none());
    stop_tx.send(true).unwrap();
    observer.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_session_ends_the_holders_session_at_the_service() {
    let (zk, _) = Ensemble::start(1, 12).await;
    let svc = ZkService::connect(&zk.clients).await.expect("service");
    let (mut a, sa) = zk.client(1).await;
    let (mut b, _sb) = zk.client(2).await;
    let ga = granted(a.acquire("k1").await);

    let done = match svc.expire_session(sa.id).await {
        Ok(d) => d,
        Err(e) => panic!("{e:#}\n{}", zk.log(0)),
    };
    eprintln!("expire: {done}");
    assert!(
        done["result"].as_str().unwrap().starts_with("closed"),
        "{done}"
    );
    let mut lost = sa.lost.clone();
    let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait_for(Option::is_some))
        .await
        .expect("the holder learns its session ended")
        .unwrap()
        .clone();
    assert!(reason.unwrap().contains("expired"));
    // Its lock node went with the session: b is granted, with a later czxid.
    let gb = tokio::time::timeout(Duration::from_secs(5), b.acquire("k1"))
        .await
        .expect("b granted");
    let gb = granted(gb);
    assert!(gb.grant > ga.grant);
    assert!(svc
        .sessions()
        .await
        .unwrap()
        .iter()
        .all(|s| s.session != sa.id));
    // Expiring it again is refused: the ensemble no longer knows it.
    assert!(svc.expire_session(sa.id).await.is_err());
    // a's next acquisition says its session is gone.
    match a.acquire("k1").await {
        Acquire::Failed { session_gone, .. } => assert!(session_gone),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_through_proxies_survive_a_leader_kill() {
    let (mut zk, ready) = Ensemble::start(3, 21).await;
    eprintln!("3-member ensemble ready in {ready:?}");
    let svc = std::sync::Arc::new(ZkService::connect(&zk.clients).await.expect("service"));
    let leader = svc.leader().await.expect("leader");
    let obs_dir = tempfile::tempdir().unwrap();
    let obs_path = obs_dir.path().join("service.jsonl");
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let writer = ObservationWriter::create(&obs_path).unwrap();
    let observer = tokio::spawn({
        let svc = svc.clone();
        async move { svc.observe(writer, stop).await }
    });

    // A 4 s session rides out the election (2 s could, but not on a loaded box).
    let cfg = ClientConfig {
        service: ServiceKind::Zookeeper,
        endpoints: zk.endpoints(),
        ttl: Duration::from_secs(4),
        worker: 7,
        token: fencecheck::scenario::TokenMode::Grant,
        behaviour: Default::default(),
        external: None,
        access: None,
        renew_deadline: None,
        retry_period: None,
    };
    let mut c = ZkClient::connect(&cfg).await.unwrap();
    let s = c.open_session().await.unwrap();
    let g1 = granted(c.acquire("k2").await);
    c.release(&g1).await.unwrap();

    let t0 = Instant::now();
    zk.kill(leader);
    eventually("a new leader", Duration::from_secs(15), || async {
        matches!(svc.leader().await, Ok(l) if l != leader)
    })
    .await;
    eprintln!("new leader after {:?}", t0.elapsed());
    // The session may outlive the election or not (4 s; an election through the
    // proxies took 0.3-6 s here): either way the client carries on, as a worker.
    let mut acquired = tokio::time::timeout(Duration::from_secs(10), c.acquire("k2"))
        .await
        .expect("an answer after the election");
    if let Acquire::Failed {
        session_gone: true, ..
    } = acquired
    {
        eprintln!("session lost in the election: {:?}", s.lost.borrow());
        c.open_session().await.expect("a new session");
        acquired = c.acquire("k2").await;
    }
    let g2 = granted(acquired);
    assert!(g2.grant > g1.grant);
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while !observations(&obs_path)
            .iter()
            .any(|o| matches!(o, Observation::Created { grant, .. } if *grant == g2.grant))
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "the observer missed {g2:?}: {:#?}",
        observations(&obs_path)
    );

    zk.restart(leader);
    wait_ready(
        "restarted member",
        zk.clients[leader],
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", zk.log(leader)));
    c.release(&g2).await.unwrap();
    c.close_session().await;
    stop_tx.send(true).unwrap();
    observer.await.unwrap().unwrap();
}
