//! API calls retried the way client-go retries them: a loaded API server (or the
//! connection to it) may time out, refuse, reset or answer 429/5xx for a moment,
//! and a run that stops with exit 2 on the first such answer fails for nothing.
//! Only those errors are retried, with a growing pause, within the caller's
//! deadline; every retry is logged, so a run's log says when the API server was
//! slow. A refusal (4xx but 429) is final at once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Whether `e` is an error client-go would retry: the connection (timed out,
/// refused, reset), too many requests, or the server's own failure.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        _ => false,
    }
}

/// Calls `op` until it succeeds, fails with an error that is not [`transient`],
/// or `within` has passed (then the last error is returned).
pub async fn call<T, F, Fut>(what: &str, within: Duration, mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let end = Instant::now() + within;
    let mut pause = Duration::from_millis(100);
    let mut retries = 0u32;
    loop {
        match op().await {
            Ok(v) => {
                if retries > 0 {
                    tracing::info!("{what}: answered after {retries} retries");
                }
                return Ok(v);
            }
            Err(e) if transient(&e) && Instant::now() + pause < end => {
                retries += 1;
                tracing::warn!("{what}: {e}; retry {retries} in {pause:?}");
                // The back-off between retries, not a wait for readiness.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn timeouts_and_server_errors_are_transient_refusals_are_not() {
        assert!(transient(&api(500)));
        assert!(transient(&api(503)));
        assert!(transient(&api(429)));
        assert!(!transient(&api(404)));
        assert!(!transient(&api(403)));
        assert!(!transient(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    #[tokio::test]
    async fn a_transient_error_is_retried_until_the_call_answers() {
        let calls = AtomicU32::new(0);
        let r = call("get pod w", Duration::from_secs(5), || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(api(503))
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.expect("answered"), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_refusal_is_final_and_a_deadline_ends_the_retries() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = call("get pod w", Duration::from_secs(5), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(api(404))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let calls = AtomicU32::new(0);
        let r: Result<(), _> = call("get pod w", Duration::from_millis(250), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(api(500))
        })
        .await;
        assert!(r.is_err());
        let n = calls.load(Ordering::SeqCst);
        assert!((2..=3).contains(&n), "{n} calls within 250 ms");
    }
}
