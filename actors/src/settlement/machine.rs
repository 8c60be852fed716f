//! The settlement state machine of one escrow (docs/lifecycle.md §1) as data and pure decisions.
//!
//! ```text
//! active ─▶ draining ─▶ finalizing ─▶ collecting ─▶ broadcast ─▶ settled
//!                                                      │  ▲
//!                                                      ▼  │
//!                                                    retrying
//! ```
//!
//! The record is persisted before each step acts; the step's effects are idempotent given the
//! record (a diff round re-run after a crash finds its diff already in the log; a broadcast
//! re-sends the persisted bytes). The one rule that keeps money safe: **a new, different tx is
//! signed only when the current one can no longer commit** — it committed with a failure, its
//! timeout has passed, or every broadcast of it was refused by `CheckTx`.

use serde::{Deserialize, Serialize};

use super::{payload::SettlementPayload, quorum::Weight};
use crate::protocol::cosmos::SignedTx;
#[cfg(test)]
use crate::protocol::cosmos::TxSettings;

/// Interval of confirmation polls (`GET /cosmos/tx/v1beta1/txs/{hash}`).
pub const CONFIRM_POLL_MS: i64 = 2_000;
/// How long confirmation is polled before the step goes back to retrying.
pub const CONFIRM_WINDOW_MS: i64 = 45_000;
/// Retry back-off: first delay, cap.
pub const RETRY_FIRST_MS: i64 = 2_000;
pub const RETRY_MAX_MS: i64 = 60_000;
/// Margin past a tx's timeout before it is treated as unable to commit (clock skew).
pub const TIMEOUT_MARGIN_S: i64 = 30;

/// `[settlement]` of the gateway config: auto-settle and the settlement tx's fee, gas, denom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SettlementSettings {
    /// Drain and settle an escrow that can no longer serve (nonce limit, balance).
    pub auto_settle: bool,
    pub fee_amount: u64,
    pub fee_denom: String,
    pub gas_limit: u64,
    pub timeout_s: u64,
}

impl Default for SettlementSettings {
    fn default() -> Self {
        let tx = crate::protocol::cosmos::TxSettings::default();
        SettlementSettings {
            auto_settle: true,
            fee_amount: tx.fee_amount,
            fee_denom: tx.fee_denom,
            gas_limit: tx.gas_limit,
            timeout_s: tx.timeout_s,
        }
    }
}

impl SettlementSettings {
    pub fn tx(&self) -> crate::protocol::cosmos::TxSettings {
        crate::protocol::cosmos::TxSettings {
            fee_amount: self.fee_amount,
            fee_denom: self.fee_denom.clone(),
            gas_limit: self.gas_limit,
            timeout_s: self.timeout_s,
        }
    }
}

/// Why an escrow settles without anyone asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoSettle {
    NonceLimit,
    Balance,
}

/// Auto-settle decision: the escrow is within `margin` nonces of its serving limit, or its
/// balance cannot fund one worst-case request.
pub fn auto_settle_due(
    nonce: u64,
    serving_limit: u64,
    margin: u64,
    balance: u64,
    worst_case_cost: u64,
) -> Option<AutoSettle> {
    if nonce.saturating_add(margin) >= serving_limit {
        Some(AutoSettle::NonceLimit)
    } else if balance < worst_case_cost {
        Some(AutoSettle::Balance)
    } else {
        None
    }
}

/// The persisted state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SettlementState {
    /// Picked for new requests (no record is written in this state).
    Active,
    /// No new requests; running attempts finish and unfinished nonces settle.
    Draining,
    /// Diff rounds without inference; `finalize_nonce` once MsgFinalizeRound is in a diff.
    Finalizing { finalize_nonce: Option<u64> },
    /// Gathering state signatures of the final root at `nonce`.
    Collecting { nonce: u64 },
    /// The signed tx is persisted; it is (re-)sent and its commit polled.
    Broadcast { tx: SignedTx },
    /// Waiting before the next attempt of `step` (a broadcast keeps its tx).
    Retrying {
        step: RetryStep,
        next_at_ms: i64,
        tx: Option<SignedTx>,
    },
    /// Committed with code 0, or the chain reports the escrow settled.
    Settled {
        tx_hash: Option<String>,
        already_settled: bool,
    },
}

/// Which step a retry resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryStep {
    Collecting,
    Broadcast,
}

impl SettlementState {
    /// Metric / API label.
    pub fn label(&self) -> &'static str {
        match self {
            SettlementState::Active => "active",
            SettlementState::Draining => "draining",
            SettlementState::Finalizing { .. } => "finalizing",
            SettlementState::Collecting { .. } => "collecting",
            SettlementState::Broadcast { .. } => "broadcast",
            SettlementState::Retrying { .. } => "retrying",
            SettlementState::Settled { .. } => "settled",
        }
    }

    /// Every label, for zeroing the `devshard_escrows{state}` gauge.
    pub const LABELS: [&'static str; 7] = [
        "active",
        "draining",
        "finalizing",
        "collecting",
        "broadcast",
        "retrying",
        "settled",
    ];

    /// True once the escrow may no longer be picked for new requests.
    pub fn is_closed(&self) -> bool {
        !matches!(self, SettlementState::Active)
    }

    /// True before any diff round ran (the only states an admin may reactivate from).
    pub fn can_reactivate(&self) -> bool {
        matches!(self, SettlementState::Active | SettlementState::Draining)
    }
}

/// The durable record of one escrow's settlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementRecord {
    pub escrow_id: String,
    pub state: SettlementState,
    /// Broadcast after finalizing (`false` for `POST …/finalize`: stop at the payload).
    pub broadcast: bool,
    pub payload: Option<SettlementPayload>,
    pub weight: Option<Weight>,
    /// Attempts of the current step (reset when a step succeeds).
    pub attempts: u32,
    pub last_error: Option<String>,
    /// The final nonce, once the session reached Settlement.
    pub final_nonce: Option<u64>,
    /// Every tx hash this gateway signed for the escrow, oldest first.
    pub tx_hashes: Vec<String>,
    /// The latest signed tx (kept after settlement for operators' and tests' checks).
    pub signed_tx: Option<SignedTx>,
    /// True once a broadcast of the current tx may have reached a mempool.
    pub maybe_in_mempool: bool,
    pub started_ms: i64,
    /// The last write; nothing writes a `Settled` record again: then, when it settled.
    pub updated_ms: i64,
}

impl SettlementRecord {
    pub fn new(escrow_id: &str, broadcast: bool, now_ms: i64) -> SettlementRecord {
        SettlementRecord {
            escrow_id: escrow_id.to_owned(),
            state: SettlementState::Draining,
            broadcast,
            payload: None,
            weight: None,
            attempts: 0,
            last_error: None,
            final_nonce: None,
            tx_hashes: Vec::new(),
            signed_tx: None,
            maybe_in_mempool: false,
            started_ms: now_ms,
            updated_ms: now_ms,
        }
    }

    /// The tx the record currently holds (in broadcast or a broadcast retry).
    pub fn current_tx(&self) -> Option<&SignedTx> {
        match &self.state {
            SettlementState::Broadcast { tx } => Some(tx),
            SettlementState::Retrying { tx, .. } => tx.as_ref(),
            _ => None,
        }
    }
}

/// `RETRY_FIRST_MS · 2^(attempt−1)`, capped at `RETRY_MAX_MS`.
pub fn retry_delay_ms(attempt: u32) -> i64 {
    let shift = attempt.saturating_sub(1).min(16);
    (RETRY_FIRST_MS << shift).min(RETRY_MAX_MS)
}

/// What one broadcast answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BroadcastOutcome {
    /// `tx_response.code == 0`: in the mempool.
    Accepted,
    /// Code 19: the same bytes are already known (in the mempool or committed).
    Duplicate,
    /// Any other code: `CheckTx` refused these bytes.
    Refused { code: u32, log: String },
    /// No answer (timeout, connection refused, 5xx): it may or may not be in the mempool.
    Unknown(String),
}

/// What the chain says about the tx hash and the escrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    Committed { code: u32, log: String },
    NotFound,
    Unreachable(String),
}

/// The next action of a broadcast step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BroadcastNext {
    /// Poll the hash every [`CONFIRM_POLL_MS`] for up to [`CONFIRM_WINDOW_MS`].
    Confirm,
    /// Done (committed with code 0).
    Settled,
    /// Ask the chain whether the escrow is settled: settled → done, else [`BroadcastNext::Resign`].
    CheckEscrow,
    /// Send the same bytes again after the back-off.
    Resend,
    /// The tx can no longer commit: sign a new one (new timeout) after the back-off.
    Resign,
}

/// After a broadcast answer.
pub fn after_broadcast(outcome: &BroadcastOutcome, maybe_in_mempool: bool) -> BroadcastNext {
    match outcome {
        BroadcastOutcome::Accepted | BroadcastOutcome::Duplicate | BroadcastOutcome::Unknown(_) => {
            BroadcastNext::Confirm
        }
        // Refused bytes are not in a mempool; if no earlier send may have left them there,
        // nothing of ours can commit: the escrow check decides between done and a new tx.
        BroadcastOutcome::Refused { .. } if !maybe_in_mempool => BroadcastNext::CheckEscrow,
        BroadcastOutcome::Refused { .. } => BroadcastNext::Confirm,
    }
}

/// After the confirmation window (or one poll that is conclusive).
pub fn after_confirmation(
    confirmation: &Confirmation,
    tx: &SignedTx,
    now_unix_s: i64,
) -> BroadcastNext {
    match confirmation {
        Confirmation::Committed { code: 0, .. } => BroadcastNext::Settled,
        // Committed with a failure: the escrow may be settled by another tx (success), or not.
        Confirmation::Committed { .. } => BroadcastNext::CheckEscrow,
        Confirmation::NotFound if now_unix_s > tx.timeout_unix_s + TIMEOUT_MARGIN_S => {
            BroadcastNext::CheckEscrow
        }
        Confirmation::NotFound | Confirmation::Unreachable(_) => BroadcastNext::Resend,
    }
}

/// After [`BroadcastNext::CheckEscrow`]: `settled` is the chain's answer (`None`: unreachable).
pub fn after_escrow_check(settled: Option<bool>) -> BroadcastNext {
    match settled {
        Some(true) => BroadcastNext::Settled,
        Some(false) => BroadcastNext::Resign,
        None => BroadcastNext::Resend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx() -> SignedTx {
        SignedTx {
            bytes: vec![1, 2, 3],
            hash: "AB".into(),
            timeout_unix_s: 1_000,
        }
    }

    #[test]
    fn auto_settle_at_the_nonce_margin_or_a_short_balance() {
        assert_eq!(auto_settle_due(10, 40, 16, 1_000, 10), None);
        assert_eq!(
            auto_settle_due(24, 40, 16, 1_000, 10),
            Some(AutoSettle::NonceLimit)
        );
        assert_eq!(auto_settle_due(1, 40, 16, 9, 10), Some(AutoSettle::Balance));
        assert!(SettlementSettings::default().auto_settle);
        assert_eq!(SettlementSettings::default().tx(), TxSettings::default());
    }

    #[test]
    fn retries_back_off_to_a_cap() {
        assert_eq!(retry_delay_ms(1), 2_000);
        assert_eq!(retry_delay_ms(2), 4_000);
        assert_eq!(retry_delay_ms(6), 60_000);
        assert_eq!(retry_delay_ms(100), 60_000);
    }

    #[test]
    fn an_unanswered_or_accepted_broadcast_is_confirmed_never_resigned() {
        for o in [
            BroadcastOutcome::Accepted,
            BroadcastOutcome::Duplicate,
            BroadcastOutcome::Unknown("timeout".into()),
        ] {
            assert_eq!(after_broadcast(&o, false), BroadcastNext::Confirm);
        }
        let refused = BroadcastOutcome::Refused {
            code: 13,
            log: "fee".into(),
        };
        assert_eq!(after_broadcast(&refused, false), BroadcastNext::CheckEscrow);
        // An earlier send may still commit: keep confirming the same hash.
        assert_eq!(after_broadcast(&refused, true), BroadcastNext::Confirm);
    }

    #[test]
    fn a_new_tx_only_when_the_old_one_cannot_commit() {
        let t = tx();
        let ok = Confirmation::Committed {
            code: 0,
            log: String::new(),
        };
        assert_eq!(after_confirmation(&ok, &t, 0), BroadcastNext::Settled);
        let failed = Confirmation::Committed {
            code: 1107,
            log: "quorum".into(),
        };
        assert_eq!(
            after_confirmation(&failed, &t, 0),
            BroadcastNext::CheckEscrow
        );
        // Unknown hash before its timeout: it may still commit, so the same bytes go again.
        assert_eq!(
            after_confirmation(&Confirmation::NotFound, &t, 1_000),
            BroadcastNext::Resend
        );
        assert_eq!(
            after_confirmation(&Confirmation::NotFound, &t, 1_000 + TIMEOUT_MARGIN_S + 1),
            BroadcastNext::CheckEscrow
        );
        assert_eq!(
            after_confirmation(&Confirmation::Unreachable("down".into()), &t, 5_000),
            BroadcastNext::Resend
        );
        assert_eq!(after_escrow_check(Some(true)), BroadcastNext::Settled);
        assert_eq!(after_escrow_check(Some(false)), BroadcastNext::Resign);
        assert_eq!(after_escrow_check(None), BroadcastNext::Resend);
    }

    #[test]
    fn records_round_trip_through_json() {
        let mut r = SettlementRecord::new("42", true, 5);
        r.state = SettlementState::Retrying {
            step: RetryStep::Broadcast,
            next_at_ms: 9,
            tx: Some(tx()),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["state"]["state"], "retrying");
        let back: SettlementRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.current_tx(), Some(&tx()));
        assert!(back.state.is_closed());
    }
}
