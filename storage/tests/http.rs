//! The storage service over real HTTP on a loopback socket.

use std::path::PathBuf;

use fencecheck_storage::{serve, Durability, Fencing, LogRecord, Verdict, MAX_BODY_BYTES};
use serde_json::{json, Value};

struct Server {
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn start(fencing: Fencing) -> Server {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("storage.jsonl");
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let l = log.clone();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stop_rx.await;
        };
        serve(
            "127.0.0.1:0".parse().expect("addr"),
            l,
            fencing,
            Durability::Flush,
            Some(ready_tx),
            shutdown,
        )
        .await
        .expect("serve");
    });
    let addr = ready_rx.await.expect("ready");
    Server {
        url: format!("http://{addr}/"),
        log,
        _dir: dir,
        stop: Some(stop_tx),
    }
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send");
    let status = r.status().as_u16();
    let text = r.text().await.expect("text");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn write(token: i64, val: i64, id: u64) -> String {
    json!({"op":"write","key":"k0","val":val,"token":token,"revision":token,"client":"1","request_id":id})
        .to_string()
}

#[tokio::test]
async fn monotonic_fencing_and_durable_log_before_answer() {
    let s = start(Fencing::Monotonic).await;
    let (st, a) = post(&s.url, write(10, 1, 1)).await;
    assert_eq!((st, a["verdict"].as_str()), (200, Some("accepted")));
    // The record is on disk by the time the answer arrives.
    let text = std::fs::read_to_string(&s.log).expect("log");
    let rec: LogRecord = serde_json::from_str(text.lines().last().expect("line")).expect("record");
    assert_eq!((rec.seq, rec.verdict), (1, Verdict::Accepted));

    let (_, a) = post(&s.url, write(12, 2, 2)).await;
    assert_eq!(a["verdict"], "accepted");
    let (_, a) = post(&s.url, write(10, 3, 3)).await;
    assert_eq!(a["verdict"], "rejected-stale");
    assert_eq!(a["token"], 12, "the answer carries the current token");
    let (_, a) = post(
        &s.url,
        json!({"op":"read","key":"k0","client":"2","request_id":1}).to_string(),
    )
    .await;
    assert_eq!(
        (a["verdict"].as_str(), a["value"].as_i64()),
        (Some("ok"), Some(2))
    );

    let hist = reqwest::get(format!("{}history", s.url))
        .await
        .expect("history")
        .text()
        .await
        .expect("text");
    let recs: Vec<LogRecord> = hist
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[2].verdict, Verdict::RejectedStale);
    assert_eq!(
        (recs[2].token_before, recs[2].token_after),
        (Some(12), Some(12))
    );
}

#[tokio::test]
async fn bad_input_is_a_400_with_a_reason_and_the_service_keeps_serving() {
    let s = start(Fencing::Monotonic).await;
    let huge = format!(
        "{{\"op\":\"write\",\"key\":\"{}\",\"val\":1,\"token\":1,\"client\":\"1\",\"request_id\":1}}",
        "x".repeat(MAX_BODY_BYTES + 10)
    );
    let cases: Vec<(&str, String)> = vec![
        ("malformed JSON", "{\"op\":".into()),
        (
            "wrong type",
            json!({"op":"write","key":"k0","val":"one","token":1,"client":"1","request_id":1})
                .to_string(),
        ),
        (
            "unknown op",
            json!({"op":"delete","key":"k0","client":"1","request_id":1}).to_string(),
        ),
        (
            "unknown field",
            json!({"op":"read","key":"k0","client":"1","request_id":1,"x":1}).to_string(),
        ),
        (
            "write without token",
            json!({"op":"write","key":"k0","val":1,"client":"1","request_id":1}).to_string(),
        ),
        ("oversized body", huge),
    ];
    for (what, body) in cases {
        let (st, a) = post(&s.url, body).await;
        assert_eq!(st, 400, "{what}: {a}");
        let reason = a["error"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "{what}: no reason in {a}");
    }
    let (st, a) = post(&s.url, write(1, 1, 9)).await;
    assert_eq!((st, a["verdict"].as_str()), (200, Some("accepted")));
    // Rejected input never reaches the log.
    let text = std::fs::read_to_string(&s.log).expect("log");
    assert_eq!(text.lines().count(), 1);
}

#[tokio::test]
async fn exact_mode_rejects_a_newer_token_and_off_accepts_a_stale_one() {
    let s = start(Fencing::Exact).await;
    post(&s.url, write(5, 1, 1)).await;
    let (_, a) = post(&s.url, write(9, 2, 2)).await;
    assert_eq!(a["verdict"], "rejected-stale");
    let s = start(Fencing::Off).await;
    post(&s.url, write(9, 1, 1)).await;
    let (_, a) = post(&s.url, write(5, 2, 2)).await;
    assert_eq!(a["verdict"], "accepted");
}

#[tokio::test]
async fn restart_keeps_the_fencing_state() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("storage.jsonl");
    let store =
        fencecheck_storage::Store::open(&log, Fencing::Monotonic, Durability::Flush).expect("open");
    let req: fencecheck_storage::Request = serde_json::from_str(&write(12, 1, 1)).expect("req");
    store.apply(req).await.expect("apply");
    drop(store);
    let store = fencecheck_storage::Store::open(&log, Fencing::Monotonic, Durability::Flush)
        .expect("reopen");
    let req: fencecheck_storage::Request = serde_json::from_str(&write(10, 2, 2)).expect("req");
    let a = store.apply(req).await.expect("apply");
    assert_eq!(a.verdict, Verdict::RejectedStale);
    assert_eq!(a.seq, 2);
}
