//! `fencecheck-storage`: the fencing KV service as a standalone binary (used by the
//! docker backend's image; the process backend runs the same code through the hidden
//! `fencecheck storage` subcommand).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use fencecheck_storage::{serve, Durability, Fencing};

#[derive(Parser)]
#[command(version, about = "Fencing-aware KV service with a durable request log")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Durable request log (JSON lines), appended to.
    #[arg(long, default_value = "storage.jsonl")]
    log: PathBuf,
    /// monotonic | exact | off
    #[arg(long, default_value = "monotonic")]
    fencing: Fencing,
    /// flush (to the kernel: survives a kill of this process) | fsync (per record)
    #[arg(long, default_value = "flush")]
    durability: Durability,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = serve(
        args.listen,
        args.log,
        args.fencing,
        args.durability,
        None,
        shutdown,
    )
    .await
    {
        eprintln!("fencecheck-storage: {e:#}");
        std::process::exit(2);
    }
}
