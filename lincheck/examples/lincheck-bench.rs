//! Benchmark: generated histories, each shape in a child process so its peak
//! memory (VmHWM) is its own.
//!
//! `cargo run --release -p fencecheck-lincheck --example lincheck-bench [-- --quick]`
//! runs the table; one shape alone (what the README's repeated figures use):
//! `lincheck-bench --child MODEL OPS KEYS INJECT(0|1) PENDING_FRACTION [CLIENTS] [BUDGET_S]`

use lincheck::gen::{generate, write_jsonl, GenConfig};
use lincheck::{check, parse_jsonl, Model, Validity};
use std::process::Command;
use std::time::{Duration, Instant};

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

struct Shape {
    model: &'static str,
    ops: usize,
    keys: usize,
    inject: bool,
    /// Fraction of ops that never return.
    timeout_rate: f64,
    clients: usize,
}

/// The check's time budget; a shape that hits it reports `unknown`.
const DEFAULT_BUDGET_S: u64 = 120;

fn child_check(s: &Shape, budget: Duration) -> Result<String, String> {
    let model: Model = s.model.parse()?;
    let mut cfg = GenConfig::new(model, s.ops, s.clients, s.keys, 42);
    cfg.inject_violation = s.inject;
    cfg.timeout_rate = s.timeout_rate;
    let t = Instant::now();
    let g = generate(&cfg);
    let gen_s = t.elapsed().as_secs_f64();
    let rss_before = status_kb("VmRSS:");
    let t = Instant::now();
    let r = check(&g.ops, model, Some(budget)).map_err(|e| e.to_string())?;
    let check_s = t.elapsed().as_secs_f64();
    let hwm = status_kb("VmHWM:");
    let visited: u64 = r.partitions.iter().map(|p| p.visited).sum();
    let expect = if s.inject {
        Validity::NotLinearizable
    } else {
        Validity::Linearizable
    };
    let verdict = match r.valid {
        Validity::Linearizable => "valid",
        Validity::NotLinearizable => "INVALID",
        Validity::Unknown => "unknown",
    };
    Ok(format!(
        "{verdict} {} {check_s:.3} {:.0} {:.0} {visited} {gen_s:.2}",
        if r.valid == expect && (s.inject == g.injected.is_some()) {
            "ok"
        } else {
            "WRONG"
        },
        mib(hwm),
        mib(rss_before),
    ))
}

fn child_parse(ops: usize) -> Result<String, String> {
    let cfg = GenConfig::new(Model::Kv, ops, 16, 1000, 7);
    let g = generate(&cfg);
    let path = std::env::temp_dir().join(format!("lincheck-bench-{}.jsonl", std::process::id()));
    write_jsonl(&path, &g.ops).map_err(|e| e.to_string())?;
    drop(g);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let rss_before = status_kb("VmRSS:");
    let t = Instant::now();
    let parsed = parse_jsonl(&path).map_err(|e| e.to_string());
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let parsed = parsed?;
    Ok(format!(
        "{} {secs:.3} {:.0} {:.0} {:.1}",
        parsed.len(),
        mib(status_kb("VmHWM:")),
        mib(rss_before),
        size as f64 / 1e6
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 7 && args[1] == "--child" {
        let s = Shape {
            model: if args[2] == "fenced" { "fenced" } else { "kv" },
            ops: args[3].parse().unwrap_or(0),
            keys: args[4].parse().unwrap_or(1),
            inject: args[5] == "1",
            timeout_rate: args[6].parse().unwrap_or(0.0),
            clients: args.get(7).and_then(|a| a.parse().ok()).unwrap_or(16),
        };
        let budget = args
            .get(8)
            .and_then(|a| a.parse().ok())
            .unwrap_or(DEFAULT_BUDGET_S);
        match child_check(&s, Duration::from_secs(budget)) {
            Ok(line) => println!("{line}"),
            Err(e) => println!("error {e}"),
        }
        return;
    }
    if args.len() >= 3 && args[1] == "--parse" {
        match child_parse(args[2].parse().unwrap_or(0)) {
            Ok(line) => println!("{line}"),
            Err(e) => println!("error {e}"),
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot find own executable: {e}");
            std::process::exit(2);
        }
    };
    let run = |extra: &[String]| -> String {
        match Command::new(&exe).args(extra).output() {
            Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Err(e) => format!("error {e}"),
        }
    };

    let parse_ops = if quick { 100_000 } else { 1_000_000 };
    let line = run(&["--parse".into(), parse_ops.to_string()]);
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() == 5 {
        println!(
            "parse: {} lines ({} MB) in {} s, peak RSS {} MiB (RSS before {} MiB)\n",
            f[0], f[4], f[1], f[2], f[3]
        );
    } else {
        println!("parse: {line}\n");
    }

    let big = if quick { 100_000 } else { 1_000_000 };
    let one = if quick { 10_000 } else { 100_000 };
    // (model, ops, keys, clients)
    let plain = [
        ("kv", big, 1000, 16),
        ("kv", big, 10, 16),
        ("kv", 10_000, 1, 16),
        ("kv", one, 1, 16),
        ("fenced", big, 1000, 16),
        ("fenced", big, 10, 16),
        ("fenced", one, 1, 16),
        // Many clients on one key: a wide concurrency window.
        ("kv", one, 1, 64),
        ("kv", big, 1, 64),
        ("fenced", one, 1, 64),
        ("fenced", big, 1, 64),
    ];
    // The same kind of shapes with 1% (and 5%) of operations never returning.
    let with_timeouts = [
        ("kv", big, 10, 16),
        ("kv", one, 1, 16),
        ("fenced", big, 10, 16),
        ("fenced", one, 1, 16),
    ];
    let many_timeouts = [("kv", one, 1, 16), ("fenced", one, 1, 16)];
    let mut shapes = vec![];
    for (list, timeout_rate) in [
        (&plain[..], 0.0),
        (&with_timeouts[..], 0.01),
        (&many_timeouts[..], 0.05),
    ] {
        for &(model, ops, keys, clients) in list {
            for inject in [false, true] {
                shapes.push(Shape {
                    model,
                    ops,
                    keys,
                    inject,
                    timeout_rate,
                    clients,
                });
            }
        }
    }

    println!("| model | ops | keys | clients | never return | injected | verdict | check s | peak RSS MiB | RSS before check MiB | configs visited |");
    println!("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|");
    for s in &shapes {
        let line = run(&[
            "--child".into(),
            s.model.into(),
            s.ops.to_string(),
            s.keys.to_string(),
            if s.inject { "1" } else { "0" }.into(),
            s.timeout_rate.to_string(),
            s.clients.to_string(),
        ]);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 7 {
            println!(
                "| {} | {} | {} | {} | {}% | {} | {} {} | {} | {} | {} | {} |",
                s.model,
                s.ops,
                s.keys,
                s.clients,
                s.timeout_rate * 100.0,
                if s.inject { "yes" } else { "no" },
                f[0],
                f[1],
                f[2],
                f[3],
                f[4],
                f[5]
            );
        } else {
            println!(
                "| {} | {} | {} | {} | {}% | {} | {line} | | | | |",
                s.model,
                s.ops,
                s.keys,
                s.clients,
                s.timeout_rate * 100.0,
                s.inject
            );
        }
    }
}
