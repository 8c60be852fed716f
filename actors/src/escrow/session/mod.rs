//! The escrow's protocol session as plain data: the single sequencer of docs/protocol.md §5 and §8.4
//! (`user.Session` upstream), with no actor, timer or I/O in it.
//!
//! - `compose*` builds the next diff (`nonce + 1`): pending txs in priority order plus extras,
//!   best-effort applied to the local state machine, signed over the applied subset.
//! - `catch_up_after` starts `diffsForHost`: every diff the host has not acknowledged;
//!   `windowed_after` is bounded by a window and what no request sent it yet (`sync_points.rs`).
//! - Only the newest `diff_window` diffs stay in memory (`window.rs`); older ones are read back
//!   from the store (`escrow/diff_log.rs`).
//! - `process_receipt` / `process_mempool` are `processResponse`: state-hash check
//!   (`ErrStateHashMismatch`), state-signature verification (`ErrInvalidStateSig`), sync-nonce
//!   advance, receipt → verified `MsgConfirmStart`, mempool txs queued with dedup, finished nonces.
//!
//! Improvements over upstream: receipts and finish markers are verified when they arrive (a lying
//! host is detected at once, not silently dropped at the next compose), and a tx skipped by
//! best-effort apply may be queued again when a host shows it again.

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use super::{info::EscrowInfo, nonce_room, pending::PendingTxs};
use crate::protocol::{
    crypto::{Address, SigningKey},
    diff::Diff,
    guard,
    proto::{self, DevshardTx, MsgConfirmStart, MsgStartInference, Tx},
    state::{self, Phase, StateMachine},
    warm::{NoGrants, SharedResolver, WarmBinding},
    wire::ReceiptBody,
};

pub mod checkpoint;
mod restore;
mod sync_points;
mod unsettled;
mod warm;
mod window;

pub use restore::ReplayFault;
pub use warm::WarmSigner;
pub use window::{DEFAULT_DIFF_WINDOW, LATE_ROOTS, RECALLED_ROOTS};

pub use crate::protocol::session_error::SessionError;

/// Parameters of one inference (the `MsgStartInference` fields we choose).
#[derive(Debug, Clone, PartialEq)]
pub struct StartParams {
    pub prompt_hash: [u8; 32],
    pub model: String,
    pub input_length: u64,
    pub max_tokens: u64,
    pub started_at: i64,
}

/// The latest verified state signature of one host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSignature {
    pub nonce: u64,
    pub state_root: Vec<u8>,
    pub signature: Vec<u8>,
}

/// The protocol session of one escrow.
#[derive(Debug, Clone)]
pub struct Session {
    info: Arc<EscrowInfo>,
    sm: StateMachine,
    /// The newest `diff_window` diffs (`window.rs`); older ones are read from the store.
    diffs: BTreeMap<u64, Arc<Diff>>,
    diff_window: usize,
    /// Roots of diffs read back from the store (`window.rs`).
    recalled: RefCell<BTreeMap<u64, window::Root>>,
    /// The root last read back for one report (`window.rs`, `recall_one`), outside the cap.
    asked: RefCell<Option<(u64, window::Root)>>,
    host_sync: BTreeMap<Address, u64>,
    /// Highest nonce sent to each host in an inference request (optimistic catch-up).
    host_sent: BTreeMap<Address, u64>,
    signatures: BTreeMap<Address, HostSignature>,
    pending: PendingTxs,
    finished: BTreeSet<u64>,
    /// Step 4 of the warm-key rule (the gateway's grant cache; none by default).
    grants: SharedResolver,
    /// Warm keys bound by the last composed diff.
    last_warm_delta: Vec<WarmBinding>,
    /// Nonces whose confirmed timeout a compose skipped (`unsettled.rs`, `take_lost_timeouts`).
    lost_timeouts: Vec<u64>,
}

impl Session {
    /// A fresh session at nonce 0.
    pub fn new(info: Arc<EscrowInfo>) -> Result<Session, SessionError> {
        let sm = StateMachine::new(
            info.escrow_id.clone(),
            info.config.clone(),
            info.group.clone(),
            info.amount,
        )?;
        Ok(Session {
            info,
            sm,
            diffs: BTreeMap::new(),
            diff_window: DEFAULT_DIFF_WINDOW,
            recalled: RefCell::default(),
            asked: RefCell::default(),
            host_sync: BTreeMap::new(),
            host_sent: BTreeMap::new(),
            signatures: BTreeMap::new(),
            pending: PendingTxs::default(),
            finished: BTreeSet::new(),
            grants: Arc::new(NoGrants),
            last_warm_delta: Vec::new(),
            lost_timeouts: Vec::new(),
        })
    }

    pub fn info(&self) -> &Arc<EscrowInfo> {
        &self.info
    }

    pub fn state(&self) -> &StateMachine {
        &self.sm
    }

    /// Last sequenced nonce.
    pub fn nonce(&self) -> u64 {
        self.sm.latest_nonce()
    }

    pub fn pending(&self) -> &PendingTxs {
        &self.pending
    }

    /// The diff of `nonce`, when it is in the window.
    pub fn diff(&self, nonce: u64) -> Option<&Arc<Diff>> {
        self.diffs.get(&nonce)
    }

    /// Composes the next diff with pending txs plus `extra`, signs it and keeps it in memory.
    /// The caller must make it durable before any host sees it.
    pub fn compose(
        &mut self,
        extra: Vec<DevshardTx>,
        key: &SigningKey,
    ) -> Result<Arc<Diff>, SessionError> {
        let nonce = self.nonce().saturating_add(1);
        if self.sm.phase() == Phase::Active {
            let finalize = self.pending.iter().chain(&extra).any(is_finalize_round);
            let last_active = self.info.last_active_nonce();
            if !nonce_room::diff_fits(nonce, last_active, finalize) {
                return Err(SessionError::NonceLimit { nonce, last_active });
            }
        }
        let pending = self.pending.take_ordered();
        let mut candidates = pending.clone();
        candidates.extend(extra);
        let best = match self.sm.apply_best_effort(nonce, candidates) {
            Ok(b) => b,
            Err(e) => {
                for tx in pending {
                    self.pending.forget(&tx);
                    self.pending.push(tx);
                }
                return Err(e.into());
            }
        };
        for (tx, _) in &best.skipped {
            self.pending.forget(tx);
            if let Some(Tx::TimeoutInference(t)) = &tx.tx {
                self.lost_timeouts.push(t.inference_id);
            }
        }
        self.last_warm_delta = best.warm_delta;
        let diff = Arc::new(Diff::sign(
            nonce,
            best.applied,
            &self.info.escrow_id,
            best.root,
            key,
        ));
        self.hold(diff.clone());
        Ok(diff)
    }

    /// Composes the next diff carrying a `MsgStartInference` for that nonce.
    pub fn compose_start(
        &mut self,
        params: &StartParams,
        key: &SigningKey,
    ) -> Result<Arc<Diff>, SessionError> {
        let start = MsgStartInference {
            inference_id: self.nonce().saturating_add(1),
            prompt_hash: params.prompt_hash.to_vec(),
            model: params.model.clone(),
            input_length: params.input_length,
            max_tokens: params.max_tokens,
            started_at: params.started_at,
        };
        self.compose(vec![DevshardTx::new(Tx::StartInference(start))], key)
    }

    /// The root we expect a host to report at `nonce` (`None` beyond our nonce, or below the
    /// window and not recalled: `window.rs`).
    pub fn expected_root(&self, nonce: u64) -> Option<Vec<u8>> {
        if nonce == self.nonce() {
            return Some(self.sm.state_root().to_vec());
        }
        self.held_root(nonce)
    }

    /// `processResponse` for a receipt event (or a finalize/catch-up response) of `host`.
    /// `inference_nonce` is the nonce whose inference this response answers, if any.
    pub fn process_receipt(
        &mut self,
        host: &Address,
        inference_nonce: Option<u64>,
        body: &ReceiptBody,
    ) -> Result<(), SessionError> {
        let ours = self.nonce();
        if body.nonce > ours {
            return Err(SessionError::HostAhead {
                host_nonce: body.nonce,
                ours,
            });
        }
        if let Some(hash) = body.state_hash.as_ref().filter(|h| !h.is_empty()) {
            let expected = self.expected_root(body.nonce);
            if expected.is_none() && body.nonce < self.first_held() {
                return Err(SessionError::BeyondWindow { nonce: body.nonce });
            }
            if expected.as_deref() != Some(hash.as_slice()) {
                // A mismatch we can name (another protocol version, a rest_hash composition we
                // do not implement) is reported as such, never as a divergence to repair.
                if let Some(reason) = guard::explain(&self.sm, body.nonce, hash) {
                    return Err(SessionError::Unreproducible {
                        nonce: body.nonce,
                        reason,
                    });
                }
                return Err(SessionError::StateHashMismatch { nonce: body.nonce });
            }
            if let Some(sig) = body.state_sig.as_ref().filter(|s| !s.is_empty()) {
                let content = state::state_sig_content(hash, &self.info.escrow_id, body.nonce);
                self.check_host_signer(host, &content, sig)
                    .map_err(|e| e.into_session(SessionError::InvalidStateSig))?;
                let newer = self
                    .signatures
                    .get(host)
                    .is_none_or(|s| s.nonce <= body.nonce);
                if newer {
                    self.signatures.insert(
                        host.clone(),
                        HostSignature {
                            nonce: body.nonce,
                            state_root: hash.clone(),
                            signature: sig.clone(),
                        },
                    );
                }
            }
        }
        let sync = self.host_sync.entry(host.clone()).or_insert(0);
        if body.nonce > *sync {
            *sync = body.nonce;
            self.trim();
        }
        if let (Some(nonce), Some(receipt)) = (inference_nonce, body.receipt.as_ref()) {
            let confirmed_at = body.confirmed_at.unwrap_or(0);
            self.verify_receipt(nonce, receipt, confirmed_at)?;
            self.pending
                .push(DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
                    inference_id: nonce,
                    executor_sig: receipt.clone(),
                    confirmed_at,
                })));
        }
        Ok(())
    }

    fn verify_receipt(
        &self,
        nonce: u64,
        receipt: &[u8],
        confirmed_at: i64,
    ) -> Result<(), SessionError> {
        let invalid = |reason: String| SessionError::InvalidReceipt { nonce, reason };
        let start = self
            .start_of(nonce)
            .ok_or_else(|| invalid("no MsgStartInference for this nonce".into()))?;
        let slot = self
            .info
            .slot_for_nonce(nonce)
            .ok_or(SessionError::NoHost(nonce))?;
        let content = state::receipt_content(&start, &self.info.escrow_id, confirmed_at);
        self.check_slot_signer(slot.slot_id, &proto::encode(&content), receipt)
            .map_err(|e| e.into_session(invalid))
    }

    /// The `MsgStartInference` we sequenced at `nonce`, if any: from its diff, or rebuilt from
    /// its inference record once the diff left the window (the record holds every field).
    pub fn start_of(&self, nonce: u64) -> Option<MsgStartInference> {
        let Some(diff) = self.diffs.get(&nonce) else {
            return self.sm.record(nonce).map(|r| MsgStartInference {
                inference_id: r.inference_id,
                prompt_hash: r.prompt_hash.to_vec(),
                model: r.model.to_string(),
                input_length: r.input_length,
                max_tokens: r.max_tokens,
                started_at: r.started_at,
            });
        };
        diff.txs.iter().find_map(|tx| match &tx.tx {
            Some(Tx::StartInference(s)) => Some(s.clone()),
            _ => None,
        })
    }

    /// Queues a host's mempool; returns the nonces whose verified finish marker it contained.
    pub fn process_mempool(&mut self, txs: Vec<DevshardTx>) -> Vec<u64> {
        let mut newly_finished = Vec::new();
        for tx in txs {
            if let Some(Tx::FinishInference(f)) = &tx.tx {
                if self.finish_is_genuine(f) && self.finished.insert(f.inference_id) {
                    newly_finished.push(f.inference_id);
                }
            }
            self.pending.push(tx);
        }
        newly_finished
    }

    fn finish_is_genuine(&self, f: &proto::MsgFinishInference) -> bool {
        let Some(slot) = self.info.slot_for_nonce(f.inference_id) else {
            return false;
        };
        f.escrow_id == self.info.escrow_id
            && slot.slot_id == f.executor_slot
            && self
                .check_slot_signer(
                    slot.slot_id,
                    &state::finish_unsigned_bytes(f),
                    &f.proposer_sig,
                )
                .is_ok()
    }

    /// Queues a tx of our own (e.g. `MsgTimeoutInference`, `MsgFinalizeRound`).
    pub fn queue(&mut self, tx: DevshardTx) {
        self.pending.push(tx);
    }

    /// `IsNonceFinished`: a verified finish marker for this nonce was seen.
    pub fn is_finished(&self, nonce: u64) -> bool {
        self.finished.contains(&nonce)
    }

    /// Latest verified state signature of each host.
    pub fn signatures(&self) -> &BTreeMap<Address, HostSignature> {
        &self.signatures
    }

    /// Records a state signature fetched with `GET /signatures` after verifying it against our
    /// root at `nonce` (upstream stores fetched signatures unverified).
    pub fn accept_fetched_signature(
        &mut self,
        host: &Address,
        nonce: u64,
        signature: &[u8],
    ) -> Result<(), SessionError> {
        let root = self.expected_root(nonce).ok_or(SessionError::HostAhead {
            host_nonce: nonce,
            ours: self.nonce(),
        })?;
        let content = state::state_sig_content(&root, &self.info.escrow_id, nonce);
        self.check_host_signer(host, &content, signature)
            .map_err(|e| e.into_session(SessionError::InvalidStateSig))?;
        self.signatures.insert(
            host.clone(),
            HostSignature {
                nonce,
                state_root: root,
                signature: signature.to_vec(),
            },
        );
        Ok(())
    }
}

fn is_finalize_round(tx: &DevshardTx) -> bool {
    matches!(tx.tx, Some(Tx::FinalizeRound(_)))
}
