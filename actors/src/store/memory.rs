//! An in-memory [`Store`]: same ordering rules as the real one, nothing survives the process.

use std::{
    collections::BTreeMap,
    sync::{Mutex, MutexGuard},
};

use super::{Ack, Store, StoreError, WarmDeltas};
use crate::protocol::{diff::Diff, warm::WarmBinding};

#[derive(Debug, Default)]
struct Inner {
    diffs: BTreeMap<String, BTreeMap<u64, Diff>>,
    warm: BTreeMap<String, WarmDeltas>,
    records: BTreeMap<(String, String), serde_json::Value>,
}

/// In-memory store for tests that are not about persistence.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        self.inner
            .lock()
            .map_err(|_| StoreError::Io("memory store mutex poisoned".into()))
    }
}

impl Store for MemoryStore {
    fn append_diff_with_warm(
        &self,
        escrow_id: &str,
        diff: &Diff,
        warm_delta: &[WarmBinding],
    ) -> Ack {
        let result = self.lock().and_then(|mut g| {
            let log = g.diffs.entry(escrow_id.to_string()).or_default();
            let last = log.keys().next_back().copied().unwrap_or(0);
            if diff.nonce <= last {
                return Err(StoreError::OutOfOrder {
                    escrow: escrow_id.to_string(),
                    last,
                    got: diff.nonce,
                });
            }
            log.insert(diff.nonce, diff.clone());
            if !warm_delta.is_empty() {
                g.warm
                    .entry(escrow_id.to_string())
                    .or_default()
                    .insert(diff.nonce, warm_delta.to_vec());
            }
            Ok(())
        });
        Ack::ready(result)
    }

    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError> {
        self.load_diffs_from(escrow_id, 0)
    }

    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError> {
        let g = self.lock()?;
        Ok(g.diffs
            .get(escrow_id)
            .map(|log| log.range(from..).map(|(_, d)| d.clone()).collect())
            .unwrap_or_default())
    }

    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError> {
        Ok(self
            .lock()?
            .warm
            .get(escrow_id)
            .cloned()
            .unwrap_or_default())
    }

    fn delete_diffs(&self, escrow_id: &str) -> Ack {
        Ack::ready(self.lock().map(|mut g| {
            g.diffs.remove(escrow_id);
            g.warm.remove(escrow_id);
        }))
    }

    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        Ack::ready(self.lock().map(|mut g| {
            g.records
                .insert((namespace.to_string(), key.to_string()), value);
        }))
    }

    fn delete(&self, namespace: &str, key: &str) -> Ack {
        Ack::ready(self.lock().map(|mut g| {
            g.records.remove(&(namespace.to_string(), key.to_string()));
        }))
    }

    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self
            .lock()?
            .records
            .get(&(namespace.to_string(), key.to_string()))
            .cloned())
    }

    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let g = self.lock()?;
        Ok(g.records
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    fn flush(&self) -> Ack {
        Ack::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn diffs_must_increase_and_records_round_trip() {
        let s = MemoryStore::new();
        let d = |n| Diff {
            nonce: n,
            txs: vec![],
            user_sig: vec![],
            post_state_root: vec![],
        };
        s.append_diff("42", &d(1)).await.unwrap();
        s.append_diff("42", &d(2)).await.unwrap();
        assert!(s.append_diff("42", &d(2)).await.is_err());
        assert_eq!(s.load_diffs_from("42", 2).unwrap().len(), 1);
        s.put("a", "k", serde_json::json!({"x": 1})).await.unwrap();
        assert_eq!(s.get("a", "k").unwrap(), Some(serde_json::json!({"x": 1})));
        s.delete("a", "k").await.unwrap();
        assert!(s.list("a").unwrap().is_empty());
    }
}
