//! The fenced-resource seam, worker side: where a worker's reads and writes land.
//! Requests and answers are the storage protocol's (`fencecheck_storage::Request`,
//! `Answer`): op, key, value, token, and the grant and session they come from.
//! The first implementation is fencecheck's own storage over HTTP; a database or
//! the user's own service goes beside it.

pub mod fencecheck;
pub mod postgres;

use anyhow::Result;
use fencecheck_storage::{Answer, Request};

#[async_trait::async_trait]
pub trait FencedResource: Send {
    /// Sends one request. An error means the outcome is unknown: the request may or
    /// may not have reached the resource.
    async fn call(&mut self, req: &Request) -> Result<Answer>;

    /// Does this resource want a write's think time inside the write, between its
    /// check and its update (PostgreSQL `check-then-write`)? Otherwise the worker
    /// thinks between the read and the write.
    fn thinks_inside_writes(&self) -> bool {
        false
    }

    /// A write with the think time inside it (see `thinks_inside_writes`).
    async fn call_thinking(&mut self, req: &Request, think: std::time::Duration) -> Result<Answer> {
        tokio::time::sleep(think).await;
        self.call(req).await
    }

    /// Retries the resource made since the last call of this (PostgreSQL:
    /// serialization failures, SQLSTATE 40001), for the report.
    fn take_retries(&mut self) -> u32 {
        0
    }
}
