//! JSON-lines input and the CLI command's exit codes.

use lincheck::gen::{generate, write_jsonl, GenConfig};
use lincheck::{
    check_with_options, command, parse_history_bytes, parse_jsonl, parse_jsonl_bytes, CheckOptions,
    DecidedBy, KvModel, Model, OpKind, Validity,
};
use std::path::PathBuf;
use std::time::Duration;

fn tmp(name: &str, body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("lincheck-test-{}-{name}", std::process::id()));
    std::fs::write(&p, body).expect("write temp file");
    p
}

const GOOD: &str = r#"{"client":3,"call_ns":1200,"return_ns":5400,"key":"k1","op":"write","arg":7,"out":null}
{"client":5,"call_ns":1500,"return_ns":6000,"key":"k1","op":"cas","arg":[7,9],"out":true}

{"client":21,"call_ns":1600,"return_ns":null,"key":"k1","op":"write","arg":3,"out":null,"unknown":true}
"#;

#[test]
fn parses_the_documented_format() {
    let (ops, lines) = parse_jsonl_bytes(GOOD.as_bytes()).expect("parses");
    assert_eq!(ops.len(), 3);
    assert_eq!(lines, vec![1, 2, 4]);
    assert_eq!(ops[1].op, OpKind::Cas);
    assert_eq!(ops[2].return_ns, None);
    assert!(ops[2].unknown);
}

#[test]
fn malformed_lines_report_their_number() {
    let body = format!("{GOOD}{{\"client\":1,\"call_ns\":5,\"key\":\"k\",\"op\":\"read\"}}\n");
    let e = parse_jsonl_bytes(body.as_bytes()).expect_err("return_ns missing");
    assert_eq!(e.line, 5);
    assert!(e.message.contains("return_ns"), "{}", e.message);
    assert!(e.to_string().starts_with("line 5:"));

    let e = parse_jsonl_bytes(b"{\"client\":1}\nnot json\n").expect_err("bad");
    assert_eq!(e.line, 1);
    let e = parse_jsonl_bytes(
        b"{\"client\":1,\"call_ns\":9,\"return_ns\":3,\"key\":\"k\",\"op\":\"read\",\"arg\":null,\"out\":1}\n",
    )
    .expect_err("return before call");
    assert_eq!(e.line, 1);
    assert!(e.message.contains("before"));
}

#[test]
fn line_numbers_survive_parallel_chunks() {
    let mut body = String::new();
    for i in 0..5000 {
        body.push_str(&format!(
            "{{\"client\":1,\"call_ns\":{i},\"return_ns\":{i},\"key\":\"k\",\"op\":\"read\",\"arg\":null,\"out\":null}}\n"
        ));
    }
    body.push_str("{oops}\n");
    let e = parse_jsonl_bytes(body.as_bytes()).expect_err("last line is bad");
    assert_eq!(e.line, 5001);
}

#[test]
fn command_exit_codes() {
    let ok = tmp("ok.jsonl", GOOD);
    assert_eq!(command(&ok, "kv", Duration::from_secs(10)), 0);
    assert_eq!(command(&ok, "nope", Duration::from_secs(10)), 2);
    assert_eq!(
        command(
            &PathBuf::from("/nonexistent/x.jsonl"),
            "kv",
            Duration::from_secs(1)
        ),
        2
    );
    // Shape errors are found at check time but still point at the line.
    assert_eq!(command(&ok, "fenced", Duration::from_secs(10)), 2);

    let bad = tmp(
        "bad.jsonl",
        &format!("{GOOD}{{\"client\":1,\"call_ns\":7000,\"return_ns\":8000,\"key\":\"k1\",\"op\":\"read\",\"arg\":null,\"out\":7}}\n"),
    );
    assert_eq!(command(&bad, "kv", Duration::from_secs(10)), 1);
    let garbage = tmp("garbage.jsonl", "{\n");
    assert_eq!(command(&garbage, "kv", Duration::from_secs(10)), 2);

    // A search that needs more than a few thousand steps cannot finish in
    // zero time.
    let mut cfg = GenConfig::new(Model::Kv, 20_000, 16, 1, 3);
    cfg.inject_violation = true;
    let g = generate(&cfg);
    let slow =
        std::env::temp_dir().join(format!("lincheck-test-{}-slow.jsonl", std::process::id()));
    write_jsonl(&slow, &g.ops).expect("write");
    assert_eq!(parse_jsonl(&slow).expect("round trip"), g.ops);
    assert_eq!(command(&slow, "kv", Duration::ZERO), 3);
    for p in [ok, bad, garbage, slow] {
        let _ = std::fs::remove_file(p);
    }
}

/// Two writes of one value and a read of it: the values alone cannot order
/// them, a log can (if it agrees with real time).
fn logged(seqs: [&str; 3]) -> String {
    format!(
        "{{\"client\":1,\"call_ns\":0,\"return_ns\":10,\"key\":\"k\",\"op\":\"write\",\"arg\":1,\"out\":null,\"log\":{}}}\n\
         {{\"client\":2,\"call_ns\":20,\"return_ns\":30,\"key\":\"k\",\"op\":\"write\",\"arg\":1,\"out\":null,\"log\":{}}}\n\
         \n\
         {{\"client\":1,\"call_ns\":40,\"return_ns\":50,\"key\":\"k\",\"op\":\"read\",\"arg\":null,\"out\":1,\"log\":{}}}\n",
        seqs[0], seqs[1], seqs[2]
    )
}

#[test]
fn log_positions_are_read_and_verified() {
    let h = parse_history_bytes(logged(["1", "2", "3"]).as_bytes()).expect("parses");
    assert_eq!(h.lines, vec![1, 2, 4]);
    assert_eq!(h.log, Some(vec![Some(1), Some(2), Some(3)]));
    let opts = CheckOptions {
        log: h.log.as_deref(),
        ..CheckOptions::default()
    };
    let r = check_with_options(&h.ops, &KvModel, &opts).expect("input");
    assert_eq!(r.valid, Validity::Linearizable);
    assert_eq!(r.partitions[0].decided_by, DecidedBy::Log);
    // Without the log the same history goes to the search.
    let r = check_with_options(&h.ops, &KvModel, &CheckOptions::default()).expect("input");
    assert_eq!(r.partitions[0].decided_by, DecidedBy::Search);

    // A log against real time is not believed: the search decides, and the
    // fallback says why the log's order did not hold.
    let h = parse_history_bytes(logged(["2", "1", "3"]).as_bytes()).expect("parses");
    let opts = CheckOptions {
        log: h.log.as_deref(),
        ..CheckOptions::default()
    };
    let r = check_with_options(&h.ops, &KvModel, &opts).expect("input");
    assert_eq!(r.valid, Validity::Linearizable);
    assert_eq!(r.partitions[0].decided_by, DecidedBy::Search);
    let why = r.partitions[0].fallback.as_deref().unwrap_or_default();
    assert!(why.starts_with("log order:"), "{why}");

    // Ops without a position are outside the log; no position anywhere, no log.
    let h = parse_history_bytes(logged(["1", "null", "3"]).as_bytes()).expect("parses");
    assert_eq!(h.log, Some(vec![Some(1), None, Some(3)]));
    assert_eq!(
        parse_history_bytes(GOOD.as_bytes()).expect("parses").log,
        None
    );

    let e = parse_history_bytes(logged(["1", "-2", "3"]).as_bytes()).expect_err("negative");
    assert_eq!(e.line, 2);
    assert!(e.message.starts_with("field `log`"), "{}", e.message);
}

#[test]
fn command_uses_the_log() {
    let ok = tmp("logged.jsonl", &logged(["1", "2", "3"]));
    assert_eq!(command(&ok, "kv", Duration::from_secs(10)), 0);
    let against = tmp("against.jsonl", &logged(["2", "1", "3"]));
    assert_eq!(command(&against, "kv", Duration::from_secs(10)), 0);
    for p in [ok, against] {
        let _ = std::fs::remove_file(p);
    }
}
