//! `delay`: latency ± jitter on every chosen link, both ways, for the fault's
//! duration (through fencecheck's proxies, `net.rs`).

use faultproxy::Fault;

use super::{net, Ask, Nemesis, Planned, Resolved};

/// Member links are slowed in the proxies in front of them: the system needs peer
/// links, the backend proxies on them.
pub fn available(a: &Ask) -> Result<(), String> {
    net::member_links_available(a)?;
    if a.target.is_members() && !a.backend.slow_member_links {
        return Err(format!(
            "delay of {} needs peer proxies, which only the process backend has \
             (docker can partition members, not slow them)",
            a.target
        ));
    }
    Ok(())
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    let fault = Fault::Latency {
        latency: p.latency,
        jitter: p.latency_jitter,
    };
    net::run(n, p, target, fault).await
}
