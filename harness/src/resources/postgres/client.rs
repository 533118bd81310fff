//! PostgreSQL as the fenced resource, worker side: one connection per worker
//! (through its storage proxy), each request one transaction that applies the
//! fencing rule in SQL and INSERTs the request's log row, so the log table holds
//! exactly the committed operations. The harness exports that table to
//! `storage.jsonl` at the end of the run (`super::server::export`).
//!
//! Order: every operation except a `check-then-write` rejection locks its key's
//! row (`FOR UPDATE`) before it takes its log `seq` from the sequence, and holds the
//! lock until it commits, so per key the `seq` order is the commit order — what the
//! checkers need. `time_ns` is this client's `CLOCK_MONOTONIC` when it sends the
//! log row, just before COMMIT: comparable with the history's times.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use fencecheck_storage::{monotonic_ns, Answer, OpKind, Request, Verdict};
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Transaction};

use crate::resources::FencedResource;
use crate::scenario::{Fencing, Isolation};

/// Serialization failures retried per request before it is given up (unknown).
const MAX_RETRIES: u32 = 20;

/// What a worker needs to reach the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PgClientConfig {
    /// `host:port` as this worker reaches it (its storage proxy).
    pub addr: String,
    pub fencing: Fencing,
    pub isolation: Isolation,
}

pub struct PgResource {
    cfg: PgClientConfig,
    timeout: Duration,
    client: Option<Client>,
    /// SQLSTATE 40001 retries since the last `take_retries`.
    retries: u32,
}

/// Connects to `addr` (`host:port`) as the trust-authenticated `postgres` user.
pub async fn connect(addr: &str, timeout: Duration) -> Result<Client> {
    let (host, port) = addr.rsplit_once(':').context("address without a port")?;
    let conf = format!(
        "host={host} port={port} user=postgres dbname=postgres connect_timeout={}",
        timeout.as_secs().max(1)
    );
    let (client, conn) = tokio::time::timeout(timeout, tokio_postgres::connect(&conf, NoTls))
        .await
        .context("connecting to PostgreSQL timed out")?
        .context("connecting to PostgreSQL")?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("PostgreSQL connection ended: {e}");
        }
    });
    Ok(client)
}

impl PgResource {
    pub fn new(cfg: PgClientConfig, timeout: Duration) -> PgResource {
        PgResource {
            cfg,
            timeout,
            client: None,
            retries: 0,
        }
    }

    async fn attempt(&mut self, req: &Request, think: Duration) -> Result<Answer> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(connect(&self.cfg.addr, self.timeout).await?);
        }
        let client = self.client.as_mut().context("no connection")?;
        let mut n = 0;
        loop {
            match one_transaction(client, &self.cfg, req, think, self.timeout).await {
                Err(e) if is_serialization_failure(&e) && n < MAX_RETRIES => {
                    n += 1;
                    self.retries += 1;
                }
                r => return r,
            }
        }
    }

    /// Every statement is bounded (`bounded`), retries are bounded: so is the call.
    async fn call_bounded(&mut self, req: &Request, think: Duration) -> Result<Answer> {
        let r = self.attempt(req, think).await;
        if r.is_err() {
            // A timed-out transaction may still commit on the server: unknown. A
            // fresh connection next time; dropping this one ends its session.
            self.client = None;
        }
        r
    }
}

/// One statement, bounded by `d`. The bound is per statement, not per request:
/// a `check-then-write` client frozen in its think time must still send its
/// UPDATE when it wakes (the mistake under test), not time out on its own pause.
async fn bounded<T>(
    d: Duration,
    f: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> Result<T> {
    match tokio::time::timeout(d, f).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("PostgreSQL did not answer within {d:?}"),
    }
}

fn is_serialization_failure(e: &anyhow::Error) -> bool {
    e.downcast_ref::<tokio_postgres::Error>()
        .and_then(|e| e.code())
        == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
}

#[async_trait::async_trait]
impl FencedResource for PgResource {
    async fn call(&mut self, req: &Request) -> Result<Answer> {
        self.call_bounded(req, Duration::ZERO).await
    }

    fn thinks_inside_writes(&self) -> bool {
        self.cfg.fencing == Fencing::CheckThenWrite
    }

    async fn call_thinking(&mut self, req: &Request, think: Duration) -> Result<Answer> {
        self.call_bounded(req, think).await
    }

    fn take_retries(&mut self) -> u32 {
        std::mem::take(&mut self.retries)
    }
}

/// A key's row: value and max token.
#[derive(Clone, Copy, Default)]
struct Row {
    value: Option<i64>,
    token: Option<i64>,
}

type PgResult<T> = anyhow::Result<T>;

/// One request as one transaction: the fencing rule, then its log row, then
/// COMMIT. `think` is spent between the check and the update of a
/// `check-then-write` write (the client's work after its check).
async fn one_transaction(
    client: &mut Client,
    cfg: &PgClientConfig,
    req: &Request,
    think: Duration,
    d: Duration,
) -> PgResult<Answer> {
    let level = match cfg.isolation {
        Isolation::ReadCommitted => tokio_postgres::IsolationLevel::ReadCommitted,
        Isolation::Serializable => tokio_postgres::IsolationLevel::Serializable,
    };
    let tx = bounded(d, client.build_transaction().isolation_level(level).start()).await?;
    let (verdict, before, after) = match req.op {
        OpKind::Read => read(&tx, cfg.fencing, req, d).await?,
        OpKind::Write => write(&tx, cfg.fencing, req, think, d).await?,
    };
    let seq: i64 = bounded(
        d,
        tx.query_one(
            "INSERT INTO log (time_ns, client, request_id, op, key, val, token, revision, \
             lease, verdict, token_before, token_after, value_before, value_after) \
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) RETURNING seq",
            &[
                &(monotonic_ns() as i64),
                &req.client,
                &(req.request_id as i64),
                &op_str(req.op),
                &req.key,
                &req.val,
                &req.token,
                &req.revision,
                &req.lease,
                &verdict_str(verdict),
                &before.token,
                &after.token,
                &before.value,
                &after.value,
            ],
        ),
    )
    .await?
    .get(0);
    bounded(d, tx.commit()).await?;
    Ok(Answer {
        verdict,
        value: after.value,
        token: after.token,
        seq: seq as u64,
    })
}

pub fn op_str(op: OpKind) -> &'static str {
    match op {
        OpKind::Read => "read",
        OpKind::Write => "write",
    }
}

pub fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Accepted => "accepted",
        Verdict::RejectedStale => "rejected-stale",
    }
}

/// `SELECT … FOR UPDATE` of the key's row: locks it, and reads the newest
/// committed version even at read committed.
async fn locked(tx: &Transaction<'_>, key: &str, d: Duration) -> PgResult<Option<Row>> {
    Ok(bounded(
        d,
        tx.query_opt(
            "SELECT value, max_token FROM kv WHERE key = $1 FOR UPDATE",
            &[&key],
        ),
    )
    .await?
    .map(|r| Row {
        value: r.get(0),
        token: r.get(1),
    }))
}

/// A key that is not in the table (the harness creates `k0`…`k{keys-1}`).
fn no_such_key(key: &str) -> anyhow::Error {
    anyhow::anyhow!("no key {key:?} in the kv table")
}

/// The UPDATE that applies a request, in one statement: the subquery locks the
/// row and yields its values before the update (RETURNING alone gives only the
/// new ones), `cond` is the fencing rule over them (`o.max_token`, `$3` the
/// token). Returns before and after, or `None` when `cond` refused.
async fn update(
    tx: &Transaction<'_>,
    set: &str,
    cond: &str,
    key: &str,
    val: Option<i64>,
    token: Option<i64>,
    d: Duration,
) -> PgResult<Option<(Row, Row)>> {
    let sql = format!(
        "UPDATE kv SET {set} \
         FROM (SELECT key, value, max_token FROM kv WHERE key = $1 FOR UPDATE) o \
         WHERE kv.key = o.key AND ({cond}) \
         RETURNING o.value, o.max_token, kv.value, kv.max_token"
    );
    Ok(bounded(d, tx.query_opt(&sql, &[&key, &val, &token]))
        .await?
        .map(|r| {
            (
                Row {
                    value: r.get(0),
                    token: r.get(1),
                },
                Row {
                    value: r.get(2),
                    token: r.get(3),
                },
            )
        }))
}

/// A read is always served. In `monotonic` (and `check-then-write`, which means
/// it) a read with a newer token raises the key's max token, in the same one
/// statement that reads: as fencecheck's own storage does.
async fn read(
    tx: &Transaction<'_>,
    fencing: Fencing,
    req: &Request,
    d: Duration,
) -> PgResult<(Verdict, Row, Row)> {
    let raises = fencing.intended() == Fencing::Monotonic && req.token.is_some();
    if raises {
        // A read has no value: `$2` is NULL, named only so that its type is known.
        if let Some((b, a)) = update(
            tx,
            "max_token = GREATEST(o.max_token, $3)",
            "$2::bigint IS NULL",
            &req.key,
            None,
            req.token,
            d,
        )
        .await?
        {
            return Ok((Verdict::Ok, b, a));
        }
    } else if let Some(r) = locked(tx, &req.key, d).await? {
        return Ok((Verdict::Ok, r, r));
    }
    Err(no_such_key(&req.key))
}

/// A write under `fencing`. The correct modes decide in one conditional UPDATE;
/// `check-then-write` is the classic mistake: read the max token, compare in the
/// client, then UPDATE unconditionally in a second statement.
async fn write(
    tx: &Transaction<'_>,
    fencing: Fencing,
    req: &Request,
    think: Duration,
    d: Duration,
) -> PgResult<(Verdict, Row, Row)> {
    let key = &req.key;
    let (set, cond) = match fencing {
        Fencing::Monotonic => (
            "value = $2, max_token = $3",
            "o.max_token IS NULL OR $3::bigint IS NULL OR $3 >= o.max_token",
        ),
        Fencing::Exact => (
            "value = $2, max_token = $3",
            "o.max_token IS NULL OR o.max_token = $3",
        ),
        Fencing::Off => (
            "value = $2, max_token = GREATEST(o.max_token, $3::bigint)",
            "true",
        ),
        Fencing::CheckThenWrite => {
            let sql = "SELECT value, max_token FROM kv WHERE key = $1";
            let seen = bounded(d, tx.query_opt(sql, &[key]))
                .await?
                .map(|r| Row {
                    value: r.get(0),
                    token: r.get(1),
                })
                .ok_or_else(|| no_such_key(key))?;
            let fresh = match (seen.token, req.token) {
                (Some(max), Some(t)) => t >= max,
                _ => true,
            };
            if !fresh {
                return Ok((Verdict::RejectedStale, seen, seen));
            }
            // The client's work between its check and its write: where a pause
            // lets a newer holder in.
            tokio::time::sleep(think).await;
            ("value = $2, max_token = $3", "true")
        }
    };
    if let Some((b, a)) = update(tx, set, cond, key, req.val, req.token, d).await? {
        return Ok((Verdict::Accepted, b, a));
    }
    // Refused by the rule: the row is still locked by the subquery, so this is the
    // value the rule was judged against.
    match locked(tx, key, d).await? {
        Some(r) => Ok((Verdict::RejectedStale, r, r)),
        None => Err(no_such_key(key)),
    }
}
