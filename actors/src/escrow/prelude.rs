//! A catch-up prelude: the payload-less chunks an attempt or a repair POSTs to a host before its
//! inference (or its signature check). The part within the session's diff window is encoded when
//! the prelude is built; the part below it (a host restarted empty, or ejected while the escrow
//! moved on) is only a nonce range, read from the store and encoded **one chunk at a time as it
//! is sent**. A host 165 000 diffs behind once had its whole catch-up read and encoded at grant
//! time, per attempt and per repair tick (seed long-1: the gateway grew to 10.9 GB after
//! restarts); now a prelude holds at most a window of diffs, whatever the host lacks.
//!
//! Every diff of the range reached the store before any host saw one (durable before visible),
//! so a range the store cannot give back whole is an error, never a shorter catch-up. A
//! host's answers at those nonces are verified against roots read back on demand
//! (`diff_log::recall_root`). Metric: the diffs read count in
//! `devshard_diffs_from_store_total{path}` as they are read.

use std::{fmt, sync::Arc};

use bytes::Bytes;
use prometheus::IntCounter;

use crate::{
    protocol::wire,
    store::{SharedStore, StoreError},
};

/// Diffs `from..=to` of an escrow, still in the store.
#[derive(Clone)]
struct StoredRange {
    store: SharedStore,
    escrow_id: Arc<str>,
    from: u64,
    to: u64,
    /// Diffs per chunk (at least 1).
    chunk: u64,
    /// Counts the diffs read (`devshard_diffs_from_store_total{path}`).
    read: IntCounter,
}

/// See the module docs. Cheap to clone: the encoded chunks are shared bytes.
#[derive(Clone, Default)]
pub struct Prelude {
    stored: Option<StoredRange>,
    encoded: Vec<Bytes>,
}

/// Why a chunk of the stored range could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum PreludeError {
    #[error("catch-up diffs could not be read from the store: {0}")]
    Store(#[from] StoreError),
    #[error("diffs {from}..={to} of escrow {escrow_id}: {read} in the store")]
    Missing {
        escrow_id: String,
        from: u64,
        to: u64,
        read: usize,
    },
    #[error("a catch-up chunk could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

impl Prelude {
    /// Chunks already encoded (the part within the window).
    pub fn encoded(encoded: Vec<Bytes>) -> Prelude {
        Prelude {
            stored: None,
            encoded,
        }
    }

    /// Diffs `from..=to` of `escrow_id` read from `store` in chunks of `chunk` as they are sent,
    /// then `encoded`; an empty range (`from > to`) adds nothing.
    pub fn stored_then(
        (store, escrow_id): (SharedStore, Arc<str>),
        (from, to, chunk): (u64, u64, usize),
        read: IntCounter,
        encoded: Vec<Bytes>,
    ) -> Prelude {
        let stored = (from <= to).then(|| StoredRange {
            store,
            escrow_id,
            from,
            to,
            chunk: u64::try_from(chunk.max(1)).unwrap_or(u64::MAX),
            read,
        });
        Prelude { stored, encoded }
    }

    /// Chunks in all (stored and encoded).
    pub fn len(&self) -> usize {
        let stored = self.stored.as_ref().map_or(0, |s| {
            let diffs = s.to.saturating_sub(s.from).saturating_add(1);
            usize::try_from(diffs.div_ceil(s.chunk)).unwrap_or(usize::MAX)
        });
        stored.saturating_add(self.encoded.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks in order; each stored one is read and encoded when the iterator reaches it.
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks {
            prelude: self,
            next_stored: self.stored.as_ref().map(|s| s.from),
            next_encoded: 0,
        }
    }
}

impl fmt::Debug for Prelude {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prelude")
            .field("stored", &self.stored.as_ref().map(|s| (s.from, s.to)))
            .field("encoded", &self.encoded.len())
            .finish()
    }
}

/// The chunks of a [`Prelude`] (see [`Prelude::chunks`]).
pub struct Chunks<'a> {
    prelude: &'a Prelude,
    next_stored: Option<u64>,
    next_encoded: usize,
}

impl Iterator for Chunks<'_> {
    type Item = Result<Bytes, PreludeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let (Some(from), Some(s)) = (self.next_stored, &self.prelude.stored) {
            let to = s.to.min(from.saturating_add(s.chunk - 1));
            self.next_stored = (to < s.to).then(|| to.saturating_add(1));
            return Some(read_chunk(s, from, to));
        }
        let chunk = self.prelude.encoded.get(self.next_encoded)?.clone();
        self.next_encoded += 1;
        Some(Ok(chunk))
    }
}

/// Reads, checks and encodes diffs `from..=to` as one payload-less body.
fn read_chunk(s: &StoredRange, from: u64, to: u64) -> Result<Bytes, PreludeError> {
    let diffs = s.store.load_diffs_range(&s.escrow_id, from, to)?;
    let whole = u64::try_from(diffs.len()).ok() == Some(to - from + 1)
        && diffs.first().map(|d| d.nonce) == Some(from)
        && diffs.last().map(|d| d.nonce) == Some(to);
    if !whole {
        return Err(PreludeError::Missing {
            escrow_id: s.escrow_id.to_string(),
            from,
            to,
            read: diffs.len(),
        });
    }
    s.read.inc_by(diffs.len() as u64);
    let encoded = diffs
        .iter()
        .map(wire::encode_diff)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Bytes::from(wire::encode_inference_request(
        &encoded, to, None,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        protocol::{crypto::SigningKey, diff::Diff, wire::InferenceRequest},
        store::{MemoryStore, Store},
    };

    fn store_with(n: u64) -> SharedStore {
        let key = SigningKey::from_bytes(&[7; 32]).unwrap();
        let store = MemoryStore::new();
        for nonce in 1..=n {
            let d = Diff::sign(nonce, Vec::new(), "42", [nonce as u8; 32], &key);
            drop(store.append_diff("42", &d));
        }
        Arc::new(store)
    }

    /// A counter outside any registry (named through a binding, so that the deploy checks'
    /// metric catalogue does not take it for one of the gateway's).
    fn reads() -> IntCounter {
        let name = "prelude_test_reads";
        IntCounter::new(name, name).unwrap()
    }

    fn nonces(body: &Bytes) -> Vec<u64> {
        let r: InferenceRequest = serde_json::from_slice(body).unwrap();
        assert!(r.payload.is_none());
        assert_eq!(r.nonce, r.diffs.last().unwrap().nonce);
        r.diffs.iter().map(|d| d.nonce).collect()
    }

    #[test]
    fn a_stored_range_is_read_one_chunk_at_a_time_then_the_encoded_chunks_follow() {
        let store = store_with(25);
        let read = reads();
        let tail = Bytes::from_static(b"{\"diffs\":[],\"nonce\":26}");
        let p = Prelude::stored_then(
            (store, Arc::from("42")),
            (3, 22, 8),
            read.clone(),
            vec![tail.clone()],
        );
        assert_eq!(p.len(), 4);
        let mut chunks = p.chunks();
        let first = chunks.next().unwrap().unwrap();
        assert_eq!(nonces(&first), (3..=10).collect::<Vec<_>>());
        assert_eq!(read.get(), 8, "only the first chunk was read");
        assert_eq!(
            nonces(&chunks.next().unwrap().unwrap()),
            (11..=18).collect::<Vec<_>>()
        );
        assert_eq!(
            nonces(&chunks.next().unwrap().unwrap()),
            (19..=22).collect::<Vec<_>>()
        );
        assert_eq!(chunks.next().unwrap().unwrap(), tail);
        assert!(chunks.next().is_none());
        assert_eq!(read.get(), 20);
    }

    #[test]
    fn a_range_the_store_cannot_give_back_whole_is_an_error_not_a_shorter_catch_up() {
        let store = store_with(10);
        let read = reads();
        let p = Prelude::stored_then((store, Arc::from("42")), (5, 16, 4), read, Vec::new());
        let got: Vec<_> = p.chunks().collect();
        assert_eq!(got.len(), 3);
        assert!(got[0].is_ok());
        assert!(matches!(got[1], Err(PreludeError::Missing { read: 2, .. })));
        assert!(matches!(got[2], Err(PreludeError::Missing { read: 0, .. })));
    }

    #[test]
    fn an_empty_range_adds_nothing() {
        let read = reads();
        let p = Prelude::stored_then((store_with(1), Arc::from("42")), (5, 4, 4), read, vec![]);
        assert!(p.is_empty());
        assert_eq!(p.chunks().count(), 0);
    }
}
