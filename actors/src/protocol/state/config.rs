//! Session configuration, frozen when the session is bound (docs/protocol.md §4.3).
//!
//! The user (gateway) and every host must use the same values or their state roots diverge, so
//! the config is part of the [`StateMachine`](super::StateMachine) and never changes afterwards.

use serde::{Deserialize, Serialize};

use crate::protocol::{proto::SessionConfigProto, version::ProtocolVersion};

/// Refusal deadline: a Start without a receipt may be timed out after this many seconds.
pub const DEFAULT_REFUSAL_TIMEOUT_SECS: i64 = 60;
/// Execution deadline: a confirmed inference may be timed out after this many seconds.
pub const DEFAULT_EXECUTION_TIMEOUT_SECS: i64 = 1200;
/// Price of one token (input byte or output token) in escrow units.
pub const DEFAULT_TOKEN_PRICE: u64 = 1;
/// One-time fee charged when the session is created.
pub const DEFAULT_CREATE_DEVSHARD_FEE: u64 = 10_000;
/// Fee charged for every nonce applied while the session is Active.
pub const DEFAULT_FEE_PER_NONCE: u64 = 1_000;
/// Share of finished inferences validators are expected to check, in basis points.
pub const DEFAULT_VALIDATION_RATE_BP: u32 = 5_000;
/// Lower bound of the nonce grace before a settled inference may be sealed.
pub const MIN_INFERENCE_SEAL_GRACE_NONCES: u32 = 20;
/// State-clock grace (seconds) before a Finished inference may be sealed.
pub const DEFAULT_INFERENCE_SEAL_GRACE_SECONDS: u32 = 3_600;
/// Auto-seal sweep interval in nonces; `0` in a config means this default.
pub const DEFAULT_AUTO_SEAL_EVERY_N_NONCES: u32 = 150;

/// The frozen per-session parameters (`SessionConfig` upstream).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// Seconds after `started_at` before a REFUSED timeout may be claimed.
    pub refusal_timeout: i64,
    /// Seconds after `confirmed_at` before an EXECUTION timeout may be claimed.
    pub execution_timeout: i64,
    /// Escrow units per token; reserve = `(input_length + max_tokens) * token_price`.
    pub token_price: u64,
    /// Charged once at creation: `balance = amount - create_devshard_fee`, `fees` starts at it.
    pub create_devshard_fee: u64,
    /// Charged per applied nonce while Active.
    pub fee_per_nonce: u64,
    /// Slot-weighted votes must be strictly greater than this (timeouts, validation votes).
    pub vote_threshold: u32,
    /// Validation sampling rate in basis points (informational for the state machine).
    pub validation_rate: u32,
    /// A settled record seals only at nonce `>= id + inference_seal_grace_nonces`.
    pub inference_seal_grace_nonces: u32,
    /// A Finished record also needs `state_clock - confirmed_at >= this`.
    pub inference_seal_grace_seconds: u32,
    /// Auto-seal runs at every nonce divisible by this (`0` = the default 150).
    pub auto_seal_every_n_nonces: u32,
    /// The escrow's protocol version: the root's tag and the settlement rules. Not part of
    /// `SessionConfigProto` (the version is the route and the bind); absent in records written
    /// before versions existed, which were all v2.
    #[serde(default)]
    pub protocol: ProtocolVersion,
}

impl SessionConfig {
    /// `DefaultSessionConfig` for a group of `n` slots: `vote_threshold = n/2` and
    /// `inference_seal_grace_nonces = max(20, n)`.
    pub fn default_for_group(n: usize) -> Self {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        SessionConfig {
            refusal_timeout: DEFAULT_REFUSAL_TIMEOUT_SECS,
            execution_timeout: DEFAULT_EXECUTION_TIMEOUT_SECS,
            token_price: DEFAULT_TOKEN_PRICE,
            create_devshard_fee: DEFAULT_CREATE_DEVSHARD_FEE,
            fee_per_nonce: DEFAULT_FEE_PER_NONCE,
            vote_threshold: n / 2,
            validation_rate: DEFAULT_VALIDATION_RATE_BP,
            inference_seal_grace_nonces: n.max(MIN_INFERENCE_SEAL_GRACE_NONCES),
            inference_seal_grace_seconds: DEFAULT_INFERENCE_SEAL_GRACE_SECONDS,
            auto_seal_every_n_nonces: DEFAULT_AUTO_SEAL_EVERY_N_NONCES,
            protocol: ProtocolVersion::V2,
        }
    }

    /// The wire form (`SessionConfigProto`).
    pub fn to_proto(&self) -> SessionConfigProto {
        SessionConfigProto {
            refusal_timeout: self.refusal_timeout,
            execution_timeout: self.execution_timeout,
            token_price: self.token_price,
            create_devshard_fee: self.create_devshard_fee,
            fee_per_nonce: self.fee_per_nonce,
            vote_threshold: self.vote_threshold,
            validation_rate: self.validation_rate,
            inference_seal_grace_nonces: self.inference_seal_grace_nonces,
            inference_seal_grace_seconds: self.inference_seal_grace_seconds,
            auto_seal_every_n_nonces: self.auto_seal_every_n_nonces,
        }
    }

    /// Inverse of [`SessionConfig::to_proto`], for an escrow on `protocol` (the proto does not
    /// carry the version).
    pub fn from_proto(p: &SessionConfigProto, protocol: ProtocolVersion) -> Self {
        SessionConfig {
            refusal_timeout: p.refusal_timeout,
            execution_timeout: p.execution_timeout,
            token_price: p.token_price,
            create_devshard_fee: p.create_devshard_fee,
            fee_per_nonce: p.fee_per_nonce,
            vote_threshold: p.vote_threshold,
            validation_rate: p.validation_rate,
            inference_seal_grace_nonces: p.inference_seal_grace_nonces,
            inference_seal_grace_seconds: p.inference_seal_grace_seconds,
            auto_seal_every_n_nonces: p.auto_seal_every_n_nonces,
            protocol,
        }
    }

    /// The effective auto-seal interval: `auto_seal_every_n_nonces`, or 150 when it is 0
    /// (upstream treats an unset interval as the compiled default).
    pub fn auto_seal_interval(&self) -> u64 {
        match self.auto_seal_every_n_nonces {
            0 => u64::from(DEFAULT_AUTO_SEAL_EVERY_N_NONCES),
            n => u64::from(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_group_size() {
        let c = SessionConfig::default_for_group(5);
        assert_eq!(c.vote_threshold, 2);
        assert_eq!(c.inference_seal_grace_nonces, 20);
        assert_eq!(c.refusal_timeout, 60);
        assert_eq!(c.execution_timeout, 1200);
        assert_eq!(c.auto_seal_interval(), 150);
        let big = SessionConfig::default_for_group(64);
        assert_eq!(big.vote_threshold, 32);
        assert_eq!(big.inference_seal_grace_nonces, 64);
    }

    #[test]
    fn proto_round_trip() {
        let c = SessionConfig::default_for_group(3);
        assert_eq!(
            SessionConfig::from_proto(&c.to_proto(), ProtocolVersion::V2),
            c
        );
        let zero = SessionConfig {
            auto_seal_every_n_nonces: 0,
            ..c
        };
        assert_eq!(zero.auto_seal_interval(), 150);
    }
}
