//! The benchmark is wired into the CLI; make sure a tiny run works end to
//! end and produces plausible numbers.

use faultproxy::bench::{bench, BenchOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_bench_produces_figures() {
    let opts = BenchOptions {
        round_trips: 200,
        warmup_round_trips: 20,
        message_size: 64,
        bulk_bytes: 8 << 20,
        bulk_runs: 1,
    };
    let report = bench(opts).await.unwrap();
    for rtt in [report.direct_rtt, report.proxied_rtt] {
        assert!(!rtt.p50.is_zero());
        assert!(rtt.p99 >= rtt.p50);
    }
    assert!(report.direct_mbps > 0.0 && report.proxied_mbps > 0.0);
    let table = report.to_string();
    assert!(
        table.contains("direct") && table.contains("proxied"),
        "{table}"
    );
}
