//! Keeping the leases this replica holds: renewed every TTL/3 on the store's runtime (a lease
//! another replica took is forgotten and logged), released when the store closes.

use std::sync::Arc;

use super::{lease, link::Link, readiness::LeaseClock, Held, ReplicaConfig};
use slog::{info, warn, Logger};

/// Renews the held leases every TTL/3; forgets (and logs) the ones another replica took.
pub(super) async fn renew_loop(
    link: Arc<Link>,
    replica: ReplicaConfig,
    (held, clock): (Held, Arc<LeaseClock>),
    log: Logger,
) {
    let mut tick = tokio::time::interval(lease::renew_every(replica.lease_ttl));
    loop {
        tick.tick().await;
        let snapshot = snapshot(&held);
        if snapshot.is_empty() {
            continue;
        }
        let renewed = match link.client() {
            Ok(client) => lease::renew(&client, &replica.id, &snapshot, replica.lease_ttl).await,
            Err(e) => Err(e),
        };
        match renewed {
            Ok(renewed) => {
                clock.mark();
                let mut map = held.lock().unwrap_or_else(|e| e.into_inner());
                for (escrow, epoch) in &snapshot {
                    if !renewed.contains(escrow) && map.get(escrow) == Some(epoch) {
                        map.remove(escrow);
                        warn!(log, "escrow lease taken by another replica";
                            "stage" => "lease_renew_lost", "escrow" => escrow.as_str(),
                            "epoch" => epoch);
                    }
                }
            }
            Err(e) => warn!(log, "lease renewal failed"; "stage" => "lease_renew_failed",
                "error" => %e),
        }
    }
}

pub(super) async fn release_all(link: &Link, replica: &str, held: &Held, log: &Logger) {
    let snapshot = snapshot(held);
    if snapshot.is_empty() {
        return;
    }
    let released = match link.client() {
        Ok(client) => lease::release(&client, replica, &snapshot).await,
        Err(e) => Err(e),
    };
    match released {
        Ok(n) => info!(log, "escrow leases released"; "stage" => "leases_released", "count" => n),
        Err(e) => warn!(log, "escrow leases not released (they expire by themselves)";
            "stage" => "leases_release_failed", "error" => %e),
    }
}

fn snapshot(held: &Held) -> Vec<(String, u64)> {
    let map = held.lock().unwrap_or_else(|e| e.into_inner());
    map.iter().map(|(e, n)| (e.clone(), *n)).collect()
}
