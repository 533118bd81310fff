//! PostgreSQL 15 as the fenced resource on the process backend: `initdb` in the
//! run directory (`pg.data`; a link to a fresh directory under `/tmp` when the
//! postgres user cannot reach the run directory), `postgres` on a loopback address and a free port,
//! the tables, crash and restart, and the export of the log table to
//! `storage.jsonl` (the file every checker reads). The settings, the readiness
//! probe, the tables and the export serve the docker backend's PostgreSQL
//! container too (`docker.rs` here).
//!
//! PostgreSQL refuses to run as root, so `initdb` and `postgres` are started
//! directly as the `postgres` user (uid/gid set in the spawn, no `su` in between):
//! the postmaster is then the process-group leader `crate::proc::spawn` makes it,
//! with PDEATHSIG (set after the uid change, so it sticks). Its backends stay in
//! its group and exit when it dies; a pause or a kill goes to the whole group, so
//! a frozen database is frozen whole and a crash takes every backend at once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fencecheck_storage::{LogRecord, OpKind, Request, Verdict};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::client::connect;
use crate::proc::{free_port, poll_until, spawn, Child};
use crate::resources::StorageServer;
use crate::scenario::{Scenario, SyncCommit};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const HOST: &str = "127.0.0.1";
/// The database's own output (initdb's too), and its data directory inside the
/// run directory: names the run directory owns.
pub use crate::record::rundir::{PG_DATA as DATA, PG_LOG as LOG};
const INITDB_DEADLINE: Duration = Duration::from_secs(60);
const READY_DEADLINE: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub struct PgServer {
    pub addr: SocketAddr,
    /// The real data directory: `pg.data` in the run directory, or (when the run
    /// directory's parents shut the postgres user out) one under a reachable
    /// temporary base, which `pg.data` then links to.
    data: PathBuf,
    /// `Some(link)` when `data` lives outside the run directory: both are removed
    /// by `stop`.
    external: Option<PathBuf>,
    log: PathBuf,
    sync: SyncCommit,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    child: Option<Child>,
    paused: bool,
}

/// `postgres`'s uid and gid (Debian's package creates the user).
fn postgres_user() -> Result<(nix::unistd::Uid, nix::unistd::Gid)> {
    let u = nix::unistd::User::from_name("postgres")
        .context("looking up the postgres user")?
        .context("no `postgres` user: install postgresql-15 (ci/bootstrap.sh --system postgres)")?;
    Ok((u.uid, u.gid))
}

/// The last lines of the database's log, for an error that says why.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n  ")
}

impl PgServer {
    /// initdb, start, wait until it answers, create the tables. Errors name the
    /// database's log.
    pub async fn start(scenario: &Scenario, run_dir: &Path) -> Result<PgServer> {
        let postgres = Path::new(BIN).join("postgres");
        if !postgres.exists() {
            bail!(
                "storage.kind = \"postgres\" needs PostgreSQL 15 at {}; install postgresql-15 \
                 (ci/bootstrap.sh --system postgres does)",
                postgres.display()
            );
        }
        let (uid, gid) = postgres_user()?;
        let log = run_dir.join(LOG);
        // The postgres user must reach the data directory through the run
        // directory: let it search (not read) the run directory.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(run_dir)?.permissions().mode();
        std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(mode | 0o711))?;
        let (data, external) = data_dir(run_dir, uid, gid)?;
        let port = free_port(HOST)?;
        let mut s = PgServer {
            addr: format!("{HOST}:{port}").parse()?,
            data,
            external,
            log,
            sync: scenario.storage.synchronous_commit.unwrap_or_default(),
            uid,
            gid,
            child: None,
            paused: false,
        };
        let started = async {
            s.initdb().await?;
            s.spawn()?;
            s.wait_ready().await?;
            create_schema(s.addr, scenario.workload.keys).await
        }
        .await;
        if let Err(e) = started {
            // Nothing else holds this server: stop it here, so an outside data
            // directory does not outlive a start that failed.
            s.stop().await;
            return Err(e);
        }
        Ok(s)
    }

    fn command(&self, program: &str) -> std::process::Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(Path::new(BIN).join(program));
        cmd.uid(self.uid.as_raw()).gid(self.gid.as_raw());
        cmd.env("LC_ALL", "C");
        cmd
    }

    async fn initdb(&self) -> Result<()> {
        let mut cmd = self.command("initdb");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
            // The cluster is created fresh per run; its own files need no fsync.
            .args(["--no-sync", "--no-instructions"]);
        let mut c = spawn("initdb", cmd, &self.log)?;
        match c.wait_timeout(INITDB_DEADLINE).await {
            Some(st) if st.success() => Ok(()),
            Some(st) => bail!(
                "PostgreSQL initdb failed ({st}); see {}:\n  {}",
                self.log.display(),
                log_tail(&self.log)
            ),
            None => {
                c.stop(Duration::ZERO).await;
                bail!(
                    "PostgreSQL initdb did not finish in {INITDB_DEADLINE:?}; see {}",
                    self.log.display()
                )
            }
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let mut cmd = self.command("postgres");
        cmd.arg("-D").arg(&self.data);
        cmd.args(["-p", &self.addr.port().to_string()]);
        for s in settings(HOST, self.sync) {
            cmd.arg("-c").arg(s);
        }
        self.child = Some(spawn("postgres", cmd, &self.log)?);
        Ok(())
    }

    /// Polls a connect and `SELECT 1` until the deadline; a postmaster that exits
    /// meanwhile fails at once, naming its log.
    async fn wait_ready(&mut self) -> Result<()> {
        let addr = self.addr.to_string();
        let end = tokio::time::Instant::now() + READY_DEADLINE;
        let result = poll_until("PostgreSQL", READY_DEADLINE, || {
            let exited = self.child.as_mut().and_then(Child::exited).is_some();
            let addr = addr.clone();
            async move { exited || answers(&addr, end).await }
        })
        .await;
        if let Some(st) = self.child.as_mut().and_then(Child::exited) {
            bail!(
                "PostgreSQL exited ({st}) before it answered; see {}:\n  {}",
                self.log.display(),
                log_tail(&self.log)
            );
        }
        result.with_context(|| format!("PostgreSQL at {}; see {}", self.addr, self.log.display()))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::pid)
    }

    /// Signals the postmaster's whole process group (it and its backends).
    fn signal_group(&self, sig: Signal) -> Result<u32> {
        let pid = self.pid().context("PostgreSQL is not running")?;
        kill(Pid::from_raw(-(pid as i32)), sig).with_context(|| format!("{sig} to PostgreSQL"))?;
        Ok(pid)
    }
}

/// The process backend runs it as the storage (`resources::StorageServer`).
#[async_trait::async_trait]
impl StorageServer for PgServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn what(&self) -> &'static str {
        "PostgreSQL"
    }

    fn pause(&mut self) -> Result<serde_json::Value> {
        // Recorded first, so a heal never misses it.
        self.paused = true;
        let pid = self.signal_group(Signal::SIGSTOP)?;
        Ok(serde_json::json!({ "action": "SIGSTOP", "process_group": pid }))
    }

    fn resume(&mut self) -> Result<()> {
        self.paused = false;
        self.signal_group(Signal::SIGCONT).map(|_| ())
    }

    /// Continues a paused database; says whether it was paused.
    fn heal_paused(&mut self) -> bool {
        std::mem::take(&mut self.paused) && self.signal_group(Signal::SIGCONT).is_ok()
    }

    /// A crash: SIGKILL to the postmaster and every backend at once. The data
    /// directory stays; what survives is what its WAL had on disk or in the page
    /// cache.
    async fn kill(&mut self) -> Result<serde_json::Value> {
        let pid = self.signal_group(Signal::SIGKILL)?;
        self.paused = false;
        if let Some(mut c) = self.child.take() {
            c.stop(Duration::ZERO).await;
        }
        Ok(serde_json::json!({ "action": "SIGKILL", "process_group": pid }))
    }

    fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts it again on its data directory (crash recovery replays the WAL) and
    /// waits until it answers.
    async fn restart(&mut self) -> Result<serde_json::Value> {
        if self.child.is_none() {
            self.spawn()?;
        }
        let t0 = std::time::Instant::now();
        self.wait_ready()
            .await
            .context("the restarted PostgreSQL")?;
        Ok(serde_json::json!({
            "action": "restart",
            "pid": self.pid(),
            "ready_ms": t0.elapsed().as_millis() as u64,
        }))
    }

    /// Fast shutdown (SIGINT: roll back, checkpoint, exit), then SIGKILL of the
    /// group if it is not done in time.
    async fn stop(&mut self) {
        self.heal_paused();
        if let Some(mut c) = self.child.take() {
            let _ = c.signal(Signal::SIGINT);
            if c.wait_timeout(Duration::from_secs(10)).await.is_none() {
                let _ = kill(Pid::from_raw(-(c.pid() as i32)), Signal::SIGKILL);
                c.stop(Duration::ZERO).await;
            }
        }
        // An outside data directory goes with the run: the table was exported to
        // storage.jsonl before stop, and nothing else would ever remove it.
        if let Some(link) = self.external.take() {
            if let Err(e) = std::fs::remove_dir_all(&self.data) {
                tracing::warn!("removing {}: {e}", self.data.display());
            }
            let _ = std::fs::remove_file(link);
        }
    }
}

/// Can the user `uid`/`gid` search (traverse) every directory from `/` down to
/// `dir`? Root's `mktemp -d` is 0700: a run directory under it is out of reach.
fn reachable(dir: &Path, uid: nix::unistd::Uid, gid: nix::unistd::Gid) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    for d in dir.ancestors() {
        let m = std::fs::metadata(d).with_context(|| format!("reading {}", d.display()))?;
        let bit = if m.uid() == uid.as_raw() {
            0o100
        } else if m.gid() == gid.as_raw() {
            0o010
        } else {
            0o001
        };
        if m.mode() & bit == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The data directory, owned by the postgres user, mode 0700. In the run
/// directory when the postgres user can get there; otherwise a fresh
/// `fencecheck-pg-XXXXXX` under the first reachable temporary base (`/tmp`,
/// `/var/tmp`), with `pg.data` in the run directory a symlink to it. Neither
/// reachable: an error before anything started.
fn data_dir(
    run_dir: &Path,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
) -> Result<(PathBuf, Option<PathBuf>)> {
    use std::os::unix::fs::PermissionsExt;
    let link = run_dir.join(DATA);
    let data = if reachable(run_dir, uid, gid)? {
        std::fs::create_dir_all(&link)?;
        link.clone()
    } else {
        let base = ["/tmp", "/var/tmp"]
            .into_iter()
            .map(Path::new)
            .find(|b| reachable(b, uid, gid).unwrap_or(false))
            .with_context(|| {
                format!(
                    "the postgres user cannot reach {} (a parent directory is not searchable \
                     by it, e.g. a 0700 mktemp -d) and neither /tmp nor /var/tmp is \
                     searchable for it either; choose an --out under a searchable directory",
                    run_dir.display()
                )
            })?;
        // mkdtemp: a fresh name nobody else can have prepared in a shared /tmp.
        let data = nix::unistd::mkdtemp(&base.join("fencecheck-pg-XXXXXX"))
            .with_context(|| format!("creating a data directory under {}", base.display()))?;
        std::os::unix::fs::symlink(&data, &link)
            .with_context(|| format!("linking {} to {}", link.display(), data.display()))?;
        data
    };
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    std::os::unix::fs::chown(&data, Some(uid.as_raw()), Some(gid.as_raw()))
        .context("chown of the data directory")?;
    let external = (data != link).then_some(link);
    Ok((data, external))
}

/// The server settings (`-c name=value`) both backends start PostgreSQL with;
/// `listen` is its listen address.
pub fn settings(listen: &str, sync: SyncCommit) -> Vec<String> {
    [
        ("listen_addresses", listen),
        // No unix socket: nothing to create outside the data directory.
        ("unix_socket_directories", ""),
        ("fsync", "on"),
        ("synchronous_commit", sync.as_str()),
        ("full_page_writes", "on"),
        ("max_connections", "100"),
        ("shared_buffers", "32MB"),
        ("logging_collector", "off"),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={v}"))
    .collect()
}

/// Does PostgreSQL at `addr` accept a connection and answer `SELECT 1` before
/// `end`?
pub async fn answers(addr: &str, end: tokio::time::Instant) -> bool {
    let Ok(c) = connect(addr, Duration::from_secs(2)).await else {
        return false;
    };
    let left = end.saturating_duration_since(tokio::time::Instant::now());
    matches!(
        tokio::time::timeout(left, c.simple_query("SELECT 1")).await,
        Ok(Ok(_))
    )
}

/// Creates the tables (`kv` with one row per key, and the `log` table the checkers
/// read) in a fresh cluster at `addr`.
pub async fn create_schema(addr: SocketAddr, keys: u32) -> Result<()> {
    let c = connect(&addr.to_string(), CALL_TIMEOUT).await?;
    let sql = format!(
        "CREATE TABLE kv (key text PRIMARY KEY, value bigint, max_token bigint);
             INSERT INTO kv (key) SELECT 'k' || i FROM generate_series(0, {}) i;
             CREATE TABLE log (seq bigserial PRIMARY KEY, time_ns bigint NOT NULL,
               client text NOT NULL, request_id bigint NOT NULL, op text NOT NULL,
               key text NOT NULL, val bigint, token bigint, revision bigint, lease bigint,
               verdict text NOT NULL, token_before bigint, token_after bigint,
               value_before bigint, value_after bigint);",
        keys.saturating_sub(1)
    );
    tokio::time::timeout(CALL_TIMEOUT, c.batch_execute(&sql))
        .await
        .context("creating the tables timed out")?
        .context("creating the tables")?;
    Ok(())
}

/// Writes the log table, in `seq` order, to `out` as `storage.jsonl` records.
/// Returns how many.
pub async fn export(addr: SocketAddr, out: &Path) -> Result<usize> {
    let c = connect(&addr.to_string(), CALL_TIMEOUT).await?;
    let rows = tokio::time::timeout(
        Duration::from_secs(30),
        c.query(
            "SELECT seq, time_ns, client, request_id, op, key, val, token, revision, lease, \
             verdict, token_before, token_after, value_before, value_after FROM log ORDER BY seq",
            &[],
        ),
    )
    .await
    .context("exporting the log table timed out")?
    .context("exporting the log table")?;
    let mut text = String::new();
    for r in &rows {
        let op: &str = r.get(4);
        let verdict: &str = r.get(10);
        let rec = LogRecord {
            seq: r.get::<_, i64>(0) as u64,
            time_ns: r.get::<_, i64>(1) as u64,
            request: Request {
                op: if op == "write" {
                    OpKind::Write
                } else {
                    OpKind::Read
                },
                key: r.get(5),
                val: r.get(6),
                token: r.get(7),
                revision: r.get(8),
                lease: r.get(9),
                client: r.get(2),
                request_id: r.get::<_, i64>(3) as u64,
            },
            verdict: match verdict {
                "accepted" => Verdict::Accepted,
                "rejected-stale" => Verdict::RejectedStale,
                _ => Verdict::Ok,
            },
            token_before: r.get(11),
            token_after: r.get(12),
            value_before: r.get(13),
            value_after: r.get(14),
        };
        text.push_str(&serde_json::to_string(&rec)?);
        text.push('\n');
    }
    std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(rows.len())
}
