//! Benchmark: generated histories (16 clients), each shape in a child process
//! so its peak memory (VmHWM) is its own.
//!
//! `cargo run --release -p fencecheck-lincheck --example lincheck-bench [-- --quick]`

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
    timeout_rate: f64,
}

fn child_check(s: &Shape) -> Result<String, String> {
    let model: Model = s.model.parse()?;
    let mut cfg = GenConfig::new(model, s.ops, 16, s.keys, 42);
    cfg.inject_violation = s.inject;
    cfg.timeout_rate = s.timeout_rate;
    let t = Instant::now();
    let g = generate(&cfg);
    let gen_s = t.elapsed().as_secs_f64();
    let rss_before = status_kb("VmRSS:");
    let t = Instant::now();
    let r = check(&g.ops, model, Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
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
        };
        match child_check(&s) {
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
    let plain = [
        ("kv", big, 1000),
        ("kv", big, 10),
        ("kv", 10_000, 1),
        ("kv", one, 1),
        ("fenced", big, 1000),
        ("fenced", big, 10),
        ("fenced", one, 1),
    ];
    // The same shapes again with 1% of operations never returning.
    let with_timeouts = [
        ("kv", big, 10),
        ("kv", one, 1),
        ("fenced", big, 10),
        ("fenced", one, 1),
    ];
    let mut shapes = vec![];
    for (list, timeout_rate) in [(&plain[..], 0.0), (&with_timeouts[..], 0.01)] {
        for &(model, ops, keys) in list {
            for inject in [false, true] {
                shapes.push(Shape {
                    model,
                    ops,
                    keys,
                    inject,
                    timeout_rate,
                });
            }
        }
    }

    println!("| model | ops | keys | timeouts | injected | verdict | check s | peak RSS MiB | RSS before check MiB | configs visited |");
    println!("|---|---:|---:|---:|---|---|---:|---:|---:|---:|");
    for s in &shapes {
        let line = run(&[
            "--child".into(),
            s.model.into(),
            s.ops.to_string(),
            s.keys.to_string(),
            if s.inject { "1" } else { "0" }.into(),
            s.timeout_rate.to_string(),
        ]);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 7 {
            println!(
                "| {} | {} | {} | {}% | {} | {} {} | {} | {} | {} | {} |",
                s.model,
                s.ops,
                s.keys,
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
                "| {} | {} | {} | {}% | {} | {line} | | | | |",
                s.model,
                s.ops,
                s.keys,
                s.timeout_rate * 100.0,
                s.inject
            );
        }
    }
}
