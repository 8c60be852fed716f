//! What a rotation check decides on: every registered escrow's facts by model (budget, serving
//! limit, settlement state, deactivation) and where each budget came from.
//!
//! The budget is the escrow's live one from the escrow board (`BudgetCell`: the nonce and the
//! spendable balance the escrow actor published last, reservations of requests on their way
//! deducted) when this replica runs the escrow. Under a fast load the settlement tick's budget
//! was up to a quarter second late, which is many nonces at a few hundred requests per second:
//! a replacement due 70 nonces before the limit could come too late.
//!
//! For an escrow this replica does not run: on a shared PostgreSQL store, the owner's
//! publication and the durable log ([`super::remote`]); on a store one process owns (SQLite),
//! the settlement tick's budget or, before any, the registered amount.

use std::collections::BTreeMap;

use devshard_actors::{
    directory::{pick::reserved_cost, EscrowBoard},
    escrow::EscrowInfo,
    settlement::SettlementState,
    store::StoreError,
};

use super::{
    plan::EscrowFacts,
    remote::{remote_budget, BudgetSource, Freshness},
};
use crate::{
    state::{
        settlements::{Settlements, WORST_CASE_INPUT_BYTES},
        Deactivated,
    },
    store::postgres::{budgets::SharedBudget, PgStore},
};

/// How long a check waits for the settlement views.
const VIEW_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a check reads the budgets.
pub(super) struct Sources<'a> {
    pub board: &'a EscrowBoard,
    /// The shared store (several replicas), for the escrows another replica runs.
    pub shared: Option<(&'a PgStore, Freshness)>,
}

/// Every registered escrow's facts, by model; an error when the shared budgets cannot be read
/// (the check then decides nothing).
pub(super) async fn gather(
    settlements: &Settlements,
    deactivated: &Deactivated,
    max_tokens_cap: u64,
    sources: Sources<'_>,
) -> Result<BTreeMap<String, Vec<EscrowFacts>>, StoreError> {
    // The registrations from the directory's board (not listed and decoded from the store on
    // every check: ≈ 37 KB of JSON values per escrow, issue 16).
    let board = sources.board.load();
    let infos: BTreeMap<&str, &EscrowInfo> = board
        .escrows
        .iter()
        .map(|e| (e.id.as_str(), e.info.as_ref()))
        .collect();
    let off = deactivated.lock().map(|d| d.clone()).unwrap_or_default();
    // The board lists every registered escrow; on a shared store only those whose actor runs
    // here have a live budget (another replica's keeps the figures of when it last ran here).
    let shared_store = sources.shared.is_some();
    let live: BTreeMap<&str, (u64, u64)> = board
        .escrows
        .iter()
        .filter(|e| !shared_store || e.addr.is_some())
        .map(|e| {
            // Unsettled inferences may each still take a nonce (`nonce_room`): counted as used.
            let used = |b: &devshard_actors::escrow::budget::BudgetView| {
                (b.nonce.saturating_add(b.settling), b.spendable())
            };
            (e.id.as_str(), e.budget.check(used))
        })
        .collect();
    let remote_ids: Vec<String> = infos
        .keys()
        .filter(|id| !live.contains_key(*id))
        .map(|id| (*id).to_owned())
        .collect();
    let shared: BTreeMap<String, SharedBudget> = match &sources.shared {
        Some((pg, _)) => pg
            .shared_budgets(&remote_ids)
            .await?
            .into_iter()
            .map(|b| (b.escrow_id.clone(), b))
            .collect(),
        None => BTreeMap::new(),
    };
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
        let registered = info.amount.saturating_sub(c.create_devshard_fee);
        let (nonce, spendable, budget_known, source) =
            match (live.get(v.escrow_id.as_str()).copied(), &sources.shared) {
                (Some((n, s)), _) => (n, s, true, BudgetSource::Live),
                (None, Some((_, freshness))) => {
                    let none = SharedBudget::default();
                    let b = shared.get(&v.escrow_id).unwrap_or(&none);
                    let e = remote_budget(b, registered, worst_cost, *freshness);
                    (e.nonce, e.spendable, e.known, e.source)
                }
                (None, None) => match v.budget {
                    Some(b) => (
                        b.nonce.saturating_add(b.unsettled),
                        b.balance,
                        true,
                        BudgetSource::Tick,
                    ),
                    None => (0, info.amount, true, BudgetSource::Registered),
                },
            };
        let state = v.record.as_ref().map(|r| &r.state);
        let settled = matches!(state, Some(SettlementState::Settled { .. }));
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
                settled,
                // The record's last write is the one that made it settled (the settlement
                // actor never writes a settled record again): its time is the settlement's.
                settled_at_ms: v.record.as_ref().filter(|_| settled).map(|r| r.updated_ms),
                deactivated: off.contains(&v.escrow_id),
                budget_known,
                source,
                burn_per_s: 0,
            });
    }
    Ok(by_model)
}
