//! The report people read, opened the way people open it: a real run of
//! `no-fencing.toml`, its `report.html` loaded in headless Chromium (Debian's
//! `chromium`, installed by `ci/bootstrap.sh`), scripts run, the drawn DOM checked,
//! and a screenshot saved next to the report.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn chromium() -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1400,2400",
    ]);
    c
}

/// Text between `<tag id="ID"` (or with that class) and the end of the document, for
/// locating attributes of one element.
fn element<'a>(dom: &'a str, marker: &str) -> &'a str {
    let at = dom
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in the rendered page"));
    let start = dom[..at].rfind('<').unwrap_or(at);
    let end = dom[at..].find('>').map(|e| at + e + 1).unwrap_or(dom.len());
    &dom[start..end]
}

#[test]
fn no_fencing_report_renders_in_chromium_with_every_section() {
    assert!(
        Command::new("chromium").arg("--version").output().is_ok(),
        "chromium is not installed: run ci/bootstrap.sh --tests (it installs Debian's chromium)"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .current_dir(repo_root())
        .args([
            "scenario",
            "scenarios/no-fencing.toml",
            "--quiet",
            "--backend",
            "process",
        ])
        .args(["--duration", "14s", "--out"])
        .arg(&out)
        .output()
        .expect("run fencecheck");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("json"))
            .expect("report");
    let html_path = out.join("report.html");
    let html = std::fs::read_to_string(&html_path).expect("report.html");
    // Self-contained: nothing is fetched from anywhere. (URLs may appear as text —
    // a worker's error message names the storage URL it could not reach — but no
    // element may load one.)
    let lower = html.to_ascii_lowercase();
    for needle in [
        "<script src",
        "<link ",
        "<iframe",
        "<img",
        "@import",
        "src=\"http",
        "href=\"http",
        "url(http",
    ] {
        assert!(!lower.contains(needle), "report.html loads {needle}");
    }

    let url = format!("file://{}", html_path.display());
    let dump = chromium()
        .arg("--virtual-time-budget=5000")
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dump.stdout).to_string();
    let body = element(&dom, "data-rendered");
    assert!(
        body.contains("data-rendered=\"ok\""),
        "scripts did not finish: {body}"
    );
    assert!(!body.contains("data-errors"), "script errors: {body}");

    // Verdict banner, every checker, one lane per worker, fault shading.
    assert!(element(&dom, "id=\"verdict\"").contains("pass"));
    for c in ["fencing", "mutex", "counter", "linearizable"] {
        let sec = element(&dom, &format!("id=\"check-{c}\""));
        assert!(sec.contains("data-valid"), "{sec}");
    }
    assert!(element(&dom, "id=\"check-fencing\"").contains("data-valid=\"false\""));
    let workers = report["run"]["workers"].as_u64().expect("workers");
    let lanes = dom.matches("tl-lane worker").count() as u64;
    assert_eq!(lanes, workers, "one timeline lane per worker");
    let faults = report["faults"].as_array().expect("faults").len();
    assert!(faults >= 1);
    assert_eq!(
        dom.matches("class=\"tl-fault").count(),
        faults,
        "every fault window listed"
    );

    // The stale write is in the fencing section and links to the timeline.
    let item = element(&dom, "id=\"fencing-1\"");
    assert!(item.starts_with("<li"), "{item}");
    let at = dom.find("id=\"fencing-1\"").expect("item");
    let rest = &dom[at..at + dom[at..].find("</li>").expect("end of item")];
    assert!(rest.contains("data-goto"), "no timeline link in {rest}");

    // A screenshot for people, next to the report.
    let png = out.join("report.png");
    let shot = chromium()
        .arg("--virtual-time-budget=5000")
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .expect("chromium --screenshot");
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).expect("png");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000,
        "{} bytes",
        bytes.len()
    );
}
