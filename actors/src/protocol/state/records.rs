//! The live records: an ordered map by inference id that is cheap to clone and keeps the
//! `live_hash` (docs/protocol.md §5.4) incrementally.
//!
//! `live_hash = sha256(proto(InferencesMapProto{records by id}))`, and that encoding is just the
//! concatenation of every record's field-1 framing `0x0a ‖ varint(len) ‖ proto(record)`. So:
//! - each record's framing is encoded when it is hashed (`encode.rs`, into one reused buffer),
//!   not kept beside the record: a write hashes the stream from its chunk on, so the bytes of
//!   the few entries after it are encoded again (issue 16: a kept copy was ≈ 190 B per live
//!   record, held by the escrow and the cost ledger's replica alike);
//! - records live in id order in chunks of up to [`CHUNK`] entries behind `Arc`s: a clone copies
//!   one pointer per chunk, a write copies one chunk's pointer vector (copy-on-write), so the
//!   apply-on-a-clone-then-swap commit stays atomic without a deep clone;
//! - each chunk carries the SHA-256 state after the stream up to its end. Chunks `..clean` have
//!   a valid state; `chunks[clean]` has one covering its first `partial` entries when
//!   `partial > 0`. A change at chunk `j` lowers `clean` to `j`, so rehashing only covers the
//!   stream from the first changed chunk on. New records are appended at the end (only the new
//!   entry is hashed), touching the record `k` places from the end rehashes about `k + CHUNK`
//!   entries, and sealing old records rehashes (nearly) everything.

use std::{fmt, sync::Arc};

use sha2::{Digest, Sha256};

use super::record::InferenceRecord;

#[cfg(test)]
mod checks;
mod encode;

/// Entries per chunk when packing (appends, rebuilds after removals). Unit tests use tiny chunks
/// so that random sessions cross many chunk boundaries.
const CHUNK: usize = if cfg!(test) { 4 } else { 64 };
/// A chunk grown past this by an insert in the middle is split in two.
const MAX_CHUNK: usize = 2 * CHUNK;
/// Key of `InferencesMapProto.entries` (field 1, length-delimited).
const ENTRY_KEY: u8 = 0x0a;

/// One live record (its committed bytes are encoded on demand, see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Entry {
    rec: InferenceRecord,
}

impl Entry {
    fn new(rec: InferenceRecord) -> Entry {
        Entry { rec }
    }

    pub(super) fn record(&self) -> &InferenceRecord {
        &self.rec
    }

    /// The entry bytes `proto(InferenceRecordProto)` (what the sealed accumulator folds).
    pub(super) fn entry_bytes(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(192);
        encode::encode_entry(&self.rec, &mut buf);
        buf
    }

    /// Feeds this entry's part of the live hash to `h`.
    fn hash_into(&self, h: &mut Sha256, scratch: &mut Vec<u8>) {
        encode::hash_framed(&self.rec, h, scratch);
    }

    fn id(&self) -> u64 {
        self.rec.inference_id
    }
}

#[derive(Clone)]
struct Chunk {
    /// Non-empty, ascending ids.
    entries: Vec<Arc<Entry>>,
    /// Hasher state after the stream up to this chunk's end (see the module docs for validity).
    mid: Sha256,
}

impl Chunk {
    fn new(entries: Vec<Arc<Entry>>) -> Arc<Chunk> {
        Arc::new(Chunk {
            entries,
            mid: Sha256::new(),
        })
    }

    fn last_id(&self) -> Option<u64> {
        self.entries.last().map(|e| e.id())
    }
}

/// Live records by inference id, with the cached live hash.
#[derive(Clone, Default)]
pub(super) struct Records {
    chunks: Vec<Arc<Chunk>>,
    len: usize,
    /// `chunks[..clean]` hold valid hasher states.
    clean: usize,
    /// When `> 0`, `chunks[clean].mid` covers the stream up to its first `partial` entries.
    partial: usize,
}

impl Records {
    /// Builds from records in ascending id order (the caller guarantees order and uniqueness).
    /// Records of one model share its string, as [`Records::shared_model`] makes them when applied.
    pub(super) fn from_sorted(records: impl IntoIterator<Item = InferenceRecord>) -> Records {
        let mut out = Records::default();
        let mut cur = Vec::with_capacity(CHUNK);
        for mut rec in records {
            rec.model = out.shared_model_with(&cur, &rec.model);
            cur.push(Arc::new(Entry::new(rec)));
            out.len += 1;
            if cur.len() == CHUNK {
                out.chunks.push(Chunk::new(std::mem::take(&mut cur)));
            }
        }
        if !cur.is_empty() {
            out.chunks.push(Chunk::new(cur));
        }
        out.refresh();
        out
    }

    /// `Ok((chunk, index))` of `id`, or `Err` with where it would be inserted.
    fn locate(&self, id: u64) -> Result<(usize, usize), (usize, usize)> {
        let j = self
            .chunks
            .partition_point(|c| c.last_id().is_some_and(|last| last < id));
        match self.chunks.get(j) {
            None => Err((j, 0)),
            Some(c) => match c.entries.binary_search_by_key(&id, |e| e.id()) {
                Ok(e) => Ok((j, e)),
                Err(e) => Err((j, e)),
            },
        }
    }

    pub(super) fn get(&self, id: &u64) -> Option<&InferenceRecord> {
        let (j, e) = self.locate(*id).ok()?;
        self.chunks.get(j)?.entries.get(e).map(|x| &x.rec)
    }

    pub(super) fn contains_key(&self, id: &u64) -> bool {
        self.locate(*id).is_ok()
    }

    /// Every entry in id order.
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Arc<Entry>> + '_ {
        self.chunks.iter().flat_map(|c| c.entries.iter())
    }

    /// Every record in id order.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &InferenceRecord> + '_ {
        self.entries().map(|e| &e.rec)
    }

    /// `model` as the newest record holds it when it is the same (one escrow serves one model
    /// or a few, and new records are appended last): the records then share one string.
    pub(super) fn shared_model(&self, model: &str) -> Arc<str> {
        self.shared_model_with(&[], model)
    }

    /// [`Records::shared_model`] when `pending` (not yet in a chunk) follow the live records.
    fn shared_model_with(&self, pending: &[Arc<Entry>], model: &str) -> Arc<str> {
        let newest = pending
            .last()
            .map(|e| &e.rec)
            .or_else(|| self.iter().next_back());
        match newest {
            Some(last) if &*last.model == model => Arc::clone(&last.model),
            _ => Arc::from(model),
        }
    }

    /// Inserts or replaces the record with id `rec.inference_id`.
    pub(super) fn put(&mut self, rec: InferenceRecord) {
        let entry = Arc::new(Entry::new(rec));
        match self.locate(entry.id()) {
            Ok((j, e)) => {
                self.touch(j, e);
                Arc::make_mut(&mut self.chunks[j]).entries[e] = entry;
            }
            Err((j, _)) if j == self.chunks.len() => self.append(entry),
            Err((j, e)) => {
                self.touch(j, e);
                let chunk = Arc::make_mut(&mut self.chunks[j]);
                chunk.entries.insert(e, entry);
                self.len += 1;
                if chunk.entries.len() > MAX_CHUNK {
                    let tail = chunk.entries.split_off(CHUNK);
                    if self.clean == j && self.partial > CHUNK {
                        self.partial = 0;
                    }
                    self.insert_chunk(j + 1, Chunk::new(tail));
                }
            }
        }
    }

    /// Adds an entry whose id is above every live id.
    fn append(&mut self, entry: Arc<Entry>) {
        self.len += 1;
        match self.chunks.len().checked_sub(1) {
            Some(j) if self.chunks[j].entries.len() < CHUNK => {
                self.touch(j, self.chunks[j].entries.len());
                Arc::make_mut(&mut self.chunks[j]).entries.push(entry);
            }
            _ => self.insert_chunk(self.chunks.len(), Chunk::new(vec![entry])),
        }
    }

    /// Removes the given live ids (ascending) and returns their entries in id order. The chunks
    /// from the first removed id on are repacked.
    pub(super) fn remove_sorted(&mut self, ids: &[u64]) -> Vec<Arc<Entry>> {
        let Some(first) = ids.first() else {
            return Vec::new();
        };
        let j0 = match self.locate(*first) {
            Ok((j, _)) | Err((j, _)) => j,
        };
        let tail = self.chunks.split_off(j0);
        let mut want = ids.iter().peekable();
        let mut removed = Vec::new();
        let mut cur = Vec::with_capacity(CHUNK);
        for entry in tail.iter().flat_map(|c| c.entries.iter()) {
            let id = entry.id();
            while want.next_if(|w| **w < id).is_some() {}
            if want.next_if(|w| **w == id).is_some() {
                removed.push(Arc::clone(entry));
            } else {
                cur.push(Arc::clone(entry));
                if cur.len() == CHUNK {
                    self.chunks.push(Chunk::new(std::mem::take(&mut cur)));
                }
            }
        }
        if !cur.is_empty() {
            self.chunks.push(Chunk::new(cur));
        }
        self.len -= removed.len();
        if j0 <= self.clean {
            self.clean = j0;
            self.partial = 0;
        }
        removed
    }

    /// Notes that `chunks[j]` is about to change at index `e` and after.
    fn touch(&mut self, j: usize, e: usize) {
        if j < self.clean {
            let old_len = self.chunks[j].entries.len();
            self.clean = j;
            self.partial = if e >= old_len { old_len } else { 0 };
        } else if j == self.clean && e < self.partial {
            self.partial = 0;
        }
    }

    fn insert_chunk(&mut self, j: usize, chunk: Arc<Chunk>) {
        if j <= self.clean {
            self.clean = j;
            self.partial = 0;
        }
        self.chunks.insert(j, chunk);
    }

    /// The hasher state to continue from at the first stale entry.
    fn resume(&self) -> Sha256 {
        if self.partial > 0 {
            self.chunks[self.clean].mid.clone()
        } else if let Some(prev) = self.clean.checked_sub(1) {
            self.chunks[prev].mid.clone()
        } else {
            Sha256::new()
        }
    }

    /// Brings every chunk's hasher state up to date.
    pub(super) fn refresh(&mut self) {
        if self.clean < self.chunks.len() {
            let mut h = self.resume();
            let mut skip = self.partial;
            let mut scratch = Vec::with_capacity(192);
            for chunk in &mut self.chunks[self.clean..] {
                let chunk = Arc::make_mut(chunk);
                for e in chunk.entries.iter().skip(skip) {
                    e.hash_into(&mut h, &mut scratch);
                }
                chunk.mid = h.clone();
                skip = 0;
            }
        }
        self.clean = self.chunks.len();
        self.partial = 0;
    }

    /// `sha256(proto(InferencesMapProto))`: from the cache after [`Records::refresh`], else
    /// hashing only what changed since (without storing it).
    pub(super) fn live_hash(&self) -> [u8; 32] {
        if self.clean >= self.chunks.len() {
            return match self.chunks.last() {
                Some(c) => c.mid.clone().finalize().into(),
                None => Sha256::digest(b"").into(),
            };
        }
        let mut h = self.resume();
        let mut skip = self.partial;
        let mut scratch = Vec::with_capacity(192);
        for chunk in &self.chunks[self.clean..] {
            for e in chunk.entries.iter().skip(skip) {
                e.hash_into(&mut h, &mut scratch);
            }
            skip = 0;
        }
        h.finalize().into()
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Records {}

impl fmt::Debug for Records {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|r| (r.inference_id, r)))
            .finish()
    }
}
