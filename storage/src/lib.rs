//! The fencing-aware key-value service that fencecheck's workers write to.
//!
//! One `POST /` endpoint takes a JSON [`Request`] (`read` or `write`), decides a
//! [`Verdict`] under the configured [`Fencing`] mode, appends a [`LogRecord`] to the
//! durable log (`storage.jsonl`) **before** answering — written to the kernel, and
//! with [`Durability::Fsync`] also fsynced — so the log is never behind what a
//! client was told. `GET /history` returns the log.
//!
//! The log is also the state: a storage killed and started again on the same log
//! rebuilds every key's value and max token, and its sequence number, from it
//! (a torn last line, left by a kill mid-write, was never answered and is cut off).
//!
//! The state is one mutex-protected map: the service is a linearizable register per
//! key by construction, which is what the `linearizable` checker validates from the
//! client side.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Largest request body accepted; anything larger is a 400, not a crash.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// How the storage compares a write's token with the tokens it accepted before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fencing {
    /// Accept a write iff `token >= max token seen` for the key, then raise the max;
    /// reads carrying a token raise the max too (a fenced read-modify-write).
    Monotonic,
    /// etcd `contrib/lock`'s check: the first write fixes the key's token and every
    /// later write must carry exactly that token.
    Exact,
    /// Accept everything: the negative control.
    Off,
    /// The classic mistake, PostgreSQL storage only (`[storage] kind =
    /// "postgres"`): read the max token, compare in the client, then update in a
    /// second statement. It means to be `monotonic`; this storage refuses to run it.
    CheckThenWrite,
}

impl Fencing {
    /// The mode as written in scenarios and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Fencing::Monotonic => "monotonic",
            Fencing::Exact => "exact",
            Fencing::Off => "off",
            Fencing::CheckThenWrite => "check-then-write",
        }
    }

    /// The rule the mode means to enforce: `check-then-write` means `monotonic`
    /// (the checkers hold it to that).
    pub fn intended(self) -> Fencing {
        match self {
            Fencing::CheckThenWrite => Fencing::Monotonic,
            f => f,
        }
    }
}

impl std::str::FromStr for Fencing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "monotonic" => Ok(Fencing::Monotonic),
            "exact" => Ok(Fencing::Exact),
            "off" => Ok(Fencing::Off),
            "check-then-write" => Ok(Fencing::CheckThenWrite),
            other => Err(format!(
                "unknown fencing mode {other:?}, expected monotonic, exact, off or \
                 check-then-write"
            )),
        }
    }
}

/// How far a record goes before the client is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// `write(2)` to the kernel: survives a SIGKILL of the storage (the page cache
    /// outlives the process), not a machine crash or power loss. Today's default:
    /// no disk wait per request.
    #[default]
    Flush,
    /// `fdatasync(2)` after every record, before answering: survives a machine
    /// crash too, at the cost of a disk round trip per request.
    Fsync,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Flush => "flush",
            Durability::Fsync => "fsync",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "flush" => Ok(Durability::Flush),
            "fsync" => Ok(Durability::Fsync),
            other => Err(format!(
                "unknown durability {other:?}, expected flush or fsync"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    Read,
    Write,
}

/// A client request. `revision` is the lock grant's CreateRevision and is sent with
/// every request whatever the token mode, so the fencing checker can judge writes
/// independently of what the storage compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub op: OpKind,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    pub client: String,
    pub request_id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// A read was served.
    Ok,
    Accepted,
    RejectedStale,
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub verdict: Verdict,
    /// The key's value after the request (`null` when the key was never written).
    pub value: Option<i64>,
    /// The key's current fencing token after the request.
    pub token: Option<i64>,
    pub seq: u64,
}

/// One line of `storage.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    pub seq: u64,
    pub time_ns: u64,
    pub request: Request,
    pub verdict: Verdict,
    pub token_before: Option<i64>,
    pub token_after: Option<i64>,
    pub value_before: Option<i64>,
    pub value_after: Option<i64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Cell {
    value: Option<i64>,
    token: Option<i64>,
}

/// The service state: the map and the log behind one lock, so the order of the log
/// is the order in which requests took effect.
pub struct Store {
    fencing: Fencing,
    durability: Durability,
    inner: Mutex<Inner>,
}

struct Inner {
    cells: HashMap<String, Cell>,
    log: File,
    seq: u64,
}

/// What this process adds to its `CLOCK_MONOTONIC` (see [`set_clock_offset`]).
static CLOCK_OFFSET_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Makes every later [`monotonic_ns`] of this process read the harness's
/// monotonic clock instead of this machine's: a worker in a pod on a node that
/// is not the harness's machine (whose `CLOCK_MONOTONIC` counts from that
/// machine's boot) adds the offset the harness measured, so its events compare
/// with the harness's own.
pub fn set_clock_offset(ns: i64) {
    CLOCK_OFFSET_NS.store(ns, std::sync::atomic::Ordering::Relaxed);
}

/// Monotonic clock in nanoseconds, the same clock (`CLOCK_MONOTONIC`) that every
/// fencecheck process stamps its events with, so storage and history times compare
/// (plus this process's offset to the harness's clock, 0 unless set).
pub fn monotonic_ns() -> u64 {
    raw_monotonic_ns()
        .saturating_add_signed(CLOCK_OFFSET_NS.load(std::sync::atomic::Ordering::Relaxed))
}

/// This machine's `CLOCK_MONOTONIC`, in nanoseconds.
pub fn raw_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes into the timespec we own; CLOCK_MONOTONIC
    // always exists on Linux, so the call cannot fail.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

impl Store {
    /// Opens (appending to) the log at `log_path`. Appending keeps the earlier records
    /// of a restarted storage; state is rebuilt from them so fencing survives restarts.
    pub fn open(
        log_path: &Path,
        fencing: Fencing,
        durability: Durability,
    ) -> std::io::Result<Store> {
        if fencing == Fencing::CheckThenWrite {
            return Err(std::io::Error::other(
                "fencing check-then-write is a PostgreSQL mode (two SQL statements); \
                 this storage decides atomically",
            ));
        }
        let (cells, seq, records) = rebuild(log_path)?;
        if records > 0 {
            tracing::info!(
                records,
                keys = cells.len(),
                seq,
                "state rebuilt from {}",
                log_path.display()
            );
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)?;
        Ok(Store {
            fencing,
            durability,
            inner: Mutex::new(Inner { cells, log, seq }),
        })
    }

    /// Applies one request, logs it durably, and returns the answer.
    pub async fn apply(&self, req: Request) -> Result<Answer, String> {
        if req.op == OpKind::Write && req.val.is_none() {
            return Err("a write needs an integer `val`".into());
        }
        if req.op == OpKind::Write && self.fencing != Fencing::Off && req.token.is_none() {
            return Err(format!(
                "a write needs a `token` when fencing is {:?}",
                self.fencing
            ));
        }
        let mut inner = self.inner.lock().await;
        let before = inner.cells.get(&req.key).copied().unwrap_or_default();
        let (verdict, after) = decide(self.fencing, &req, before);
        inner.seq += 1;
        let rec = LogRecord {
            seq: inner.seq,
            time_ns: monotonic_ns(),
            request: req.clone(),
            verdict,
            token_before: before.token,
            token_after: after.token,
            value_before: before.value,
            value_after: after.value,
        };
        let mut line = serde_json::to_vec(&rec).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let durability = self.durability;
        let written = inner.log.write_all(&line).and_then(|_| match durability {
            // `File` has no user-space buffer: after write_all the record is the
            // kernel's, which a SIGKILL of this process cannot take back.
            Durability::Flush => inner.log.flush(),
            Durability::Fsync => inner.log.sync_data(),
        });
        if let Err(e) = written {
            // Not logged means not applied: the client must not be told "accepted".
            inner.seq -= 1;
            return Err(format!("storage log write failed: {e}"));
        }
        inner.cells.insert(req.key, after);
        Ok(Answer {
            verdict,
            value: after.value,
            token: after.token,
            seq: rec.seq,
        })
    }

    pub fn fencing(&self) -> Fencing {
        self.fencing
    }
}

/// Reads the log at `path` (if any) back into the state it describes: each key's
/// last value and token, the last sequence number, and how many records there were.
/// A torn last line (no newline: killed mid-write, so never answered) is cut off
/// the file, so the next record starts on a line of its own instead of being glued
/// to the torn one and lost to every reader.
fn rebuild(path: &Path) -> std::io::Result<(HashMap<String, Cell>, u64, usize)> {
    let mut cells = HashMap::new();
    let (mut seq, mut records) = (0, 0);
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((cells, 0, 0)),
        Err(e) => return Err(e),
    };
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        tracing::warn!(
            "{}: cutting off a torn last line ({} bytes)",
            path.display(),
            bytes.len() - whole
        );
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(whole as u64)?;
    }
    for line in bytes[..whole].split(|&b| b == b'\n') {
        // An unreadable whole line is skipped, as every reader of the log does.
        if let Ok(rec) = serde_json::from_slice::<LogRecord>(line) {
            seq = rec.seq;
            records += 1;
            cells.insert(
                rec.request.key.clone(),
                Cell {
                    value: rec.value_after,
                    token: rec.token_after,
                },
            );
        }
    }
    Ok((cells, seq, records))
}

fn decide(fencing: Fencing, req: &Request, before: Cell) -> (Verdict, Cell) {
    match req.op {
        // In monotonic mode a read registers its token too: once a newer holder has
        // read, an older holder's write would overwrite a value the newer one is
        // about to build on, so it must be stale from then on. Without this, a
        // stale write landing between the new holder's read and its write is
        // accepted and an increment is lost. The read itself is always served.
        OpKind::Read => match (fencing, req.token) {
            (Fencing::Monotonic, Some(t)) if before.token.is_none_or(|max| t > max) => (
                Verdict::Ok,
                Cell {
                    token: Some(t),
                    ..before
                },
            ),
            _ => (Verdict::Ok, before),
        },
        OpKind::Write => {
            let accept = match fencing {
                Fencing::Off => true,
                Fencing::Monotonic | Fencing::CheckThenWrite => match (before.token, req.token) {
                    (Some(max), Some(t)) => t >= max,
                    _ => true,
                },
                Fencing::Exact => match before.token {
                    None => true,
                    Some(cur) => req.token == Some(cur),
                },
            };
            if accept {
                let token = match fencing {
                    Fencing::Off => before.token.max(req.token),
                    _ => req.token,
                };
                (
                    Verdict::Accepted,
                    Cell {
                        value: req.val,
                        token,
                    },
                )
            } else {
                (Verdict::RejectedStale, before)
            }
        }
    }
}

#[derive(Clone)]
struct AppState {
    store: Arc<Store>,
    log_path: PathBuf,
}

/// Builds the HTTP router for a store whose log lives at `log_path`.
pub fn router(store: Arc<Store>, log_path: PathBuf) -> Router {
    Router::new()
        .route("/", post(handle))
        .route("/history", get(history))
        .route("/health", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(AppState { store, log_path })
}

fn bad_request(reason: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": reason })),
    )
        .into_response()
}

async fn handle(
    State(st): State<AppState>,
    body: Result<Json<Request>, JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(rej) => return bad_request(rej.body_text()),
    };
    match st.store.apply(req).await {
        Ok(resp) => Json(resp).into_response(),
        Err(reason) => bad_request(reason),
    }
}

async fn history(State(st): State<AppState>) -> Response {
    // The log file is the history; it is flushed per record, so reading it is enough.
    match tokio::fs::read(&st.log_path).await {
        Ok(bytes) => ([("content-type", "application/x-ndjson")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Serves until `shutdown` resolves. Binds `listen` (loopback by default).
pub async fn serve(
    listen: SocketAddr,
    log_path: PathBuf,
    fencing: Fencing,
    durability: Durability,
    ready: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = Arc::new(Store::open(&log_path, fencing, durability)?);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, ?fencing, ?durability, log = %log_path.display(), "storage listening");
    if let Some(tx) = ready {
        let _ = tx.send(addr);
    }
    axum::serve(listener, router(store, log_path))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(token: i64, val: i64) -> Request {
        Request {
            op: OpKind::Write,
            key: "k0".into(),
            val: Some(val),
            token: Some(token),
            revision: Some(token),
            lease: None,
            client: "1".into(),
            request_id: 1,
        }
    }

    #[test]
    fn monotonic_accepts_equal_and_greater_rejects_lower() {
        let c = Cell::default();
        let (v, c) = decide(Fencing::Monotonic, &w(5, 1), c);
        assert_eq!(v, Verdict::Accepted);
        let (v, c) = decide(Fencing::Monotonic, &w(5, 2), c);
        assert_eq!(v, Verdict::Accepted);
        let (v, c) = decide(Fencing::Monotonic, &w(4, 3), c);
        assert_eq!(v, Verdict::RejectedStale);
        assert_eq!(c.value, Some(2));
        let (v, c) = decide(Fencing::Monotonic, &w(9, 4), c);
        assert_eq!(v, Verdict::Accepted);
        assert_eq!(c.token, Some(9));
    }

    #[test]
    fn monotonic_read_registers_a_newer_token() {
        let (_, c) = decide(Fencing::Monotonic, &w(5, 1), Cell::default());
        let mut r = w(9, 0);
        r.op = OpKind::Read;
        r.val = None;
        let (v, c) = decide(Fencing::Monotonic, &r, c);
        assert_eq!((v, c.token, c.value), (Verdict::Ok, Some(9), Some(1)));
        // The old holder's write after the new holder's read is stale.
        let (v, _) = decide(Fencing::Monotonic, &w(5, 2), c);
        assert_eq!(v, Verdict::RejectedStale);
        // A stale read is served and changes nothing.
        let mut r = w(3, 0);
        r.op = OpKind::Read;
        r.val = None;
        let (v, c2) = decide(Fencing::Monotonic, &r, c);
        assert_eq!((v, c2.token), (Verdict::Ok, Some(9)));
    }

    #[test]
    fn exact_rejects_every_later_holder() {
        let (v, c) = decide(Fencing::Exact, &w(5, 1), Cell::default());
        assert_eq!(v, Verdict::Accepted);
        let (v, _) = decide(Fencing::Exact, &w(9, 2), c);
        assert_eq!(
            v,
            Verdict::RejectedStale,
            "a newer legitimate holder is rejected"
        );
        let (v, _) = decide(Fencing::Exact, &w(5, 3), c);
        assert_eq!(v, Verdict::Accepted);
    }

    #[tokio::test]
    async fn restart_rebuilds_state_and_cuts_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("fc-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("storage.jsonl");
        let _ = std::fs::remove_file(&path);
        let st = Store::open(&path, Fencing::Monotonic, Durability::Fsync).expect("open");
        st.apply(w(5, 1)).await.expect("w1");
        st.apply(w(7, 2)).await.expect("w2");
        drop(st);
        // A kill mid-write leaves half a record without its newline.
        let mut f = OpenOptions::new().append(true).open(&path).expect("append");
        f.write_all(b"{\"seq\":3,\"time_").expect("torn");
        drop(f);
        let st = Store::open(&path, Fencing::Monotonic, Durability::Flush).expect("reopen");
        // Value, max token and seq survive: the stale token 5 is still refused.
        let a = st.apply(w(5, 9)).await.expect("stale");
        assert_eq!(
            (a.verdict, a.value, a.seq),
            (Verdict::RejectedStale, Some(2), 3)
        );
        let a = st.apply(w(7, 3)).await.expect("fresh");
        assert_eq!((a.verdict, a.value, a.seq), (Verdict::Accepted, Some(3), 4));
        drop(st);
        let text = std::fs::read_to_string(&path).expect("read");
        let seqs: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<LogRecord>(l)
                    .expect("every line whole")
                    .seq
            })
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn off_accepts_stale() {
        let (_, c) = decide(Fencing::Off, &w(9, 1), Cell::default());
        let (v, c) = decide(Fencing::Off, &w(3, 2), c);
        assert_eq!(v, Verdict::Accepted);
        assert_eq!(c.value, Some(2));
    }
}
