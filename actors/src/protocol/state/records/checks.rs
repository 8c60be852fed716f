//! Test-only access to [`Records`]: in-place edits, single removals and an invariant check that
//! recomputes every cached hasher state from scratch.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{Entry, InferenceRecord, Records, MAX_CHUNK};

impl Records {
    /// A mutable record (its bytes are encoded when next hashed).
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
                // From scratch: prost's encoding of the record, framed as field 1.
                let body = entry.rec.entry_bytes();
                assert_eq!(entry.entry_bytes(), body, "encoding of {}", entry.id());
                if j == self.clean && self.partial > 0 && e == self.partial {
                    assert_eq!(fin(&chunk.mid), fin(&h), "partial state of chunk {j}");
                }
                let mut framed = vec![super::ENTRY_KEY];
                prost::encoding::encode_varint(body.len() as u64, &mut framed);
                framed.extend_from_slice(&body);
                h.update(&framed);
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

/// A mutable record (the id must not change; its chunk was marked stale by `get_mut`).
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
