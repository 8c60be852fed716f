//! Keeping the leases this replica holds and its heartbeat: every TTL/3 on the store's runtime
//! the replica's row in `replicas` is upserted (`replicas.rs`) and the held leases are renewed (a
//! lease another replica took is forgotten and logged); when the store closes the leases are
//! released and the row deleted. Both go through the leases' link, which reconnects by itself.

use std::sync::Arc;

use slog::{info, warn, Logger};

use super::{lease, link::Link, readiness::LeaseClock, replicas, Held, ReplicaConfig};

/// Every TTL/3: the heartbeat first (so the row expires before the leases renewed after it),
/// then the held leases; forgets (and logs) the ones another replica took. The lease clock
/// (readiness) is marked when both succeeded.
pub(super) async fn renew_loop(
    link: Arc<Link>,
    replica: ReplicaConfig,
    (held, clock): (Held, Arc<LeaseClock>),
    log: Logger,
) {
    let mut tick = tokio::time::interval(lease::renew_every(replica.lease_ttl));
    let mut first = true;
    loop {
        tick.tick().await;
        let client = match link.client() {
            Ok(c) => c,
            Err(e) => {
                warn!(log, "replica heartbeat failed"; "stage" => "replica_heartbeat_failed",
                    "error" => %e);
                continue;
            }
        };
        match replicas::heartbeat(&client, &replica, first).await {
            Ok(()) => first = false,
            Err(e) => {
                warn!(log, "replica heartbeat failed"; "stage" => "replica_heartbeat_failed",
                    "error" => %e);
                continue;
            }
        }
        let snapshot = snapshot(&held);
        if snapshot.is_empty() {
            clock.mark();
            continue;
        }
        match lease::renew(&client, &replica.id, &snapshot, replica.lease_ttl).await {
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

/// Releases every held lease, then deletes this replica's heartbeat row (the store closes).
pub(super) async fn release_all(link: &Link, replica: &str, held: &Held, log: &Logger) {
    let client = match link.client() {
        Ok(c) => c,
        Err(e) => {
            warn!(log, "escrow leases not released (they expire by themselves)";
                "stage" => "leases_release_failed", "error" => %e);
            return;
        }
    };
    let snapshot = snapshot(held);
    if !snapshot.is_empty() {
        match lease::release(&client, replica, &snapshot).await {
            Ok(n) => {
                info!(log, "escrow leases released"; "stage" => "leases_released", "count" => n)
            }
            Err(e) => warn!(log, "escrow leases not released (they expire by themselves)";
                "stage" => "leases_release_failed", "error" => %e),
        }
    }
    if let Err(e) = replicas::leave(&client, replica).await {
        warn!(log, "replica row not deleted (it expires by itself)";
            "stage" => "replica_leave_failed", "error" => %e);
    }
}

fn snapshot(held: &Held) -> Vec<(String, u64)> {
    let map = held.lock().unwrap_or_else(|e| e.into_inner());
    map.iter().map(|(e, n)| (e.clone(), *n)).collect()
}
