//! HTTP request authentication between the gateway and hosts (docs/protocol.md §3.1).
//!
//! Every POST carries `X-Devshard-Signature` = lowercase hex of `sign(digest)` and
//! `X-Devshard-Timestamp` = decimal unix seconds, where
//! `digest = sha256(escrow_id ‖ raw_body ‖ ts_u64_big_endian)`. `sign` hashes again, so the ECDSA
//! prehash is a double SHA-256. The host side ([`verify_request`]) returns the exact upstream
//! 401 texts; role checks (creator / group member) are the caller's job.

use sha2::{Digest, Sha256};

use super::crypto::{self, Address, CryptoError, SigningKey};

pub const HEADER_SIGNATURE: &str = "X-Devshard-Signature";
pub const HEADER_TIMESTAMP: &str = "X-Devshard-Timestamp";
/// Machine-readable reason some host errors carry (values below).
pub const HEADER_ERROR: &str = "X-Devshard-Error";

/// `X-Devshard-Error` value: availability is disabled (e.g. during PoC); comes with a 503.
pub const ERROR_REQUESTS_DISABLED: &str = "requests_disabled";
/// `X-Devshard-Error` value: the host session is still being built; comes with a 503.
pub const ERROR_INITIALIZING: &str = "initializing";
/// `X-Devshard-Error` value: declared upstream, unused at HEAD.
pub const ERROR_NOT_IMPLEMENTED: &str = "not_implemented";

/// 403 text when the recovered address is neither the creator, a member nor a warm key.
pub const MSG_SENDER_NOT_IN_GROUP: &str = "sender not in group";
/// 403 text on owner-only routes (`chat/completions`, `verify-timeout`).
pub const MSG_RESTRICTED_TO_OWNER: &str = "restricted to escrow owner";
/// Substring of the 401 body the gateway classifies as clock drift (30 min quarantine).
pub const MSG_TIMESTAMP_DRIFT: &str = "timestamp drift";

/// Allowed `|ts − now|` in seconds.
pub const MAX_CLOCK_DRIFT_S: i64 = 30;

/// The two auth header values of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthHeaders {
    /// Lowercase hex of the 65-byte signature.
    pub signature_hex: String,
    /// Decimal unix seconds.
    pub timestamp: String,
}

/// Why a request failed authentication. Every variant is an HTTP 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing auth headers")]
    MissingHeaders,
    #[error("invalid signature hex")]
    InvalidSignatureHex,
    #[error("invalid timestamp")]
    InvalidTimestamp,
    #[error("timestamp drift {drift_s}s exceeds maximum {max_drift_s}s")]
    Drift { drift_s: u64, max_drift_s: i64 },
    #[error("recover address: {0}")]
    Recover(String),
}

impl AuthError {
    /// The upstream 401 body text (`{"message": <this>}`).
    pub fn http_message(&self) -> String {
        self.to_string()
    }

    /// HTTP status upstream answers with.
    pub fn status(&self) -> u16 {
        401
    }
}

/// `sha256(escrow_id ‖ body ‖ ts as u64 big-endian)`.
pub fn request_digest(escrow_id: &str, body: &[u8], ts: u64) -> [u8; 32] {
    // Hashed in place: a body carries its catch-up (tens of diffs), which a preimage buffer
    // copied once more per request.
    let mut h = Sha256::new();
    h.update(escrow_id.as_bytes());
    h.update(body);
    h.update(ts.to_be_bytes());
    h.finalize().into()
}

/// Signs a request body for `escrow_id` at unix time `ts`.
pub fn sign_request(key: &SigningKey, escrow_id: &str, body: &[u8], ts: u64) -> AuthHeaders {
    let sig = key.sign(&request_digest(escrow_id, body, ts));
    AuthHeaders {
        signature_hex: hex::encode(sig),
        timestamp: ts.to_string(),
    }
}

/// Host-side check of the auth headers; returns the signer's address.
///
/// Order and texts follow upstream: an absent or empty header → `missing auth headers`; the
/// signature must be hex (either case) and the timestamp a signed decimal `i64`; then the drift
/// window (`|ts − now| > max_drift_s` fails); then recovery. A negative timestamp is hashed as
/// its two's-complement `u64`, like Go's `uint64(ts)`.
pub fn verify_request(
    escrow_id: &str,
    body: &[u8],
    signature_header: Option<&str>,
    timestamp_header: Option<&str>,
    now_unix: i64,
    max_drift_s: i64,
) -> Result<Address, AuthError> {
    let (sig_hex, ts_str) = match (signature_header, timestamp_header) {
        (Some(s), Some(t)) if !s.is_empty() && !t.is_empty() => (s, t),
        _ => return Err(AuthError::MissingHeaders),
    };
    let sig = hex::decode(sig_hex).map_err(|_| AuthError::InvalidSignatureHex)?;
    let ts: i64 = ts_str.parse().map_err(|_| AuthError::InvalidTimestamp)?;
    let drift_s = ts.abs_diff(now_unix);
    if drift_s > max_drift_s.unsigned_abs() {
        return Err(AuthError::Drift {
            drift_s,
            max_drift_s,
        });
    }
    let digest = request_digest(escrow_id, body, ts as u64);
    crypto::recover_address(&digest, &sig).map_err(|e| {
        AuthError::Recover(match e {
            CryptoError::Recover(inner) => inner,
            other => other.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn signed() -> (SigningKey, AuthHeaders) {
        let key = SigningKey::derive("auth", 0);
        let h = sign_request(&key, "42", b"{}", NOW as u64);
        (key, h)
    }

    fn check(sig: Option<&str>, ts: Option<&str>, now: i64) -> Result<Address, AuthError> {
        verify_request("42", b"{}", sig, ts, now, MAX_CLOCK_DRIFT_S)
    }

    #[test]
    fn round_trip_recovers_signer() {
        let (key, h) = signed();
        assert_eq!(h.timestamp, "1700000000");
        assert_eq!(h.signature_hex, h.signature_hex.to_lowercase());
        let addr = check(Some(&h.signature_hex), Some(&h.timestamp), NOW + 30).unwrap();
        assert_eq!(&addr, key.address());
        // Another body or escrow recovers someone else.
        let other = verify_request(
            "43",
            b"{}",
            Some(&h.signature_hex),
            Some(&h.timestamp),
            NOW,
            30,
        );
        assert_ne!(other.unwrap(), *key.address());
    }

    #[test]
    fn upstream_error_texts() {
        let (_, h) = signed();
        let s = Some(h.signature_hex.as_str());
        let t = Some(h.timestamp.as_str());
        let msg = |r: Result<Address, AuthError>| r.unwrap_err().http_message();
        assert_eq!(msg(check(None, t, NOW)), "missing auth headers");
        assert_eq!(msg(check(s, Some(""), NOW)), "missing auth headers");
        assert_eq!(msg(check(Some("zz"), t, NOW)), "invalid signature hex");
        assert_eq!(msg(check(s, Some("17e8"), NOW)), "invalid timestamp");
        assert_eq!(
            msg(check(s, t, NOW + 31)),
            "timestamp drift 31s exceeds maximum 30s"
        );
        assert_eq!(
            msg(check(s, t, NOW - 45)),
            "timestamp drift 45s exceeds maximum 30s"
        );
        let short = msg(check(Some("abcd"), t, NOW));
        assert!(short.starts_with("recover address: "), "{short}");
        assert!(check(s, t, NOW - 30).is_ok());
        assert_eq!(AuthError::MissingHeaders.status(), 401);
    }
}
