//! `partition`: every chosen link blackholed, both ways, for the fault's duration
//! (through fencecheck's proxies, or by the backend itself where members have
//! none; `net.rs`).

use faultproxy::Fault;

use super::{net, Ask, Nemesis, Planned, Resolved};

pub fn available(a: &Ask) -> Result<(), String> {
    net::member_links_available(a)?;
    if a.target.is_members() && !a.backend.cut_member_links {
        return Err(format!(
            "partition of {}: the backend cannot cut member links",
            a.target
        ));
    }
    Ok(())
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    net::run(n, p, target, Fault::Blackhole).await
}
