//! Settlement steps of the escrow (docs/lifecycle.md §1, docs/protocol.md §5.8): draining closes the
//! escrow to new requests; each finalize round composes one diff without inference (the first
//! carries `MsgFinalizeRound`), waits for it to be durable, and catches every host up; the final
//! state and its signatures are read for the settlement payload; a warm signer of a final-state
//! signature is checked on chain, and a host whose final-state signature does not verify is
//! charged `invalid_state_sig`. `closing` is not persisted:
//! the settlement record is, and a resumed settlement sends `BeginDrain` again.

use std::collections::BTreeMap;

use actix::prelude::*;
use slog::info;

use super::super::{
    messages::{
        BeginDrain, CatchUpAll, ChargeInvalidSignature, CheckWarmSigner, DrainProgress,
        FinalizeRound, GetFinalState,
    },
    nonce_room,
    nonces::NonceState,
    sync,
};
use super::{voting::VoteWake, EscrowActor};
use crate::{
    escrow::session::WarmSigner,
    policy::reason::{EmptyDiffReason, OutcomeReason},
    protocol::{
        proto::{DevshardTx, MsgFinalizeRound, Tx},
        state::Phase,
        warm::Acceptance,
    },
    settlement::port::{FinalState, RoundDone},
    store::Ack,
};

impl EscrowActor {
    fn round_done(&self) -> RoundDone {
        let st = self.session.state();
        RoundDone {
            nonce: st.latest_nonce(),
            phase: st.phase(),
            finalize_nonce: st.finalize_nonce(),
        }
    }

    /// Catch-up of every host after `ready`, absorbing answers (sync nonces, signatures).
    /// Ejected hosts too: ejection keeps inference away from a host, but the settlement needs
    /// its signature on the final state (the rotating hour-long run ended with three of five
    /// hosts ejected for 20–28 more minutes and two settlements stuck at 2/4 weight).
    fn catch_up_then(
        &mut self,
        ready: Option<Ack>,
        resend_last: bool,
    ) -> ResponseActFuture<Self, Result<RoundDone, String>> {
        let targets = sync::Targets::Routable {
            routing: &self.routing,
            with_ejected: true,
            skip: &[],
        };
        let sends = sync::catch_up_hosts(&self.session, targets, &self.deps, ready, resend_last);
        Box::pin(sends.into_actor(self).map(|res, act, ctx| {
            res.map(|answers| {
                // A host that answered a gap is caught up from what it holds next round.
                let _ = act.absorb_sync_answers(answers, ctx);
                act.round_done()
            })
        }))
    }
}

impl EscrowActor {
    /// Finished nonces whose finish marker is queued while no diff but the finalize round fits
    /// below the last active nonce (`nonce_room::diff_fits`): the finalize round's diff carries
    /// them, so the drain does not wait for them.
    fn finishes_for_the_finalize_round(&self) -> usize {
        let next = self.session.nonce().saturating_add(1);
        let last_active = self.session.info().last_active_nonce();
        if self.session.state().phase() != Phase::Active
            || nonce_room::diff_fits(next, last_active, false)
        {
            return 0;
        }
        self.book
            .nonces()
            .into_iter()
            .filter(|n| {
                matches!(
                    self.book.entry(*n).map(|e| &e.state),
                    Some(NonceState::Finished { .. })
                ) && self.session.pending().holds_finish(*n)
            })
            .count()
    }
}

impl Handler<BeginDrain> for EscrowActor {
    type Result = MessageResult<BeginDrain>;

    fn handle(&mut self, _: BeginDrain, ctx: &mut Self::Context) -> Self::Result {
        if !self.closing {
            info!(self.deps.log, "escrow draining"; "stage" => "settlement_started",
                "nonce" => self.session.nonce(), "unsettled" => self.book.len());
        }
        self.closing = true;
        self.hasten_short_votes(VoteWake::Draining, ctx);
        MessageResult(DrainProgress {
            waiting: self.picker.len(),
            unsettled: self
                .book
                .len()
                .saturating_sub(self.finishes_for_the_finalize_round()),
        })
    }
}

impl Handler<FinalizeRound> for EscrowActor {
    type Result = ResponseActFuture<Self, Result<RoundDone, String>>;

    fn handle(&mut self, _: FinalizeRound, ctx: &mut Self::Context) -> Self::Result {
        self.closing = true;
        let phase = self.session.state().phase();
        if phase == Phase::Settlement {
            // Nothing more to compose: only make sure every host has the final diffs.
            let ready = Some(self.deps.store.flush());
            return self.catch_up_then(ready, true);
        }
        if phase == Phase::Active {
            self.session
                .queue(DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {})));
        }
        let Some((diff, ack)) = self.durable.compose_withheld(
            &mut self.session,
            &self.deps,
            EmptyDiffReason::FinalizeRound,
        ) else {
            return Box::pin(fut::ready(Err(
                "finalize round could not be composed".into()
            )));
        };
        info!(self.deps.log, "finalize round composed"; "stage" => "finalize_round",
            "nonce" => diff.nonce, "phase" => ?self.session.state().phase());
        let ready = self.durable_then_ready(diff.nonce, ack, ctx);
        self.catch_up_then(Some(ready), false)
    }
}

impl Handler<GetFinalState> for EscrowActor {
    type Result = MessageResult<GetFinalState>;

    fn handle(&mut self, _: GetFinalState, _: &mut Self::Context) -> Self::Result {
        let state = self.session.state().clone();
        let nonce = state.latest_nonce();
        let mut signatures = BTreeMap::new();
        for (addr, sig) in self.session.signatures() {
            if sig.nonce != nonce {
                continue;
            }
            for slot in state.slots_of(addr) {
                signatures.insert(slot, sig.signature.clone());
            }
        }
        MessageResult(FinalState { state, signatures })
    }
}

impl Handler<CatchUpAll> for EscrowActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: CatchUpAll, _: &mut Self::Context) -> Self::Result {
        let ready = Some(self.deps.store.flush());
        Box::pin(self.catch_up_then(ready, true).map(|_, _, _| ()))
    }
}

impl Handler<CheckWarmSigner> for EscrowActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: CheckWarmSigner, _: &mut Self::Context) -> Self::Result {
        self.check_warm_signers(vec![WarmSigner {
            validator: msg.validator,
            warm: msg.warm,
            acceptance: Acceptance::Unresolved,
        }])
    }
}

impl Handler<ChargeInvalidSignature> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: ChargeInvalidSignature, _: &mut Self::Context) {
        self.charge_byzantine(&msg.participant, OutcomeReason::InvalidStateSig);
    }
}
