//! fencecheck's own storage service (HTTP + JSON) behind the fenced-resource seam.

use std::time::Duration;

use anyhow::Result;
use fencecheck_storage::{Answer, Request};

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
        let resp = self.http.post(&self.url).json(req).send().await?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!(
                "storage answered {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(resp.json::<Answer>().await?)
    }
}
