//! A storage that speaks fencecheck's storage protocol over HTTP
//! (`docs/storage-protocol.md`): fencecheck's own storage service, or the user's
//! own service (`[storage] kind = "http"`), behind the fenced-resource seam.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use fencecheck_storage::{Answer, OpKind, Request, Verdict};

use super::FencedResource;

pub struct HttpStorage {
    http: reqwest::Client,
    url: String,
}

impl HttpStorage {
    /// `url` is the storage as this worker reaches it (through its own proxy).
    pub fn new(url: String, timeout: Duration) -> Result<HttpStorage> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(HttpStorage { http, url })
    }
}

#[async_trait::async_trait]
impl FencedResource for HttpStorage {
    async fn call(&mut self, req: &Request) -> Result<Answer> {
        call(&self.http, &self.url, req).await
    }
}

/// One request. Anything that is not a protocol answer — a status other than 2xx,
/// a body that is not an answer, a verdict that does not fit the operation — is an
/// error naming why: the worker records the call as unknown with that reason.
pub async fn call(http: &reqwest::Client, url: &str, req: &Request) -> Result<Answer> {
    let resp = http.post(url).json(req).send().await?;
    let status = resp.status();
    let body = resp.bytes().await.context("reading the answer")?;
    if !status.is_success() {
        bail!(
            "storage answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
    }
    let a: Answer = serde_json::from_slice(&body).map_err(|e| {
        anyhow::anyhow!(
            "protocol: the answer is not a storage answer ({e}): {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )
    })?;
    let fits = match req.op {
        OpKind::Read => a.verdict == Verdict::Ok,
        OpKind::Write => matches!(a.verdict, Verdict::Accepted | Verdict::RejectedStale),
    };
    if !fits {
        bail!(
            "protocol: a {} answered with verdict {}",
            op_word(req.op),
            verdict_word(a.verdict)
        );
    }
    if req.op == OpKind::Write && a.verdict == Verdict::Accepted && a.value != req.val {
        let show = |v: Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
        bail!(
            "protocol: a write of {} accepted but the answer's value is {}",
            show(req.val),
            show(a.value)
        );
    }
    Ok(a)
}

/// The protocol's spelling of an operation (`docs/storage-protocol.md`).
pub fn op_word(op: OpKind) -> &'static str {
    match op {
        OpKind::Read => "read",
        OpKind::Write => "write",
    }
}

/// The protocol's spelling of a verdict.
pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Accepted => "accepted",
        Verdict::RejectedStale => "rejected-stale",
    }
}

/// Before a run against a service of the user's own: one tokenless read of every
/// key the workload will use (`keys`: `k0`, `k1`, …), straight to `url`, each
/// answered by the protocol; returns each key's answer (what it held). A
/// tokenless read changes nothing in a storage that follows the protocol.
pub async fn probe(url: &str, timeout: Duration, keys: u32) -> Result<Vec<(String, Answer)>> {
    let http = reqwest::Client::builder().timeout(timeout).build()?;
    let mut out = Vec::new();
    for k in 0..keys {
        let key = format!("k{k}");
        let req = Request {
            op: OpKind::Read,
            key: key.clone(),
            val: None,
            token: None,
            revision: None,
            lease: None,
            client: "probe".into(),
            request_id: u64::from(k),
        };
        let a = call(&http, url, &req)
            .await
            .with_context(|| format!("reading {key}"))?;
        out.push((key, a));
    }
    Ok(out)
}
