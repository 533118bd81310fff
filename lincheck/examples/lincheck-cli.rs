//! Stand-in for `fencecheck lincheck` until the harness wires it up, plus a
//! generator front end.
//!
//! cargo run --release -p fencecheck-lincheck --example lincheck-cli -- check FILE [--model kv|fenced] [--timeout 60s]
//! cargo run --release -p fencecheck-lincheck --example lincheck-cli -- gen FILE [--model kv|fenced] [--ops N] [--keys K] [--clients C] [--seed S] [--timeouts RATE] [--inject]

use lincheck::gen::{generate, write_jsonl, GenConfig};
use lincheck::{command, Model};
use std::path::Path;
use std::time::Duration;

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: lincheck-cli check FILE [--model kv|fenced] [--timeout 60s] | gen FILE [...]";
    let (Some(cmd), Some(file)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let model = flag(&args, "--model").unwrap_or("kv");
    match cmd.as_str() {
        "check" => {
            let timeout = match flag(&args, "--timeout").map(parse_duration) {
                None => Duration::from_secs(60),
                Some(Some(d)) => d,
                Some(None) => {
                    eprintln!("bad --timeout (expected e.g. 60s, 500ms, 2m)");
                    std::process::exit(2);
                }
            };
            std::process::exit(command(Path::new(file), model, timeout));
        }
        "gen" => {
            let Ok(m) = model.parse::<Model>() else {
                eprintln!("unknown model {model}");
                std::process::exit(2);
            };
            let num =
                |name: &str, d: u64| flag(&args, name).and_then(|v| v.parse().ok()).unwrap_or(d);
            let mut cfg = GenConfig::new(
                m,
                num("--ops", 1000) as usize,
                num("--clients", 16) as usize,
                num("--keys", 1) as usize,
                num("--seed", 1),
            );
            cfg.timeout_rate = flag(&args, "--timeouts")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            cfg.inject_violation = args.iter().any(|a| a == "--inject");
            let g = generate(&cfg);
            if let Err(e) = write_jsonl(Path::new(file), &g.ops) {
                eprintln!("cannot write {file}: {e}");
                std::process::exit(2);
            }
            if let Some(i) = g.injected {
                println!("injected a stale read at line {}", i + 1);
            }
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
