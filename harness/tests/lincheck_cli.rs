//! `fencecheck lincheck` on generated histories, through the real binary: the
//! right verdict with and without an injected violation, at several sizes and on
//! both models, and a located error for bad input.

mod common;

use std::path::Path;

use common::*;
use lincheck::gen::{generate, write_jsonl, GenConfig};
use lincheck::Model;

fn verdict(file: &Path, model: &str) -> Option<i32> {
    let o = bin()
        .args(["lincheck", "--model", model, "--timeout", "120s"])
        .arg(file)
        .output()
        .expect("run fencecheck lincheck");
    o.status.code()
}

fn case(model: Model, name: &str, ops: usize, keys: usize, inject: bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("h.jsonl");
    // A tiny history may have no overwritten value to read stale; try a few seeds.
    let g = (0..50)
        .map(|s| {
            let clients = (ops / 5).clamp(2, 16);
            let mut cfg = GenConfig::new(model, ops, clients, keys, 42 + s);
            cfg.inject_violation = inject;
            generate(&cfg)
        })
        .find(|g| g.injected.is_some() == inject)
        .expect("a seed where the generator could inject as asked");
    write_jsonl(&file, &g.ops).expect("write history");
    let want = if inject { 1 } else { 0 };
    assert_eq!(
        verdict(&file, name),
        Some(want),
        "{name}, {ops} ops over {keys} keys, injected: {inject}"
    );
}

#[test]
fn generated_histories_get_the_right_verdict() {
    for (ops, keys) in [(10, 1), (1_000, 1), (20_000, 10), (100_000, 1)] {
        for inject in [false, true] {
            case(Model::Kv, "kv", ops, keys, inject);
            case(Model::Fenced, "fenced", ops, keys, inject);
        }
    }
}

/// The largest shape of the issue; a few seconds in a release build.
#[test]
#[ignore = "1M operations: run with --release -- --ignored"]
fn a_million_operations() {
    for inject in [false, true] {
        case(Model::Kv, "kv", 1_000_000, 10, inject);
        case(Model::Fenced, "fenced", 1_000_000, 1000, inject);
    }
}

#[test]
fn bad_input_is_exit_2_with_the_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"client\":1,\"call_ns\":1,\"return_ns\":2,\"key\":\"k\",\"op\":\"write\",\"arg\":1,\"out\":null}\n\
         {\"client\":1,\"call_ns\":3,\"key\":\"k\",\"op\":\"read\"\n",
    )
    .expect("write");
    let o = bin().args(["lincheck"]).arg(&file).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains('2'),
        "{}",
        explain(&o)
    );
    let o = bin()
        .args(["lincheck", "--model", "nope"])
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
}
