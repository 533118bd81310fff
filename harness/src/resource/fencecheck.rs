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
            "protocol: a {:?} answered with verdict {:?}",
            req.op,
            a.verdict
        );
    }
    if req.op == OpKind::Write && a.verdict == Verdict::Accepted && a.value != req.val {
        bail!(
            "protocol: write of {:?} accepted but the answer's value is {:?}",
            req.val,
            a.value
        );
    }
    Ok(a)
}

/// Before a run against a service of the user's own: one tokenless read of `k0`,
/// straight to `url`, must be answered by the protocol. A tokenless read changes
/// nothing in a storage that follows the protocol.
pub async fn probe(url: &str, timeout: Duration) -> Result<()> {
    let http = reqwest::Client::builder().timeout(timeout).build()?;
    let req = Request {
        op: OpKind::Read,
        key: "k0".into(),
        val: None,
        token: None,
        revision: None,
        lease: None,
        client: "probe".into(),
        request_id: 0,
    };
    call(&http, url, &req).await.map(|_| ())
}
