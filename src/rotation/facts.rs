//! What a rotation check decides on: every registered escrow's facts by model (budget, serving
//! limit, settlement state, deactivation).
//!
//! The budget is the escrow's live one from the escrow board (`BudgetCell`: the nonce and the
//! spendable balance the escrow actor published last, reservations of requests on their way
//! deducted) when this replica runs the escrow; otherwise the settlement tick's (every 250 ms,
//! from the escrow's snapshot) or, before any, the registered amount. Under a fast load the
//! tick's budget was up to a quarter second late, which is many nonces at a few hundred
//! requests per second: a replacement due 70 nonces before the limit could come too late.

use std::collections::BTreeMap;

use devshard_actors::{
    directory::{pick::reserved_cost, EscrowBoard},
    escrow::EscrowInfo,
    settlement::SettlementState,
};

use super::plan::EscrowFacts;
use crate::state::{
    settlements::{Settlements, WORST_CASE_INPUT_BYTES},
    Deactivated,
};

/// How long a check waits for the settlement views.
const VIEW_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Every registered escrow's facts, by model.
pub(super) async fn gather(
    settlements: &Settlements,
    deactivated: &Deactivated,
    max_tokens_cap: u64,
    board: &EscrowBoard,
) -> BTreeMap<String, Vec<EscrowFacts>> {
    // The registrations from the directory's board (not listed and decoded from the store on
    // every check: ≈ 37 KB of JSON values per escrow, issue 16).
    let board = board.load();
    let infos: BTreeMap<&str, &EscrowInfo> = board
        .escrows
        .iter()
        .map(|e| (e.id.as_str(), e.info.as_ref()))
        .collect();
    let off = deactivated.lock().map(|d| d.clone()).unwrap_or_default();
    let live: BTreeMap<&str, (u64, u64)> = board
        .escrows
        .iter()
        .map(|e| {
            // Unsettled inferences may each still take a nonce (`nonce_room`): counted as used.
            let used = |b: &devshard_actors::escrow::budget::BudgetView| {
                (b.nonce.saturating_add(b.settling), b.spendable())
            };
            (e.id.as_str(), e.budget.check(used))
        })
        .collect();
    let mut by_model: BTreeMap<String, Vec<EscrowFacts>> = BTreeMap::new();
    for v in settlements.views(VIEW_DEADLINE).await {
        let Some(info) = infos.get(v.escrow_id.as_str()) else {
            continue;
        };
        let c = &info.config;
        let worst_cost = reserved_cost(
            WORST_CASE_INPUT_BYTES,
            max_tokens_cap,
            c.token_price,
            c.fee_per_nonce,
        );
        let (nonce, spendable) = match (live.get(v.escrow_id.as_str()).copied(), v.budget) {
            (Some(n), _) => n,
            (None, Some(b)) => (b.nonce.saturating_add(b.unsettled), b.balance),
            (None, None) => (0, info.amount),
        };
        let state = v.record.as_ref().map(|r| &r.state);
        by_model
            .entry(info.model.clone())
            .or_default()
            .push(EscrowFacts {
                escrow_id: v.escrow_id.clone(),
                nonce,
                serving_limit: info.last_active_nonce(),
                spendable,
                worst_cost,
                closed: state.is_some_and(SettlementState::is_closed),
                settled: matches!(state, Some(SettlementState::Settled { .. })),
                deactivated: off.contains(&v.escrow_id),
            });
    }
    by_model
}
