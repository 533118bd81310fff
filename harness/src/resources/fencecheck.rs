//! A storage that speaks fencecheck's storage protocol over HTTP
//! (`docs/storage-protocol.md`): fencecheck's own storage service, or the user's
//! own service (`[storage] kind = "http"`), behind the fenced-resource seam.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fencecheck_storage::{Answer, OpKind, Request, Verdict};

use super::{FencedResource, Probed, Reach, Resource};
use crate::record::before::KeyBefore;
use crate::scenario::{Scenario, ScenarioError, Source};

/// The harness side of an HTTP storage: fencecheck's own (`kind = "fencecheck"`,
/// started by the backend) or the user's (`kind = "http"`, at `url`).
pub struct Http {
    /// The user's storage (`kind = "http"`); `None`: fencecheck's own.
    url: Option<String>,
    durability: &'static str,
    keys: u32,
    /// The path (and query) of the storage's endpoint: "/" for fencecheck's own,
    /// the `url`'s for the user's (known once probed).
    path: String,
}

impl Http {
    /// fencecheck's own storage, started by the backend.
    pub fn ours(s: &Scenario) -> Http {
        Http {
            url: None,
            durability: s.storage.durability.as_str(),
            keys: s.workload.keys,
            path: "/".into(),
        }
    }

    /// The user's own storage at `[storage] url`.
    pub fn users(s: &Scenario) -> Http {
        Http {
            url: s.storage.url.clone(),
            ..Http::ours(s)
        }
    }
}

#[async_trait::async_trait]
impl Resource for Http {
    /// A storage of the user's own (`kind = "http"`): its address, once it has
    /// answered a protocol probe of every workload key, and what each key held.
    /// Unreachable or not speaking the protocol is bad input, found before anything
    /// starts (exit 2, naming the `url` line); a key that holds data is not (the run
    /// goes on and fails on it, naming the key).
    async fn probe(&mut self, source: &Source) -> Result<Option<Probed>, ScenarioError> {
        let Some(url) = self.url.as_deref() else {
            return Ok(None);
        };
        let bad = |message: String| {
            source.error_at_key("url", format!("storage.url = {url:?}: {message}"))
        };
        let (host, port, path) = crate::scenario::http_url(url).map_err(&bad)?;
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| bad(format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(format!("{host} resolves to no address")))?;
        let direct = format!("http://{addr}{path}");
        let answers = probe(&direct, Duration::from_secs(5), self.keys)
            .await
            .map_err(|e| bad(format!("no protocol answer from {direct}: {e:#}")))?;
        let before = answers
            .into_iter()
            .map(|(key, a)| KeyBefore {
                key,
                value: a.value,
                token: a.token,
            })
            .collect();
        self.path = path;
        Ok(Some(Probed { addr, before }))
    }

    fn describe(&self) -> String {
        match &self.url {
            Some(url) => format!("http {url}"),
            None => format!("fencecheck ({})", self.durability),
        }
    }

    fn reach(&self, addr: SocketAddr) -> Reach {
        Reach::Http {
            url: format!("http://{addr}{}", self.path),
        }
    }
}

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
