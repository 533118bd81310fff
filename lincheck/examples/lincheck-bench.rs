//! Benchmark: generated histories, each shape in a child process so its peak
//! memory (VmHWM) is its own.
//!
//! `cargo run --release -p fencecheck-lincheck --example lincheck-bench [-- --quick]`
//! runs the table; one shape alone (what the README's repeated figures use):
//! `lincheck-bench --child MODEL OPS KEYS INJECT(0|1) PENDING_FRACTION [CLIENTS] [BUDGET_S] [fast|search]`
//! (`search`: the finder and the search alone, as before the witness path).

use lincheck::gen::{generate, write_jsonl, GenConfig};
use lincheck::{
    check_with_options, parse_jsonl, CheckOptions, FencedModel, KvModel, Model, Validity,
};
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

fn child_check(s: &Shape, budget: Duration, witnesses: bool) -> Result<String, String> {
    let model: Model = s.model.parse()?;
    let mut cfg = GenConfig::new(model, s.ops, s.clients, s.keys, 42);
    cfg.inject_violation = s.inject;
    cfg.timeout_rate = s.timeout_rate;
    let t = Instant::now();
    let g = generate(&cfg);
    let gen_s = t.elapsed().as_secs_f64();
    let rss_before = status_kb("VmRSS:");
    let t = Instant::now();
    let opts = CheckOptions {
        timeout: Some(budget),
        witnesses,
        log: None,
    };
    let r = match model {
        Model::Kv => check_with_options(&g.ops, &KvModel, &opts),
        Model::Fenced => check_with_options(&g.ops, &FencedModel, &opts),
    }
    .map_err(|e| e.to_string())?;
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
    // Which path decided how many partitions, e.g. `witness:10,search:0`.
    let mut paths: Vec<(String, usize)> = Vec::new();
    for p in &r.partitions {
        let name = p.decided_by.to_string();
        match paths.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => paths.push((name, 1)),
        }
    }
    if let Some(why) = r.partitions.iter().find_map(|p| p.fallback.as_ref()) {
        eprintln!("first fallback: {why}");
    }
    let paths: Vec<String> = paths.iter().map(|(n, c)| format!("{n}:{c}")).collect();
    Ok(format!(
        "{verdict} {} {check_s:.3} {:.0} {:.0} {visited} {gen_s:.2} {}",
        if r.valid == expect && (s.inject == g.injected.is_some()) {
            "ok"
        } else {
            "WRONG"
        },
        mib(hwm),
        mib(rss_before),
        paths.join(","),
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
        let witnesses = args.get(9).is_none_or(|a| a != "search");
        match child_check(&s, Duration::from_secs(budget), witnesses) {
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

    // Every shape at 100k and 1M operations (10k and 100k with --quick).
    let sizes = if quick {
        [10_000, 100_000]
    } else {
        [100_000, 1_000_000]
    };
    // (model, keys, clients, fraction of ops that never return)
    let kinds = [
        ("kv", 1000, 16, 0.0),
        ("kv", 10, 16, 0.0),
        ("kv", 1, 16, 0.0),
        ("kv", 1, 64, 0.0),
        ("kv", 10, 16, 0.01),
        ("kv", 1, 16, 0.01),
        ("kv", 1, 16, 0.05),
        ("fenced", 1000, 16, 0.0),
        ("fenced", 10, 16, 0.0),
        ("fenced", 1, 16, 0.0),
        ("fenced", 1, 64, 0.0),
        ("fenced", 10, 16, 0.01),
        ("fenced", 1, 16, 0.01),
        ("fenced", 1, 16, 0.05),
    ];
    let mut shapes = vec![];
    for &(model, keys, clients, timeout_rate) in &kinds {
        for ops in sizes {
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
    // `--compare`: each shape also with the finder and the search alone.
    let compare = args.iter().any(|a| a == "--compare");
    let budget = if quick { "30" } else { "60" };

    println!("| model | ops | keys | clients | never return | injected | verdict | check s | decided by | peak RSS MiB | configs visited | search alone: verdict, check s, peak RSS MiB |");
    println!("|---|---:|---:|---:|---:|---|---|---:|---|---:|---:|---|");
    for s in &shapes {
        let child = |path: &str| {
            run(&[
                "--child".into(),
                s.model.into(),
                s.ops.to_string(),
                s.keys.to_string(),
                if s.inject { "1" } else { "0" }.into(),
                s.timeout_rate.to_string(),
                s.clients.to_string(),
                budget.into(),
                path.into(),
            ])
        };
        let line = child("fast");
        let other = if compare {
            let o = child("search");
            let g: Vec<&str> = o.split_whitespace().collect();
            if g.len() == 8 {
                format!("{} {}, {}, {}", g[0], g[1], g[2], g[3])
            } else {
                o
            }
        } else {
            String::new()
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let head = format!(
            "| {} | {} | {} | {} | {}% | {} |",
            s.model,
            s.ops,
            s.keys,
            s.clients,
            s.timeout_rate * 100.0,
            if s.inject { "yes" } else { "no" },
        );
        if f.len() == 8 {
            println!(
                "{head} {} {} | {} | {} | {} | {} | {other} |",
                f[0], f[1], f[2], f[7], f[3], f[5]
            );
        } else {
            println!("{head} {line} | | | | | {other} |");
        }
    }
}
