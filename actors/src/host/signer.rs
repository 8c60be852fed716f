//! Request signing at send time (docs/protocol.md §3.1).
//!
//! A [`RequestSigner`] holds what a POST's auth headers are made of (the escrow's key, its id and
//! the clock) but no timestamp. The host client asks it for headers the moment a POST leaves, so
//! no body is older than the time it takes to build one request: a catch-up of thousands of
//! diffs to a host on a slow link, sent chunk after chunk, never meets the host's 30 s drift
//! window with a timestamp taken when the nonce was granted.

use std::sync::Arc;

use crate::{
    clock::SharedClock,
    protocol::{
        auth::{self, AuthHeaders},
        crypto::SigningKey,
    },
};

/// See the module docs. Cheap to clone (shared key and clock).
#[derive(Clone)]
pub struct RequestSigner {
    key: Arc<SigningKey>,
    escrow_id: Arc<str>,
    clock: SharedClock,
}

impl RequestSigner {
    pub fn new(key: Arc<SigningKey>, escrow_id: &str, clock: SharedClock) -> Self {
        RequestSigner {
            key,
            escrow_id: Arc::from(escrow_id),
            clock,
        }
    }

    /// The auth headers of `body`, timestamped now.
    pub fn headers(&self, body: &[u8]) -> AuthHeaders {
        let now = u64::try_from(self.clock.now_unix()).unwrap_or(0);
        auth::sign_request(&self.key, &self.escrow_id, body, now)
    }

    pub fn escrow_id(&self) -> &str {
        &self.escrow_id
    }
}

impl std::fmt::Debug for RequestSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSigner")
            .field("escrow_id", &self.escrow_id)
            .field("signer", &self.key.address())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;

    #[tokio::test(start_paused = true)]
    async fn headers_carry_the_time_of_signing_not_of_creation() {
        let clock = TokioClock::anchored_at(1_700_000_000_000).shared();
        let key = Arc::new(SigningKey::derive("signer", 1));
        let signer = RequestSigner::new(key.clone(), "42", clock.clone());
        tokio::time::sleep(std::time::Duration::from_secs(600)).await;
        let h = signer.headers(b"{}");
        assert_eq!(h.timestamp, "1700000600");
        let who = auth::verify_request(
            "42",
            b"{}",
            Some(&h.signature_hex),
            Some(&h.timestamp),
            clock.now_unix(),
            auth::MAX_CLOCK_DRIFT_S,
        )
        .unwrap();
        assert_eq!(who, *key.address());
    }
}
