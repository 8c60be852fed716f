//! The escrow's side of the repair loop (HEALTH.md §6): a participant whose state diverged from
//! ours is withheld in this escrow only (its nonces carry no inference) and gets exactly one
//! `RepairActor`; the escrow plans each tick (durable canonical diffs the host lacks) and judges
//! what the host answers. Only a signature over our root, verified here, clears the block.

use actix::prelude::*;
use slog::{info, warn};

use super::{actor::EscrowActor, messages::TriggerRepair, session::SessionError};
use crate::{
    protocol::crypto::Address,
    repair::{
        messages::{
            PlanRepair, RepairGaveUp, RepairNow, RepairPlan, RepairStep, RepairVerdict, StopRepair,
        },
        RepairActor, RepairDeps,
    },
    stats::TrackedActor,
};

impl EscrowActor {
    /// First detection of divergence of `host`: withhold it here and start its repair (once).
    pub(super) fn start_repair(&mut self, host: &Address, ctx: &mut Context<Self>) {
        if self.repairs.contains_key(host) {
            return;
        }
        let Some(slots) = self.session.info().host(host).map(|h| h.slots.clone()) else {
            return;
        };
        warn!(self.log, "participant state diverged; withheld in this escrow";
            "stage" => "escrow_participant_state_blocked", "host" => host.short());
        let actor = RepairActor::new(
            RepairDeps {
                escrow: self.tracked_address(ctx),
                clock: self.clock.clone(),
                log: self.log.clone(),
                metrics: self.metrics.clone(),
                settings: self.settings.clone(),
                actors: self.actors.clone(),
            },
            self.escrow_id(),
            host.clone(),
            slots,
        );
        self.repairs.insert(host.clone(), actor.start_tracked());
        self.recompute_withheld();
    }

    /// Stops every repair (escrow stopping or retired).
    pub(super) fn stop_repairs(&mut self) {
        for (_, addr) in std::mem::take(&mut self.repairs) {
            addr.do_send(StopRepair);
        }
    }

    fn unblock(&mut self, host: &Address) {
        if self.repairs.remove(host).is_some() {
            self.gave_up.remove(host);
            self.recompute_withheld();
        }
    }
}

impl Handler<PlanRepair> for EscrowActor {
    type Result = Result<RepairPlan, String>;

    fn handle(&mut self, msg: PlanRepair, _: &mut Self::Context) -> Self::Result {
        let info = self.session.info().clone();
        let host = info
            .host(&msg.participant)
            .ok_or("not a participant of this escrow")?;
        // Only durable diffs may reach a host: the plan stops at the last acknowledged nonce.
        let durable = self.durable_nonce;
        let diffs: Vec<_> = self
            .session
            .catch_up(&msg.participant, usize::MAX)
            .into_iter()
            .filter(|d| d.nonce <= durable)
            .collect();
        let target_nonce = diffs
            .last()
            .map_or(self.session.host_sync(&msg.participant).min(durable), |d| {
                d.nonce
            });
        let now = self.clock.now_unix();
        let chunks = self
            .catch_up_chunks(&diffs, now)
            .map_err(|e| e.to_string())?;
        Ok(RepairPlan {
            chat_url: info.session_url(host, "chat/completions"),
            signatures_url: info.session_url(host, "signatures"),
            chunks,
            target_nonce,
        })
    }
}

impl Handler<RepairStep> for EscrowActor {
    type Result = Result<RepairVerdict, SessionError>;

    fn handle(&mut self, msg: RepairStep, _: &mut Self::Context) -> Self::Result {
        match msg {
            RepairStep::CatchUp {
                participant,
                receipt,
            } => {
                self.session.process_receipt(&participant, None, &receipt)?;
                self.sync_dirty = true;
                Ok(RepairVerdict::Continue)
            }
            RepairStep::SessionLost { participant } => {
                self.session.reset_host_sync(&participant);
                self.sync_dirty = true;
                Ok(RepairVerdict::Continue)
            }
            RepairStep::Signature {
                participant,
                nonce,
                signature,
            } => {
                self.session
                    .accept_fetched_signature(&participant, nonce, &signature)?;
                info!(self.log, "signature over our root verified"; "stage" => "repair_signature_verified",
                    "host" => participant.short(), "nonce" => nonce);
                self.unblock(&participant);
                Ok(RepairVerdict::Unblocked)
            }
        }
    }
}

impl Handler<RepairGaveUp> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: RepairGaveUp, _: &mut Self::Context) {
        self.gave_up.insert(msg.participant);
    }
}

impl Handler<TriggerRepair> for EscrowActor {
    type Result = bool;

    fn handle(&mut self, msg: TriggerRepair, _: &mut Self::Context) -> bool {
        match self.repairs.get(&msg.participant) {
            Some(addr) => {
                addr.do_send(RepairNow);
                true
            }
            None => false,
        }
    }
}

impl Handler<crate::escrow::messages::GetRepairStates> for EscrowActor {
    type Result = ResponseFuture<Vec<crate::repair::messages::RepairState>>;

    fn handle(
        &mut self,
        _: crate::escrow::messages::GetRepairStates,
        _: &mut Self::Context,
    ) -> Self::Result {
        let addrs: Vec<_> = self.repairs.values().cloned().collect();
        Box::pin(async move {
            let calls = addrs
                .iter()
                .map(|a| a.send(crate::repair::messages::GetRepairState));
            futures::future::join_all(calls)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect()
        })
    }
}

/// The prompt of a ghost inference (upstream's ghost probe).
const GHOST_PROMPT: &[u8] = br#"{"messages":[{"role":"user","content":"."}],"max_tokens":1}"#;

impl EscrowActor {
    /// After its repair gave up, a still-diverged participant is charged normally again: its
    /// nonces carry an accountable inference that is never sent (it cannot serve it), and the
    /// refused-timeout vote settles it — so a permanently forked host does not end the epoch
    /// cleaner than one that served. Returns `false` when nothing could be composed.
    pub(super) fn compose_ghost(&mut self, host: &Address, ctx: &mut Context<Self>) -> bool {
        use super::{
            attempt::AttemptTimings,
            nonces::{NonceEntry, NonceState},
            session::StartParams,
        };
        let Ok(prompt_hash) = crate::protocol::canonical::prompt_hash(GHOST_PROMPT) else {
            return false;
        };
        let started_at = self.clock.now_unix();
        let params = StartParams {
            prompt_hash,
            model: self.session.info().model.clone(),
            input_length: GHOST_PROMPT.len() as u64,
            max_tokens: 1,
            started_at,
        };
        let key = self.key.clone();
        let Ok(diff) = self.session.compose_start(&params, &key) else {
            return false;
        };
        let ack = self.store.append_diff(self.escrow_id(), &diff);
        self.watch_ack(diff.nonce, ack, ctx);
        self.metrics.nonces.with_label_values(&["ghost"]).inc();
        let payload = crate::protocol::wire::PayloadJson {
            prompt: GHOST_PROMPT.to_vec(),
            model: params.model,
            input_length: params.input_length,
            max_tokens: 1,
            started_at,
        };
        let cfg = &self.session.info().config;
        let deadline_ms = started_at
            .saturating_add(cfg.refusal_timeout)
            .saturating_mul(1000)
            .saturating_add(self.cfg.timeout_buffer_ms);
        self.attempts.insert(
            diff.nonce,
            NonceEntry {
                nonce: diff.nonce,
                host: host.clone(),
                race_id: None,
                request_id: "ghost".into(),
                started_at,
                confirmed_at: None,
                payload: Some(payload),
                timings: AttemptTimings::default(),
                state: NonceState::AwaitingTimeout {
                    deadline_ms,
                    reason: crate::policy::reason::OutcomeReason::Ghost,
                },
                crowned: false,
                emitted: true,
            },
        );
        self.arm_nonce_timer(diff.nonce, ctx);
        true
    }

    /// An admin `forget` of a participant also lifts its divergence block here.
    pub(super) fn forget_divergence(&mut self, host: &Address) {
        if let Some(addr) = self.repairs.remove(host) {
            addr.do_send(StopRepair);
        }
        self.gave_up.remove(host);
        self.recompute_withheld();
    }
}

impl Handler<super::messages::ForgetDivergence> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: super::messages::ForgetDivergence, ctx: &mut Self::Context) {
        self.forget_divergence(&msg.participant);
        self.pump(ctx);
    }
}
