//! The cost ledger's settlement tail (`ledger-settle` thread): one replica of the protocol state
//! machine per escrow with unsettled rows, fed from the escrow's durable diff log (see the
//! parent module's docs). What it keeps per settled nonce is [`Settled`] (no strings: the escrow
//! id and the fee are the replica's), at most [`SETTLED_CACHE`] per escrow.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use devshard_actors::{
    escrow::EscrowInfo,
    protocol::{
        diff::Diff,
        proto::Tx,
        state::{InferenceStatus, StateMachine},
    },
    store::Store,
};
use slog::{info, warn};

use super::LedgerDeps;
use crate::{
    escrow_archive,
    store::{
        duty::Leadership,
        ledger::{LedgerStore, Settlement},
    },
};

/// Settlements kept per escrow for rows that arrive after their nonce settled.
pub const SETTLED_CACHE: usize = 16_384;
/// An escrow's replica that no unsettled row needed for this long is let go (ms).
const TAIL_IDLE_MS: i64 = 30_000;
/// Diffs read from the log at a time: a replica rebuilt after a restart replays the whole log,
/// which was one read of every diff (seed long-1: 300 000 diffs, the gateway past 1.3 GB
/// within seconds of a restart).
const TAIL_BATCH: u64 = 1_024;

/// One settled nonce as the tail keeps it: a [`Settlement`] less what the replica knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settled {
    /// The record's status (`None`: the nonce's diff carried no inference, `"none"` in the row).
    status: Option<InferenceStatus>,
    input_tokens: u64,
    output_tokens: u64,
    reserved_cost: u64,
    actual_cost: u64,
    settled_ms: i64,
}

/// One escrow's replica of the state machine.
struct EscrowTail {
    info: EscrowInfo,
    sm: StateMachine,
    next: u64,
    settled: BTreeMap<u64, Settled>,
    /// When an unsettled row last needed this replica (unix ms).
    needed_ms: i64,
}

pub(super) struct Tail {
    ledger: Arc<LedgerStore>,
    deps: LedgerDeps,
    escrows: BTreeMap<String, EscrowTail>,
}

fn settled_status(s: InferenceStatus) -> bool {
    !matches!(s, InferenceStatus::Pending | InferenceStatus::Started)
}

impl EscrowTail {
    fn new(info: EscrowInfo, now_ms: i64) -> Result<EscrowTail, String> {
        let sm = StateMachine::new(
            info.escrow_id.clone(),
            info.config.clone(),
            info.group.clone(),
            info.amount,
        )
        .map_err(|e| e.to_string())?;
        Ok(EscrowTail {
            info,
            sm,
            next: 1,
            settled: BTreeMap::new(),
            needed_ms: now_ms,
        })
    }

    /// Notes the settlement of `id` if its record is settled (or absent at its own diff).
    fn observe(&mut self, id: u64, own_diff: bool, now_ms: i64) {
        let s = match self.sm.record(id) {
            Some(r) if settled_status(r.status) => Settled {
                status: Some(r.status),
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                reserved_cost: r.reserved_cost,
                actual_cost: r.actual_cost,
                settled_ms: now_ms,
            },
            None if own_diff => Settled {
                status: None,
                input_tokens: 0,
                output_tokens: 0,
                reserved_cost: 0,
                actual_cost: 0,
                settled_ms: now_ms,
            },
            _ => return,
        };
        self.settled.entry(id).or_insert(s);
        while self.settled.len() > SETTLED_CACHE {
            self.settled.pop_first();
        }
    }

    /// The ledger's settlement of `nonce`, if it settled.
    fn settlement(&self, nonce: u64) -> Option<Settlement> {
        let s = self.settled.get(&nonce)?;
        Some(Settlement {
            escrow_id: self.info.escrow_id.clone(),
            nonce,
            inference: s.status.map_or("none", InferenceStatus::as_str).to_string(),
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            reserved_cost: s.reserved_cost,
            actual_cost: s.actual_cost,
            fee: self.info.config.fee_per_nonce,
            settled_ms: s.settled_ms,
        })
    }
}

impl Tail {
    pub(super) fn new(ledger: Arc<LedgerStore>, deps: LedgerDeps) -> Tail {
        Tail {
            ledger,
            deps,
            escrows: BTreeMap::new(),
        }
    }

    /// Deletes the rows older than `keep_ms`.
    pub(super) fn prune(&self, keep_ms: i64) {
        self.ledger
            .prune(self.deps.clock.now_ms().saturating_sub(keep_ms));
    }

    pub(super) fn tick(&mut self) {
        if self.deps.duty.lead() != Leadership::Leading {
            return;
        }
        let Ok(pending) = self.ledger.unsettled() else {
            return;
        };
        let mut by_escrow: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (e, n) in pending {
            by_escrow.entry(e).or_default().insert(n);
        }
        let mut out = Vec::new();
        for (escrow_id, nonces) in by_escrow {
            if let Err(e) = self.advance(&escrow_id) {
                warn!(self.deps.log, "ledger: escrow diff log not replayed";
                    "stage" => "ledger_settle_failed", "escrow" => &escrow_id, "error" => e);
                self.escrows.remove(&escrow_id);
                continue;
            }
            if let Some(t) = self.escrows.get_mut(&escrow_id) {
                t.needed_ms = self.deps.clock.now_ms();
                out.extend(nonces.iter().filter_map(|n| t.settlement(*n)));
            }
        }
        self.release_idle();
        if !out.is_empty() {
            info!(self.deps.log, "ledger nonces settled"; "stage" => "ledger_settled",
                "nonces" => out.len());
            self.ledger.settle(out);
        }
    }

    /// Lets go of the replicas no unsettled row needed for [`TAIL_IDLE_MS`]: an idle escrow's
    /// state machine and settlements are not held twice (the escrow holds its own). A row that
    /// comes later rebuilds the replica from nonce 1 of the durable log, as after a restart.
    fn release_idle(&mut self) {
        let now = self.deps.clock.now_ms();
        let before = self.escrows.len();
        self.escrows
            .retain(|_, t| now.saturating_sub(t.needed_ms) < TAIL_IDLE_MS);
        let released = before - self.escrows.len();
        if released > 0 {
            info!(self.deps.log, "ledger: idle escrows' replicas released";
                "stage" => "ledger_tail_released", "escrows" => released,
                "kept" => self.escrows.len());
        }
    }

    /// Applies the escrow's new durable diffs.
    fn advance(&mut self, escrow_id: &str) -> Result<(), String> {
        if !self.escrows.contains_key(escrow_id) {
            // A deleted escrow's kept log still settles, from its archived registration.
            let info = escrow_archive::registration(&self.deps.store, escrow_id)
                .map_err(|e| e.to_string())?
                .ok_or("escrow not registered")?;
            let now = self.deps.clock.now_ms();
            self.escrows
                .insert(escrow_id.to_string(), EscrowTail::new(info, now)?);
        }
        let Some(t) = self.escrows.get_mut(escrow_id) else {
            return Ok(());
        };
        t.replay(&*self.deps.store, self.deps.clock.now_ms())
    }
}

impl EscrowTail {
    /// Applies the log's diffs from `next` on, [`TAIL_BATCH`] at a time.
    fn replay(&mut self, store: &dyn Store, now: i64) -> Result<(), String> {
        loop {
            let to = self.next.saturating_add(TAIL_BATCH - 1);
            let diffs = store
                .load_diffs_range(&self.info.escrow_id, self.next, to)
                .map_err(|e| e.to_string())?;
            if diffs.is_empty() {
                return Ok(());
            }
            self.apply(diffs, now)?;
        }
    }

    /// Applies `diffs` (the next ones of the log, in nonce order) and observes what they start
    /// and end.
    fn apply(&mut self, diffs: Vec<Diff>, now: i64) -> Result<(), String> {
        let creator = self.info.creator.clone();
        for diff in diffs {
            self.sm
                .apply_diff(&diff, &creator)
                .map_err(|e| format!("nonce {}: {e}", diff.nonce))?;
            self.next = diff.nonce + 1;
            let ended: Vec<u64> = diff
                .txs
                .iter()
                .filter_map(|tx| match &tx.tx {
                    Some(Tx::FinishInference(m)) => Some(m.inference_id),
                    Some(Tx::TimeoutInference(m)) => Some(m.inference_id),
                    _ => None,
                })
                .collect();
            self.observe(diff.nonce, true, now);
            for id in ended {
                self.observe(id, false, now);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devshard_actors::{
        escrow::{info::HostEndpoint, session::Session},
        protocol::{
            crypto::SigningKey,
            state::{SessionConfig, Slot},
        },
        store::MemoryStore,
    };

    fn info(creator: &SigningKey, host: &SigningKey) -> EscrowInfo {
        EscrowInfo {
            escrow_id: "42".into(),
            creator: creator.address().clone(),
            model: "m".into(),
            amount: 10_000_000,
            config: SessionConfig::default_for_group(1),
            group: vec![Slot {
                slot_id: 0,
                validator: host.address().clone(),
            }],
            hosts: vec![HostEndpoint {
                address: host.address().clone(),
                base_url: "http://h0".into(),
                slots: vec![0],
                weight: 1,
            }],
            max_nonce: 20_000,
            route_prefix: "/v1/devshard".into(),
        }
    }

    #[test]
    fn seed_long_1_a_rebuilt_replica_replays_a_long_log_in_batches_to_its_end() {
        let (creator, host) = (
            SigningKey::from_bytes(&[3; 32]).unwrap(),
            SigningKey::from_bytes(&[4; 32]).unwrap(),
        );
        let info = info(&creator, &host);
        let store = MemoryStore::new();
        let mut session = Session::new(std::sync::Arc::new(info.clone())).unwrap();
        let n = 2 * TAIL_BATCH + 17;
        for _ in 0..n {
            let d = session.compose(Vec::new(), &creator).unwrap();
            drop(store.append_diff("42", &d));
        }
        let mut t = EscrowTail::new(info, 0).unwrap();
        t.replay(&store, 5).unwrap();
        assert_eq!(t.next, n + 1, "every batch applied, the last one short");
        assert_eq!(t.sm.latest_nonce(), n);
        assert!(t.settlement(n).is_some() && t.settlement(TAIL_BATCH + 1).is_some());
        t.replay(&store, 6).unwrap();
        assert_eq!(t.next, n + 1, "nothing new: nothing applied");
    }

    #[test]
    fn a_settled_nonce_is_kept_in_48_bytes_with_nothing_on_the_heap() {
        // It was a `Settlement`: two owned strings (escrow id, status) and the fee, per nonce,
        // up to 16 384 per escrow (issue 16).
        assert_eq!(std::mem::size_of::<Settled>(), 48);
        assert!(std::mem::size_of::<Settled>() < std::mem::size_of::<Settlement>() / 2);
    }
}
