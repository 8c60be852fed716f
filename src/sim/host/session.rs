//! One host's view of one escrow session: its own state machine, diff log, mempool, state
//! signatures and running executions.
//!
//! Diffs are applied strictly (skip `nonce ≤ latest`, then sequential nonce, user signature,
//! atomic txs and post-state root, all checked by the shared `StateMachine`). A failing diff
//! leaves the state as it was before that diff. Applied txs leave the mempool, and so do
//! entries that can no longer apply (a ConfirmStart whose record is no longer Pending, a Finish
//! whose record is neither Pending nor Started, anything about a sealed record).
//!
//! A host armed with `fork_from_nonce = K` applies the first diff with nonce ≥ K and is then
//! forked: it reports `sha256(root ‖ "fork")` as its root and rejects every later diff with
//! the upstream root-mismatch text, using that root as the computed one.

use std::collections::{BTreeMap, HashMap, HashSet};

use devshard_actors::protocol::{
    crypto::{sha256, Address, SigningKey},
    diff::Diff,
    proto::{DevshardTx, MsgValidation, Tx},
    state::{sign_validation, InferenceStatus, Slot, StateError, StateMachine},
    warm::SharedResolver,
};

use super::super::{chain::EscrowInfo, profile::Jitter};

/// Runs older than this many nonces are forgotten (bounds the replay cache of long benchmarks).
const EXECUTION_MEMORY_NONCES: u64 = 1_000;

/// An executor's run of one inference (retries of the same nonce reuse it).
#[derive(Clone, Debug)]
pub(crate) struct Execution {
    pub receipt: Vec<u8>,
    pub confirmed_at: i64,
    /// The streamed data payloads once the run finished (replayed to a retry).
    pub cached: Option<Vec<String>>,
}

/// One host's view of one escrow (for test assertions).
#[derive(Clone, Debug)]
pub struct HostView {
    pub latest_nonce: u64,
    /// The root the host reports (perturbed once forked).
    pub state_root: [u8; 32],
    /// The root of its state machine.
    pub real_root: [u8; 32],
    pub forked_at: Option<u64>,
    pub mempool_len: usize,
    pub mempool: Vec<DevshardTx>,
    /// Nonces at which the host stored its own state signature.
    pub signed_nonces: Vec<u64>,
    /// A copy of the host's state machine.
    pub state: StateMachine,
    /// The diffs the host applied, in order (its diff chain).
    pub diffs: Vec<Diff>,
}

/// One diff as the host stored it.
#[derive(Clone, Debug)]
pub(crate) struct StoredDiff {
    pub diff: Diff,
    /// The root the host reported after this diff.
    pub state_hash: [u8; 32],
}

/// A host's session for one escrow.
#[derive(Debug)]
pub(crate) struct HostSession {
    /// Distinguishes this session from one re-created after `forget_session`.
    pub incarnation: u64,
    pub sm: StateMachine,
    /// `sm.state_root()`, cached (the root costs a pass over every live record).
    root: [u8; 32],
    pub creator: Address,
    /// The chain's `max_nonce`: active-phase diffs beyond `max_nonce − (N+1)` are rejected.
    pub max_nonce: u64,
    /// This host's slots, ascending.
    pub my_slots: Vec<u32>,
    pub diffs: Vec<StoredDiff>,
    pub mempool: Vec<DevshardTx>,
    /// Own state signature by nonce (served by `GET /signatures`).
    pub signatures: BTreeMap<u64, Vec<u8>>,
    /// Nonce at which the host forked, once it has.
    pub forked_at: Option<u64>,
    pub executions: HashMap<u64, Execution>,
    validated: HashSet<u64>,
    sampler: Jitter,
}

impl HostSession {
    /// Its latest nonce, fork and each slot's cost in its state (the chaos runner's payout check
    /// reads these, from the live session or from what a restart dropped).
    pub(crate) fn held(&self) -> serde_json::Value {
        serde_json::json!({
            "latest_nonce": self.sm.latest_nonce(),
            "forked_at": self.forked_at,
            "host_costs": self.sm.group().iter().map(|slot| serde_json::json!({
                "slot_id": slot.slot_id, "address": slot.validator,
                "cost": self.sm.host_stats(slot.slot_id).cost}))
                .collect::<Vec<_>>(),
        })
    }

    pub(crate) fn new(
        escrow: &EscrowInfo,
        me: &Address,
        incarnation: u64,
        sampler_seed: [u8; 32],
        grants: SharedResolver,
    ) -> Result<HostSession, StateError> {
        let group: Vec<Slot> = escrow
            .slots
            .iter()
            .enumerate()
            .map(|(i, a)| Slot {
                slot_id: i as u32,
                validator: a.clone(),
            })
            .collect();
        let sm = StateMachine::new(
            escrow.escrow_id.clone(),
            escrow.session_config.clone(),
            group,
            escrow.amount,
        )?
        .with_warm_resolver(grants);
        let my_slots = sm.slots_of(me);
        Ok(HostSession {
            incarnation,
            root: sm.state_root(),
            sm,
            creator: escrow.creator.clone(),
            max_nonce: escrow.max_nonce,
            my_slots,
            diffs: Vec::new(),
            mempool: Vec::new(),
            signatures: BTreeMap::new(),
            forked_at: None,
            executions: HashMap::new(),
            validated: HashSet::new(),
            sampler: Jitter::new(sampler_seed),
        })
    }

    /// The root this host reports (perturbed once forked).
    pub(crate) fn reported_root(&self) -> [u8; 32] {
        let root = self.root;
        if self.forked_at.is_some() {
            let mut pre = root.to_vec();
            pre.extend_from_slice(b"fork");
            sha256(&pre)
        } else {
            root
        }
    }

    /// Applies `diffs` in order, skipping already-applied nonces. On the first failure the
    /// error text is `apply diff nonce N: …`; diffs before it stay applied.
    pub(crate) fn apply_diffs(
        &mut self,
        diffs: &[Diff],
        fork_from: Option<u64>,
        validation_rate: f64,
        key: &SigningKey,
    ) -> Result<(), String> {
        for diff in diffs {
            if diff.nonce <= self.sm.latest_nonce() {
                continue;
            }
            self.apply_one(diff, fork_from)
                .map_err(|e| format!("apply diff nonce {}: {e}", diff.nonce))?;
            self.after_apply(diff, validation_rate, key);
        }
        Ok(())
    }

    fn apply_one(&mut self, diff: &Diff, fork_from: Option<u64>) -> Result<(), String> {
        if self.forked_at.is_some() {
            return Err(StateError::PostStateRootMismatch {
                diff: hex::encode(&diff.post_state_root),
                computed: hex::encode(self.reported_root()),
            }
            .to_string());
        }
        let n = self.sm.group_size() as u64;
        if self.sm.phase() == devshard_actors::protocol::state::Phase::Active
            && diff.nonce > self.max_nonce.saturating_sub(n + 1)
        {
            return Err("nonce exceeds chain max_nonce limit".to_owned());
        }
        self.sm
            .apply_diff(diff, &self.creator)
            .map_err(|e| e.to_string())?;
        // A non-empty post-state root was just checked equal to the computed one.
        self.root = match <[u8; 32]>::try_from(diff.post_state_root.as_slice()) {
            Ok(root) => root,
            Err(_) => self.sm.state_root(),
        };
        if fork_from.is_some_and(|k| diff.nonce >= k) {
            self.forked_at = Some(diff.nonce);
        }
        Ok(())
    }

    fn after_apply(&mut self, diff: &Diff, validation_rate: f64, key: &SigningKey) {
        let horizon = diff.nonce.saturating_sub(EXECUTION_MEMORY_NONCES);
        self.executions.retain(|id, _| *id > horizon);
        let applied: HashSet<TxKey> = diff.txs.iter().filter_map(tx_key).collect();
        let sm = &self.sm;
        self.mempool.retain(|tx| {
            tx_key(tx).is_none_or(|k| !applied.contains(&k)) && still_applicable(sm, tx)
        });
        self.diffs.push(StoredDiff {
            diff: diff.clone(),
            state_hash: self.reported_root(),
        });
        for tx in &diff.txs {
            if let Some(Tx::FinishInference(f)) = &tx.tx {
                self.maybe_validate(f.inference_id, f.executor_slot, validation_rate, key);
            }
        }
    }

    /// A non-executor validates a finished inference with probability `rate`.
    fn maybe_validate(&mut self, id: u64, executor_slot: u32, rate: f64, key: &SigningKey) {
        let Some(&validator_slot) = self.my_slots.first() else {
            return;
        };
        let executor = self.sm.slot_address(executor_slot);
        if executor == Some(key.address()) || !self.validated.insert(id) {
            return;
        }
        if self.sampler.unit() >= rate {
            return;
        }
        let msg = MsgValidation {
            inference_id: id,
            validator_slot,
            valid: true,
            proposer_sig: Vec::new(),
            escrow_id: self.sm.escrow_id().to_owned(),
        };
        self.mempool
            .push(DevshardTx::new(Tx::Validation(sign_validation(msg, key))));
    }

    /// A snapshot for test assertions.
    pub(crate) fn view(&self) -> HostView {
        HostView {
            latest_nonce: self.sm.latest_nonce(),
            state_root: self.reported_root(),
            real_root: self.root,
            forked_at: self.forked_at,
            mempool_len: self.mempool.len(),
            mempool: self.mempool.clone(),
            signed_nonces: self.signatures.keys().copied().collect(),
            state: self.sm.clone(),
            diffs: self.diffs.iter().map(|d| d.diff.clone()).collect(),
        }
    }

    /// Adds a tx unless an entry with the same key is already there.
    pub(crate) fn add_to_mempool(&mut self, tx: DevshardTx) {
        let key = tx_key(&tx);
        if key.is_some() && self.mempool.iter().any(|t| tx_key(t) == key) {
            return;
        }
        self.mempool.push(tx);
    }

    /// True when the mempool holds a tx of `kind` (a [`Tx`] tag) for inference `id`.
    pub(crate) fn mempool_has(&self, kind: u8, id: u64) -> bool {
        self.mempool
            .iter()
            .any(|t| tx_key(t).is_some_and(|k| k.0 == kind && k.1 == id))
    }

    /// The diffs in `from..=to` as stored.
    pub(crate) fn diffs_in(&self, from: u64, to: u64) -> impl Iterator<Item = &StoredDiff> {
        self.diffs
            .iter()
            .filter(move |d| d.diff.nonce >= from && d.diff.nonce <= to)
    }
}

/// Tags of the [`Tx`] kinds keyed in the mempool.
pub(crate) const KIND_CONFIRM: u8 = 2;
pub(crate) const KIND_FINISH: u8 = 3;
const KIND_VALIDATION: u8 = 5;
const KIND_VOTE: u8 = 6;

/// Dedup key of a host-proposed tx: (kind, inference id, slot).
type TxKey = (u8, u64, u32);

fn tx_key(tx: &DevshardTx) -> Option<TxKey> {
    match tx.tx.as_ref()? {
        Tx::ConfirmStart(m) => Some((KIND_CONFIRM, m.inference_id, 0)),
        Tx::FinishInference(m) => Some((KIND_FINISH, m.inference_id, 0)),
        Tx::Validation(m) => Some((KIND_VALIDATION, m.inference_id, m.validator_slot)),
        Tx::ValidationVote(m) => Some((KIND_VOTE, m.inference_id, m.voter_slot)),
        _ => None,
    }
}

fn still_applicable(sm: &StateMachine, tx: &DevshardTx) -> bool {
    let Some(key) = tx_key(tx) else { return true };
    let Some(rec) = sm.record(key.1) else {
        return false;
    };
    match key.0 {
        KIND_CONFIRM => rec.status == InferenceStatus::Pending,
        KIND_FINISH => matches!(
            rec.status,
            InferenceStatus::Pending | InferenceStatus::Started
        ),
        KIND_VALIDATION => !rec.is_validated_by_slot(key.2) && !rec.status.is_terminal(),
        _ => !rec.status.is_terminal(),
    }
}
