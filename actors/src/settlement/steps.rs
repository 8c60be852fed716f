//! The steps of a settlement as async functions (no actor state) and how the actor advances
//! its record when one ends.

use std::time::Duration;

use actix::prelude::*;
use slog::{info, warn};

use super::{
    actor::SettlementActor,
    chain::ChainTxClient,
    collect::Collected,
    machine::{
        after_broadcast, after_confirmation, after_escrow_check, BroadcastNext, BroadcastOutcome,
        Confirmation, RetryStep, SettlementState, CONFIRM_POLL_MS, CONFIRM_WINDOW_MS,
    },
    payload::SettlementPayload,
    port::{FinalState, RoundDone},
    quorum::SignerKey,
};
use crate::{
    clock::SharedClock,
    protocol::{
        cosmos::{settle_tx, SignedTx, TxSettings},
        crypto::SigningKey,
        state::Phase,
        tx_timeout::TxTimeout,
    },
};

/// How a step ended.
pub(super) enum StepEnd {
    Drained,
    Round(RoundDone),
    Collected(Box<(FinalState, Collected)>),
    Signed(SignedTx),
    Broadcast {
        next: BroadcastNext,
        tx: SignedTx,
        sent: bool,
        note: String,
    },
}

impl SettlementActor {
    pub(super) fn on_step(&mut self, end: StepEnd, ctx: &mut Context<Self>) {
        let id = self.info.escrow_id.clone();
        let log = self.deps.log.clone();
        let now = self.now_ms();
        let Some(record) = self.record.as_mut() else {
            return;
        };
        match end {
            StepEnd::Drained => {
                record.attempts = 0;
                self.transition(
                    SettlementState::Finalizing {
                        finalize_nonce: None,
                    },
                    ctx,
                );
            }
            StepEnd::Round(r) => {
                record.attempts = 0;
                info!(log, "finalize round sent"; "stage" => "finalize_round", "escrow" => &id,
                    "nonce" => r.nonce, "finalize_nonce" => r.finalize_nonce, "phase" => ?r.phase);
                if r.phase == Phase::Settlement {
                    record.final_nonce = Some(r.nonce);
                    self.transition(SettlementState::Collecting { nonce: r.nonce }, ctx);
                } else {
                    let f = (r.finalize_nonce > 0).then_some(r.finalize_nonce);
                    self.transition(SettlementState::Finalizing { finalize_nonce: f }, ctx);
                }
            }
            StepEnd::Collected(boxed) => {
                let (fin, c) = *boxed;
                for (host, why) in &c.rejected {
                    warn!(log, "final-state signature rejected; host charged";
                        "stage" => "settlement_signature_rejected", "escrow" => &id,
                        "host" => %host, "reason" => why.label(), "error" => %why);
                }
                for (host, why) in &c.unresolved {
                    warn!(log, "final-state signature by a warm key not verified yet";
                        "stage" => "settlement_signature_unresolved", "escrow" => &id,
                        "host" => %host, "error" => %why);
                }
                if let Some(m) = &self.deps.metrics {
                    let judged = c.keys.values().map(|k| k.label());
                    let bad = c
                        .rejected
                        .iter()
                        .chain(&c.unresolved)
                        .map(|(_, e)| e.label());
                    for label in judged.chain(bad) {
                        m.signatures.with_label_values(&[label]).inc();
                    }
                }
                record.weight = Some(c.weight);
                record.final_nonce = Some(c.nonce);
                let warm = c.keys.values().filter(|k| **k == SignerKey::Warm).count();
                info!(log, "signatures collected"; "stage" => "signatures_collected",
                    "escrow" => &id, "nonce" => c.nonce, "weight" => c.weight.weight,
                    "threshold" => c.weight.threshold, "unreachable" => c.unreachable.len(),
                    "warm_signers" => warm, "rejected" => c.rejected.len());
                if !c.weight.reached() {
                    let e = format!(
                        "insufficient signatures: {}/{} weight",
                        c.weight.weight, c.weight.threshold
                    );
                    return self.retry(RetryStep::Collecting, None, e, ctx);
                }
                match SettlementPayload::from_state(&fin.state, &c.signatures) {
                    Ok(p) => record.payload = Some(p),
                    Err(e) => return self.retry(RetryStep::Collecting, None, e.to_string(), ctx),
                }
                record.attempts = 0;
                if record.broadcast {
                    self.sign(ctx);
                } else {
                    self.transition(SettlementState::Collecting { nonce: c.nonce }, ctx);
                }
            }
            StepEnd::Signed(tx) => {
                record.tx_hashes.push(tx.hash.clone());
                record.signed_tx = Some(tx.clone());
                record.maybe_in_mempool = false;
                self.transition(SettlementState::Broadcast { tx }, ctx);
            }
            StepEnd::Broadcast {
                next,
                tx,
                sent,
                note,
            } => {
                record.maybe_in_mempool |= sent;
                info!(log, "settlement tx broadcast"; "stage" => "settlement_broadcast",
                    "escrow" => &id, "tx_hash" => &tx.hash, "result" => &note);
                match next {
                    BroadcastNext::Settled => {
                        let already = !note.starts_with("committed");
                        let seconds = (now - record.started_ms) as f64 / 1000.0;
                        info!(log, "settlement confirmed"; "stage" => "settlement_confirmed",
                            "escrow" => &id, "tx_hash" => &tx.hash, "already_settled" => already,
                            "seconds" => seconds);
                        if let Some(m) = &self.deps.metrics {
                            let result = if already {
                                "already_settled"
                            } else {
                                "confirmed"
                            };
                            m.settlements.with_label_values(&[result]).inc();
                            m.duration.observe(seconds);
                        }
                        let state = SettlementState::Settled {
                            tx_hash: (!already).then_some(tx.hash),
                            already_settled: already,
                        };
                        self.transition(state, ctx);
                    }
                    BroadcastNext::Resign => self.retry(RetryStep::Broadcast, None, note, ctx),
                    _ => self.retry(RetryStep::Broadcast, Some(tx), note, ctx),
                }
            }
        }
    }
}

pub(super) async fn sign_step(
    chain: ChainTxClient,
    key: SigningKey,
    settings: TxSettings,
    payload: SettlementPayload,
    timeout: TxTimeout,
) -> Result<SignedTx, String> {
    let chain_id = chain.chain_id().await.map_err(|e| e.to_string())?;
    let account = chain
        .account_number(key.address())
        .await
        .map_err(|e| e.to_string())?;
    let msg = payload.to_msg(key.address()).map_err(|e| e.to_string())?;
    Ok(settle_tx(
        &key, &msg, &settings, &chain_id, account, timeout,
    ))
}

/// One broadcast of the persisted bytes, the confirmation polls and the escrow check.
pub(super) async fn broadcast_step(
    chain: ChainTxClient,
    tx: SignedTx,
    maybe_in_mempool: bool,
    escrow_id: String,
    clock: SharedClock,
) -> StepEnd {
    let outcome = chain.broadcast(&tx.bytes).await;
    let sent = !matches!(outcome, BroadcastOutcome::Refused { .. });
    let mut note = format!("{outcome:?}");
    let mut next = after_broadcast(&outcome, maybe_in_mempool);
    if next == BroadcastNext::Confirm {
        let deadline = clock.now_ms() + CONFIRM_WINDOW_MS;
        loop {
            let c = chain.confirmation(&tx.hash).await;
            let done = matches!(c, Confirmation::Committed { .. }) || clock.now_ms() >= deadline;
            if done {
                note = match &c {
                    Confirmation::Committed { code: 0, .. } => "committed".to_owned(),
                    other => format!("{other:?}"),
                };
                next = after_confirmation(&c, &tx, clock.now_unix());
                break;
            }
            tokio::time::sleep(Duration::from_millis(CONFIRM_POLL_MS as u64)).await;
        }
    }
    if next == BroadcastNext::CheckEscrow {
        next = after_escrow_check(chain.escrow_settled(&escrow_id).await);
    }
    StepEnd::Broadcast {
        next,
        tx,
        sent,
        note,
    }
}
