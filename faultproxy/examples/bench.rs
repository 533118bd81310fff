//! Prints the loopback benchmark table.
//!
//! `cargo run --release -p fencecheck-faultproxy --example bench [round_trips] [bulk_MiB]`

use faultproxy::bench::{bench, BenchOptions};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut opts = BenchOptions::default();
    let mut args = std::env::args().skip(1);
    if let Some(n) = args.next() {
        opts.round_trips = n.parse().map_err(std::io::Error::other)?;
    }
    if let Some(mib) = args.next() {
        let mib: u64 = mib.parse().map_err(std::io::Error::other)?;
        opts.bulk_bytes = mib << 20;
    }
    let report = bench(opts).await?;
    println!("{report}");
    Ok(())
}
