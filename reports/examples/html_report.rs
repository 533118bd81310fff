//! Renders report.html outside the harness, to look at it or to time it.
//!
//! ```sh
//! # a recorded run (report.json + history.jsonl in RUN_DIR); writes OUT_DIR/report.html
//! cargo run -p fencecheck-reports --example html_report -- run RUN_DIR [OUT_DIR]
//! # a synthetic run of OPS ops over WORKERS workers; with --chromium, also times the
//! # page in headless Chromium (the script's own figure, read back with --dump-dom)
//! cargo run --release -p fencecheck-reports --example html_report -- synthetic 100000 16 OUT_DIR --chromium
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use fencecheck_reports::{write_html, Report};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("html_report: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("run") => {
            let dir = PathBuf::from(args.get(1).ok_or("run needs RUN_DIR")?);
            let out = args
                .get(2)
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.clone());
            let report = Report::read_json(&dir.join("report.json")).map_err(|e| e.to_string())?;
            let history = std::fs::read_to_string(dir.join("history.jsonl"))
                .map_err(|e| format!("history.jsonl: {e}"))?;
            let tl = common::timeline_from_history(&report, &history);
            std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
            let path = write_html(&out, &report, &tl).map_err(|e| e.to_string())?;
            println!("{}", path.display());
            Ok(())
        }
        Some("synthetic") => {
            let ops: usize = parse(args.get(1), "OPS")?;
            let workers: u32 = parse(args.get(2), "WORKERS")?;
            let out = PathBuf::from(args.get(3).ok_or("synthetic needs OUT_DIR")?);
            let (report, tl) = common::synthetic(workers, ops, 60);
            std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let path = write_html(&out, &report, &tl).map_err(|e| e.to_string())?;
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            println!(
                "{}: {} ops, {} workers, {:.1} MB, rendered by Rust in {:.0} ms",
                path.display(),
                tl.ops.len(),
                workers,
                size as f64 / 1e6,
                t.elapsed().as_secs_f64() * 1e3
            );
            if args.iter().any(|a| a == "--chromium") {
                for i in 0..3 {
                    let dom = chromium_dump(&path)?;
                    println!(
                        "chromium run {}: rendered={} render-ms={} script-ms={} parse-ms={} errors={}",
                        i + 1,
                        attr(&dom, "data-rendered").unwrap_or("-"),
                        attr(&dom, "data-render-ms").unwrap_or("-"),
                        attr(&dom, "data-script-ms").unwrap_or("-"),
                        attr(&dom, "data-parse-ms").unwrap_or("-"),
                        attr(&dom, "data-errors").unwrap_or("none"),
                    );
                }
            }
            Ok(())
        }
        _ => Err(
            "usage: html_report run RUN_DIR [OUT_DIR] | synthetic OPS WORKERS OUT_DIR [--chromium]"
                .into(),
        ),
    }
}

fn parse<T: std::str::FromStr>(a: Option<&String>, what: &str) -> Result<T, String> {
    a.ok_or(format!("missing {what}"))?
        .parse()
        .map_err(|_| format!("bad {what}"))
}

fn chromium_dump(path: &Path) -> Result<String, String> {
    let abs = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,2400",
            "--dump-dom",
        ])
        .arg(format!("file://{}", abs.display()))
        .output()
        .map_err(|e| format!("chromium: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `name="…"` on the `<body>` tag of a dumped DOM.
fn attr<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let at = body.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &body[at..];
    Some(&rest[..rest.find('"')?])
}
