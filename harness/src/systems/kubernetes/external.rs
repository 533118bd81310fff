//! An external elector's owners on Kubernetes: the owner travels in the Lease's
//! `holderIdentity`. The adapter is told to use the owner value as its identity
//! (`open`'s `value`), an [`OwnerValue`](crate::record::observe::OwnerValue) naming
//! this worker, its pid and the adapter's session handle, so the harness's
//! observer reads which worker holds a Lease off the Lease, with no entry of
//! fencecheck's beside it.

use crate::systems::external::owner::Owners;

pub struct KubeOwners {
    /// The Leases' namespace (`ServiceAccess::namespace`).
    pub namespace: String,
}

#[async_trait::async_trait]
impl Owners for KubeOwners {
    /// `namespace/name` of the Lease.
    fn lock(&self, name: &str) -> String {
        format!("{}/{}", self.namespace, super::lease::lease_name(name))
    }

    fn owner_value(&self, worker: u32, session: i64, handle: i64) -> Option<(i64, String)> {
        let s = if session != 0 { session } else { handle };
        Some((s, super::lease::identity(worker, s)))
    }
}
