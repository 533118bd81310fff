//! The fenced-resource seam, worker side: where a worker's reads and writes land.
//! Requests and answers are the storage protocol's (`fencecheck_storage::Request`,
//! `Answer`): op, key, value, token, and the grant and session they come from.
//! The first implementation is fencecheck's own storage over HTTP; a database or
//! the user's own service goes beside it.

pub mod fencecheck;

use anyhow::Result;
use fencecheck_storage::{Answer, Request};

#[async_trait::async_trait]
pub trait FencedResource: Send {
    /// Sends one request. An error means the outcome is unknown: the request may or
    /// may not have reached the resource.
    async fn call(&mut self, req: &Request) -> Result<Answer>;
}
