//! The durable intent of one escrow creation (docs/lifecycle.md §4) and the pure decision of
//! what to do with it once the chain has been asked about its tx.
//!
//! An intent is written (and acknowledged durable) *before* its signed tx is first broadcast,
//! under [`NS_CREATE_INTENTS`] keyed by the tx hash. The tx is unordered: the chain dedupes its
//! hash until its `timeout_timestamp`, after which it can never commit. So one intent funds at
//! most one escrow however often its bytes are re-sent, and an intent whose tx is unknown past
//! that timeout can be cleared safely.

use devshard_actors::{
    protocol::cosmos::SignedTx,
    settlement::{chain::CommittedTx, machine::TIMEOUT_MARGIN_S},
};
use serde::{Deserialize, Serialize};

/// Store namespace of open creation intents (key = tx hash).
pub const NS_CREATE_INTENTS: &str = "escrow_create_intent";
/// Event of a committed creation and its attribute naming the new escrow.
pub const EVENT_ESCROW_CREATED: &str = "devshard_escrow_created";
pub const ATTR_ESCROW_ID: &str = "escrow_id";

/// Who asked for the escrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Admin,
    Rotation,
}

/// One creation not yet reconciled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateIntent {
    pub tx_hash: String,
    pub model: String,
    pub amount: u64,
    pub created_at_ms: i64,
    pub origin: Origin,
    /// The signed bytes (re-sent as they are; never re-signed).
    pub tx: SignedTx,
    /// Reconcile passes that did not settle the intent.
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub last_error: Option<String>,
    /// The escrow id once the committed tx named it (registration may still be pending).
    #[serde(default)]
    pub escrow_id: Option<String>,
}

/// What the chain said about an intent's tx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Committed(CommittedTx),
    NotFound,
    Unreachable(String),
}

/// Why an intent is cleared without an escrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cleared {
    /// Committed with a code ≠ 0 (no deposit was taken).
    Failed,
    /// Refused by `CheckTx` on its first broadcast (never in a mempool).
    Refused,
    /// Unknown past its timeout: it can never commit.
    Expired,
}

impl Cleared {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Cleared::Failed => "failed",
            Cleared::Refused => "refused",
            Cleared::Expired => "expired",
        }
    }
}

/// The next action for an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntentNext {
    /// Committed with code 0: register this escrow id, then clear.
    Register(String),
    /// Committed without a `devshard_escrow_created` id: kept and reported (the deposit may
    /// have been taken; an operator must look).
    NoEscrowId,
    Clear(Cleared),
    /// Unknown and still able to commit: send the same bytes again.
    Resend,
    /// The chain cannot say now: keep.
    Keep,
}

/// The decision for one intent (`now_unix_s` by the gateway's clock).
pub fn next(lookup: &Lookup, tx: &SignedTx, now_unix_s: i64) -> IntentNext {
    match lookup {
        Lookup::Committed(c) if c.code == 0 => {
            match c.attribute(EVENT_ESCROW_CREATED, ATTR_ESCROW_ID) {
                Some(id) if !id.trim().is_empty() => IntentNext::Register(id.trim().to_owned()),
                _ => IntentNext::NoEscrowId,
            }
        }
        Lookup::Committed(_) => IntentNext::Clear(Cleared::Failed),
        Lookup::NotFound if now_unix_s > tx.timeout_unix_s + TIMEOUT_MARGIN_S => {
            IntentNext::Clear(Cleared::Expired)
        }
        Lookup::NotFound => IntentNext::Resend,
        Lookup::Unreachable(_) => IntentNext::Keep,
    }
}

#[cfg(test)]
mod tests {
    use devshard_actors::settlement::chain::{TxAttribute, TxEvent};

    use super::*;

    fn tx() -> SignedTx {
        SignedTx {
            bytes: vec![1],
            hash: "AB".into(),
            timeout_unix_s: 1_000,
        }
    }

    fn committed(code: u32, id: Option<&str>) -> Lookup {
        let events = id
            .map(|v| TxEvent {
                kind: EVENT_ESCROW_CREATED.into(),
                attributes: vec![TxAttribute {
                    key: ATTR_ESCROW_ID.into(),
                    value: v.into(),
                }],
            })
            .into_iter()
            .collect();
        Lookup::Committed(CommittedTx {
            code,
            log: String::new(),
            events,
        })
    }

    #[test]
    fn a_committed_creation_registers_the_id_of_its_event() {
        assert_eq!(
            next(&committed(0, Some("43")), &tx(), 0),
            IntentNext::Register("43".into())
        );
        assert_eq!(next(&committed(0, None), &tx(), 0), IntentNext::NoEscrowId);
        assert_eq!(
            next(&committed(5, None), &tx(), 0),
            IntentNext::Clear(Cleared::Failed)
        );
    }

    #[test]
    fn an_unknown_tx_is_resent_until_it_can_no_longer_commit() {
        assert_eq!(next(&Lookup::NotFound, &tx(), 1_000), IntentNext::Resend);
        assert_eq!(
            next(&Lookup::NotFound, &tx(), 1_000 + TIMEOUT_MARGIN_S),
            IntentNext::Resend
        );
        assert_eq!(
            next(&Lookup::NotFound, &tx(), 1_001 + TIMEOUT_MARGIN_S),
            IntentNext::Clear(Cleared::Expired)
        );
        // An unreachable chain never clears an intent, however late.
        assert_eq!(
            next(&Lookup::Unreachable("down".into()), &tx(), 99_999),
            IntentNext::Keep
        );
    }
}
