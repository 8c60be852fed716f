//! The escrow's encoded diffs: each diff's wire JSON, encoded once and spliced into every request
//! body that carries it (a lagging host is re-sent every diff it has not acknowledged, so under
//! load one diff travels in many requests). Bounded to the newest nonces, as many as the session's
//! diff window (`[escrow] diff_window`), and trimmed to the session's window each `sync_persist`
//! tick; an older diff (a host catching up from far behind, read
//! back from the store) is encoded again when needed and not kept. Bodies leave here
//! unsigned: the host client signs each one as it is sent ([`signer`]), so a body that waits (a
//! long catch-up before it) never carries an old timestamp.

use std::{cell::RefCell, collections::BTreeMap};

use bytes::Bytes;

use super::{
    error::EscrowError,
    session::{Session, DEFAULT_DIFF_WINDOW},
    EscrowDeps,
};
use crate::{
    host::RequestSigner,
    protocol::{diff::Diff, wire},
};

/// See the module docs. Interior mutability: filled while building bodies from `&self`.
#[derive(Debug)]
pub struct WireDiffs {
    encoded: RefCell<BTreeMap<u64, Bytes>>,
    /// Encoded diffs kept at most (the newest nonces).
    capacity: usize,
}

impl Default for WireDiffs {
    fn default() -> Self {
        WireDiffs::new(DEFAULT_DIFF_WINDOW)
    }
}

impl WireDiffs {
    /// A cache of at most `capacity` encoded diffs (at least 1).
    pub fn new(capacity: usize) -> WireDiffs {
        WireDiffs {
            encoded: RefCell::default(),
            capacity: capacity.max(1),
        }
    }

    /// The wire JSON of `diff`, from the cache when present.
    pub fn get(&self, diff: &Diff) -> Result<Bytes, serde_json::Error> {
        if let Some(b) = self.encoded.borrow().get(&diff.nonce) {
            return Ok(b.clone());
        }
        let bytes = wire::encode_diff(diff)?;
        let mut cache = self.encoded.borrow_mut();
        if cache.len() >= self.capacity {
            if cache
                .keys()
                .next()
                .is_some_and(|oldest| *oldest > diff.nonce)
            {
                // Older than everything kept: do not evict a newer diff for it.
                return Ok(bytes);
            }
            cache.pop_first();
        }
        cache.insert(diff.nonce, bytes.clone());
        Ok(bytes)
    }

    /// Lets go of the encoded diffs below `nonce` (the session's window moved past them).
    pub fn forget_below(&self, nonce: u64) {
        let mut cache = self.encoded.borrow_mut();
        *cache = cache.split_off(&nonce);
    }

    /// A request body carrying `diffs` (and `payload`): see [`wire::encode_inference_request`].
    pub fn body<'a>(
        &self,
        diffs: impl IntoIterator<Item = &'a Diff>,
        nonce: u64,
        payload: Option<&wire::PayloadJson>,
    ) -> Result<Vec<u8>, serde_json::Error> {
        let encoded = diffs
            .into_iter()
            .map(|d| self.get(d))
            .collect::<Result<Vec<_>, _>>()?;
        wire::encode_inference_request(&encoded, nonce, payload)
    }

    /// Payload-less catch-up bodies of `diffs`, `chunk` diffs each, each targeting the last nonce
    /// it carries (unsigned: the host client signs each as it leaves).
    pub(super) fn catch_up_chunks(
        &self,
        diffs: &[std::sync::Arc<Diff>],
        chunk: usize,
    ) -> Result<Vec<Bytes>, EscrowError> {
        diffs
            .chunks(chunk.max(1))
            .map(|part| {
                let last_nonce = part.last().map_or(0, |d| d.nonce);
                encoded(self.body(part.iter().map(|d| &**d), last_nonce, None))
            })
            .collect()
    }
}

/// An encoded request body, or the protocol error of its encoding.
pub(super) fn encoded(body: Result<Vec<u8>, serde_json::Error>) -> Result<Bytes, EscrowError> {
    body.map(Bytes::from)
        .map_err(|e| EscrowError::Protocol(e.to_string()))
}

/// The escrow's request signer (signs each POST as it leaves: `host/signer.rs`).
pub(super) fn signer(session: &Session, deps: &EscrowDeps) -> RequestSigner {
    RequestSigner::new(
        deps.key.clone(),
        &session.info().escrow_id,
        deps.clock.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::crypto::SigningKey;

    fn diff(nonce: u64, key: &SigningKey) -> Diff {
        Diff::sign(nonce, Vec::new(), "42", [1; 32], key)
    }

    #[test]
    fn bodies_match_serde_and_the_cache_stays_bounded() {
        let key = SigningKey::from_bytes(&[5u8; 32]).unwrap();
        let cache = WireDiffs::new(64);
        let diffs: Vec<Diff> = (1..=3).map(|n| diff(n, &key)).collect();
        let refs: Vec<&Diff> = diffs.iter().collect();
        let body = cache.body(diffs.iter(), 3, None).unwrap();
        assert_eq!(
            body,
            wire::encode_inference_request_slow(&refs, 3, None).unwrap()
        );
        for n in 4..74 {
            cache.get(&diff(n, &key)).unwrap();
        }
        assert_eq!(cache.encoded.borrow().len(), 64);
        // An old diff is still encoded correctly, without evicting a newer one.
        let old = cache.get(&diffs[0]).unwrap();
        assert_eq!(old, wire::encode_diff(&diffs[0]).unwrap());
        assert!(!cache.encoded.borrow().contains_key(&1));
    }
}
