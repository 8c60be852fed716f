//! [`Store`] on PostgreSQL: writes go to the group-commit writer (`writer.rs`), appends carry the
//! lease epoch they are fenced by, reads block on the readers' connection.

use std::sync::atomic::Ordering;

use devshard_actors::{
    protocol::{diff::Diff, warm::WarmBinding},
    store::{Ack, ReplicaIdentity, ReplicaView, Store, StoreError, WarmDeltas},
};

use super::{lease, replicas, PgStore};
use crate::store::codec::{
    decode_diff, decode_value, decode_warm_delta, encode_diff, nonce_to_sql, DiffRow,
};
use crate::store::ops::Op;

impl Store for PgStore {
    fn append_diff_with_warm(
        &self,
        escrow_id: &str,
        diff: &Diff,
        warm_delta: &[WarmBinding],
    ) -> Ack {
        let epoch = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.get(escrow_id).copied()
        };
        // Never claimed (or lost at a renewal): the epoch 0 no claim gives is refused.
        let epoch = epoch.unwrap_or(0);
        self.submit(encode_diff(diff, warm_delta).map(|row| Op::AppendDiff {
            escrow: escrow_id.to_string(),
            epoch,
            row,
        }))
    }

    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError> {
        let rows = self.query(
            "SELECT nonce, warm_delta FROM diffs \
             WHERE escrow_id = $1 AND warm_delta IS NOT NULL ORDER BY nonce",
            &[&escrow_id],
        )?;
        rows.iter()
            .map(|r| {
                let nonce: i64 = r.get(0);
                let delta = decode_warm_delta(escrow_id, nonce, r.get(1))?;
                let nonce = u64::try_from(nonce).map_err(|_| {
                    StoreError::Corrupt(format!("escrow {escrow_id}: nonce {nonce}"))
                })?;
                Ok((nonce, delta))
            })
            .collect()
    }

    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError> {
        self.load_diffs_from(escrow_id, 0)
    }

    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError> {
        self.load_diffs_range(escrow_id, from, u64::MAX)
    }

    fn load_diffs_range(
        &self,
        escrow_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<Diff>, StoreError> {
        let Ok(from) = nonce_to_sql(from) else {
            return Ok(Vec::new());
        };
        let to = nonce_to_sql(to).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT nonce, txs, user_sig, post_state_root FROM diffs \
             WHERE escrow_id = $1 AND nonce >= $2 AND nonce <= $3 ORDER BY nonce",
            &[&escrow_id, &from, &to],
        )?;
        rows.into_iter()
            .map(|r| {
                let row = DiffRow {
                    nonce: r.get(0),
                    txs: r.get(1),
                    user_sig: r.get(2),
                    post_state_root: r.get(3),
                    warm_delta: None,
                };
                decode_diff(escrow_id, row)
            })
            .collect()
    }

    fn delete_diffs(&self, escrow_id: &str) -> Ack {
        self.submit(Ok(Op::delete_diffs(escrow_id)))
    }

    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        self.submit(Op::put(namespace, key, &value))
    }

    fn delete(&self, namespace: &str, key: &str) -> Ack {
        self.submit(Ok(Op::delete(namespace, key)))
    }

    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let rows = self.query(
            "SELECT value FROM records WHERE namespace = $1 AND key = $2",
            &[&namespace, &key],
        )?;
        rows.first()
            .map(|r| decode_value(namespace, key, r.get(0)))
            .transpose()
    }

    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let rows = self.query(
            "SELECT key, value FROM records WHERE namespace = $1 ORDER BY key COLLATE \"C\"",
            &[&namespace],
        )?;
        rows.iter()
            .map(|r| {
                let key: String = r.get(0);
                let value = decode_value(namespace, &key, r.get(1))?;
                Ok((key, value))
            })
            .collect()
    }

    fn flush(&self) -> Ack {
        self.submit(Ok(Op::Flush))
    }

    fn holds_lease(&self, id: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.contains_key(id)
    }

    fn put_fenced(&self, lease: &str, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        let epoch = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.get(lease).copied()
        };
        // Not held: the epoch 0 no claim gives is refused by the fence.
        let fence = (lease.to_string(), epoch.unwrap_or(0));
        self.submit(Op::put_fenced(namespace, key, &value, Some(fence)))
    }

    fn claim_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        let epoch = futures::executor::block_on(async {
            let _one_at_a_time = self.claiming.lock().await;
            let client = self.leases.client()?;
            lease::claim(&client, escrow_id, &self.replica.id, self.replica.lease_ttl).await
        })?;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.insert(escrow_id.to_string(), epoch);
        self.lease_clock.mark();
        Ok(())
    }

    fn replica(&self) -> Option<ReplicaIdentity> {
        Some(ReplicaIdentity {
            id: self.replica.id.clone(),
            lease_ttl: self.replica.lease_ttl,
        })
    }

    fn replica_view(&self) -> Result<ReplicaView, StoreError> {
        let client = self.reader.client()?;
        futures::executor::block_on(replicas::view(&client, &self.replica.id))
    }

    fn release_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        let epoch = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.remove(escrow_id)
        };
        let Some(epoch) = epoch else { return Ok(()) };
        futures::executor::block_on(async {
            let _one_at_a_time = self.claiming.lock().await;
            let client = self.leases.client()?;
            lease::release(&client, &self.replica.id, &[(escrow_id.to_string(), epoch)]).await
        })?;
        Ok(())
    }

    fn ownership_round_done(&self) {
        self.ownership_ran.store(true, Ordering::Relaxed);
    }
}
