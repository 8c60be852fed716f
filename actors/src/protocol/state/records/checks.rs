//! Test-only access to [`Records`]: in-place edits, single removals and an invariant check that
//! recomputes every cached hasher state from scratch.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{Entry, InferenceRecord, Records, MAX_CHUNK};

impl Records {
    /// A mutable record; its entry is re-encoded when the guard drops.
    pub(in crate::protocol::state) fn get_mut(&mut self, id: &u64) -> Option<RecordMut<'_>> {
        let (j, e) = self.locate(*id).ok()?;
        self.touch(j, e);
        let chunk = Arc::make_mut(&mut self.chunks[j]);
        let entry = Arc::make_mut(chunk.entries.get_mut(e)?);
        Some(RecordMut { entry })
    }

    pub(in crate::protocol::state) fn remove(&mut self, id: &u64) -> Option<InferenceRecord> {
        let mut removed = self.remove_sorted(&[*id]);
        removed.pop().map(|e| e.rec.clone())
    }

    /// Panics unless the layout is consistent and every hasher state the cache claims valid
    /// equals a from-scratch recomputation.
    pub(in crate::protocol::state) fn check_invariants(&self) {
        let ids: Vec<u64> = self.iter().map(|r| r.inference_id).collect();
        assert_eq!(ids.len(), self.len, "len");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not ascending");
        assert!(self.clean <= self.chunks.len(), "clean out of range");
        let mut h = Sha256::new();
        for (j, chunk) in self.chunks.iter().enumerate() {
            assert!(!chunk.entries.is_empty(), "empty chunk {j}");
            assert!(chunk.entries.len() <= MAX_CHUNK, "oversized chunk {j}");
            for (e, entry) in chunk.entries.iter().enumerate() {
                let fresh = Entry::new(entry.rec.clone());
                assert_eq!(
                    entry.framed,
                    fresh.framed,
                    "stale encoding of {}",
                    entry.id()
                );
                assert_eq!(entry.entry_bytes(), entry.rec.entry_bytes().as_slice());
                if j == self.clean && self.partial > 0 && e == self.partial {
                    assert_eq!(fin(&chunk.mid), fin(&h), "partial state of chunk {j}");
                }
                h.update(&entry.framed);
            }
            if j == self.clean && self.partial > 0 {
                assert!(self.partial <= chunk.entries.len(), "partial out of range");
                if self.partial == chunk.entries.len() {
                    assert_eq!(fin(&chunk.mid), fin(&h), "partial state of chunk {j}");
                }
            }
            if j < self.clean {
                assert_eq!(fin(&chunk.mid), fin(&h), "state after chunk {j}");
            }
        }
    }
}

fn fin(h: &Sha256) -> [u8; 32] {
    h.clone().finalize().into()
}

/// A mutable record that re-encodes its entry when dropped (the id must not change).
pub(in crate::protocol::state) struct RecordMut<'a> {
    entry: &'a mut Entry,
}

impl std::ops::Deref for RecordMut<'_> {
    type Target = InferenceRecord;
    fn deref(&self) -> &InferenceRecord {
        &self.entry.rec
    }
}

impl std::ops::DerefMut for RecordMut<'_> {
    fn deref_mut(&mut self) -> &mut InferenceRecord {
        &mut self.entry.rec
    }
}

impl Drop for RecordMut<'_> {
    fn drop(&mut self) {
        self.entry.encode();
    }
}
