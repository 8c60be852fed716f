//! Writing an adopted chain to the store before the escrow is registered (durable before
//! visible; see the module docs of `adopt`).

use std::collections::BTreeMap;

use super::{AdoptError, Adoption};
use crate::store::{ns, SharedStore};

/// Appends the adopted diffs the store does not hold yet and the hosts' sync nonces, and waits
/// until all of it is durable. A log left by an earlier, interrupted adoption is kept when it
/// is a prefix of the adopted chain; any other log is refused ([`AdoptError::StoreDiffers`]).
pub async fn persist(store: &SharedStore, adoption: &Adoption) -> Result<(), AdoptError> {
    let id = &adoption.escrow_id;
    // Several replicas on one database: only the lease holder may append (and reads after it).
    store.claim_escrow(id)?;
    let held = store.load_diffs(id)?;
    let prefix =
        held.len() <= adoption.diffs.len() && held.iter().zip(&adoption.diffs).all(|(a, b)| a == b);
    if !prefix {
        return Err(AdoptError::StoreDiffers(id.clone()));
    }
    let mut acks = Vec::new();
    for diff in &adoption.diffs[held.len()..] {
        let delta = adoption
            .warm
            .get(&diff.nonce)
            .map(Vec::as_slice)
            .unwrap_or_default();
        acks.push(store.append_diff_with_warm(id, diff, delta));
    }
    let syncs: BTreeMap<String, u64> = adoption
        .host_sync
        .iter()
        .map(|(a, n)| (a.to_string(), *n))
        .collect();
    acks.push(store.put(ns::SESSIONS, id, serde_json::json!({ "host_sync": syncs })));
    for ack in acks {
        ack.await?;
    }
    Ok(())
}
