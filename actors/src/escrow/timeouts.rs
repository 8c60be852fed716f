//! Timeout handling for attempts that failed without a finish (PROTOCOL.md §6.5, HEALTH.md §5).
//!
//! At the protocol deadline (`started_at + refusal_timeout` or `confirmed_at + execution_timeout`,
//! plus the buffer) the escrow asks every other host for a signed timeout vote, one nonce at a
//! time (so at most one RPC per verifier), verifies each vote, and when the accepted weight is
//! strictly above `vote_threshold` sequences `MsgTimeoutInference` in the next diff and sends it.
//! Only a confirmed timeout turns a pending finish into a `HostFault`.

use std::collections::BTreeSet;

use actix::prelude::*;
use slog::{info, warn};

use super::{actor::EscrowActor, nonces::NonceState};
use crate::{
    host::client,
    outcome::OutcomeClass,
    policy::reason::{EmptyDiffReason, OutcomeReason},
    protocol::{
        crypto::{self, Address},
        proto::{DevshardTx, MsgTimeoutInference, TimeoutReason, TimeoutVote, Tx},
        state,
        wire::{DiffJson, InferenceRequest, VerifyTimeoutRequest, VerifyTimeoutResponse},
    },
};

impl EscrowActor {
    /// Puts a failed, unfinished attempt on the timeout path.
    pub(super) fn await_timeout(
        &mut self,
        nonce: u64,
        reason: OutcomeReason,
        ctx: &mut Context<Self>,
    ) {
        let cfg = &self.session.info().config;
        let (refusal, execution) = (cfg.refusal_timeout, cfg.execution_timeout);
        let buffer = self.cfg.timeout_buffer_ms;
        let Some(entry) = self.attempts.get_mut(&nonce) else {
            return;
        };
        let (deadline_ms, kind) = entry.timeout_deadline(refusal, execution, buffer);
        entry.state = NonceState::AwaitingTimeout {
            deadline_ms,
            reason,
        };
        info!(self.log, "timeout scheduled"; "stage" => "timeout_scheduled", "nonce" => nonce,
            "reason" => kind.as_wire(), "remaining_ms" => deadline_ms.saturating_sub(self.clock.now_ms()));
        self.arm_nonce_timer(nonce, ctx);
    }

    pub(super) fn enqueue_timeout(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        if !self.timeout_queue.contains(&nonce) {
            self.timeout_queue.push_back(nonce);
        }
        self.next_timeout(ctx);
    }

    fn next_timeout(&mut self, ctx: &mut Context<Self>) {
        if self.timeout_running {
            return;
        }
        while let Some(nonce) = self.timeout_queue.pop_front() {
            if self.session.is_finished(nonce) {
                self.emit(
                    nonce,
                    OutcomeClass::Success,
                    OutcomeReason::FinishedLate,
                    None,
                );
                self.attempts.remove(&nonce);
                continue;
            }
            if self.attempts.contains_key(&nonce) {
                self.timeout_running = true;
                self.collect_votes(nonce, ctx);
                return;
            }
        }
    }

    fn collect_votes(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        // Voters judge from their own state: sequence pending txs first (e.g. this nonce's
        // ConfirmStart, without which an execution timeout cannot be verified), and send only
        // diffs that are durable — the vote requests go out once this flush/ack resolved.
        let ready = match self.session.pending().is_empty() {
            true => self.store.flush(),
            false => match self.compose_withheld(EmptyDiffReason::TimeoutContext) {
                Some((_, ack)) => ack,
                None => self.store.flush(),
            },
        };
        let Some(entry) = self.attempts.get(&nonce) else {
            return;
        };
        let info = self.session.info().clone();
        let cfg = &info.config;
        let (_, reason) = entry.timeout_deadline(cfg.refusal_timeout, cfg.execution_timeout, 0);
        let mut calls = Vec::new();
        for host in info.hosts.iter().filter(|h| h.address != entry.host) {
            let diffs = self
                .session
                .catch_up(&host.address, self.cfg.catch_up_chunk);
            let request = VerifyTimeoutRequest {
                inference_id: nonce,
                reason: reason.as_wire().to_string(),
                payload: entry.payload.clone(),
                diffs: Some(diffs.iter().map(|d| DiffJson::from_diff(d)).collect()),
            };
            calls.push((
                host.address.clone(),
                info.session_url(host, "verify-timeout"),
                request,
            ));
        }
        let key = self.key.clone();
        let clock = self.clock.clone();
        let timeout = self.cfg.host_timeouts.verify_timeout;
        let escrow_id = info.escrow_id.clone();
        let threshold = u64::from(cfg.vote_threshold);
        let weights: Vec<(Address, u64)> = info
            .hosts
            .iter()
            .map(|h| (h.address.clone(), u64::try_from(h.slots.len()).unwrap_or(0)))
            .collect();
        let fut = async move {
            let mut answers = Vec::new();
            if ready.await.is_err() {
                return answers;
            }
            let mut weight = 0u64;
            for (addr, url, request) in calls {
                let res = client::verify_timeout(
                    &url,
                    &escrow_id,
                    &request,
                    &key,
                    clock.now_unix(),
                    timeout,
                )
                .await;
                if let Ok(answer) = res {
                    if answer.accept {
                        weight += weights
                            .iter()
                            .find(|(a, _)| *a == addr)
                            .map_or(0, |(_, w)| *w);
                    }
                    answers.push((addr, answer));
                }
                if weight > threshold {
                    break;
                }
            }
            answers
        };
        ctx.spawn(fut.into_actor(self).map(move |answers, act, ctx| {
            act.timeout_running = false;
            act.finish_timeout(nonce, reason, answers, ctx);
            act.next_timeout(ctx);
        }));
    }

    fn finish_timeout(
        &mut self,
        nonce: u64,
        reason: TimeoutReason,
        answers: Vec<(Address, VerifyTimeoutResponse)>,
        ctx: &mut Context<Self>,
    ) {
        let info = self.session.info().clone();
        let content = state::timeout_vote_content(&info.escrow_id, nonce, reason);
        let mut voters = BTreeSet::new();
        let mut votes = Vec::new();
        let mut weight = 0u64;
        for (addr, answer) in answers {
            let Some(sig) = answer.signature.filter(|_| answer.accept) else {
                continue;
            };
            let owns_slot = info
                .group
                .iter()
                .any(|s| s.slot_id == answer.voter_slot && s.validator == addr);
            if !owns_slot
                || crypto::verify(&content, &sig, &addr).is_err()
                || !voters.insert(addr.clone())
            {
                warn!(self.log, "timeout vote rejected"; "stage" => "timeout_vote_invalid",
                    "nonce" => nonce, "host" => addr.short());
                continue;
            }
            weight += info
                .host(&addr)
                .map_or(0, |h| u64::try_from(h.slots.len()).unwrap_or(0));
            votes.push(TimeoutVote {
                voter_slot: answer.voter_slot,
                accept: true,
                signature: sig,
            });
        }
        let threshold = u64::from(info.config.vote_threshold);
        let result = if weight > threshold {
            "confirmed"
        } else {
            "insufficient"
        };
        self.metrics.timeouts.with_label_values(&[result]).inc();
        if weight <= threshold {
            warn!(self.log, "timeout not confirmed"; "stage" => "timeout_insufficient_votes",
                "nonce" => nonce, "weight" => weight, "threshold" => threshold);
            self.emit(
                nonce,
                OutcomeClass::Cancelled,
                OutcomeReason::TimeoutUnconfirmed,
                None,
            );
            self.attempts.remove(&nonce);
            return;
        }
        info!(self.log, "timeout confirmed by votes"; "stage" => "timeout_confirmed",
            "nonce" => nonce, "reason" => reason.as_wire(), "weight" => weight);
        self.emit(
            nonce,
            OutcomeClass::HostFault,
            OutcomeReason::TimeoutConfirmed,
            None,
        );
        self.attempts.remove(&nonce);
        self.session
            .queue(DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
                inference_id: nonce,
                reason: reason as i32,
                votes,
            })));
        self.send_pending_diff(ctx);
    }

    /// `SendPendingDiff`: composes the next nonce without a payload, makes it durable and sends it
    /// to its host with catch-up (skipped when that host is withheld: catch-up carries it later).
    pub(super) fn send_pending_diff(&mut self, ctx: &mut Context<Self>) {
        let Some((diff, ack)) = self.compose_withheld(EmptyDiffReason::PendingDiff) else {
            return;
        };
        let info = self.session.info().clone();
        let Some(host) = info.host_for_nonce(diff.nonce).cloned() else {
            return;
        };
        if self.withheld.contains(&host.address) {
            self.watch_ack(diff.nonce, ack, ctx);
            return;
        }
        let diffs = self
            .session
            .catch_up(&host.address, self.cfg.catch_up_chunk);
        let request = InferenceRequest {
            diffs: diffs.iter().map(|d| DiffJson::from_diff(d)).collect(),
            nonce: diff.nonce,
            payload: None,
            stream: None,
        };
        let url = info.session_url(&host, "chat/completions");
        let (key, clock, timeout) = (
            self.key.clone(),
            self.clock.clone(),
            self.cfg.host_timeouts.query,
        );
        let escrow_id = info.escrow_id.clone();
        let fut = async move {
            ack.await.map_err(|e| e.to_string())?;
            client::send_diffs(&url, &escrow_id, &request, &key, clock.now_unix(), timeout)
                .await
                .map_err(|e| e.to_string())
        };
        let addr = host.address.clone();
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
            Ok(sent) => {
                if let Some(r) = sent.receipt {
                    if let Err(e) = act.session.process_receipt(&addr, None, &r) {
                        warn!(act.log, "pending diff response rejected"; "stage" => "process_response_failed",
                            "host" => addr.short(), "error" => %e);
                    }
                    act.sync_dirty = true;
                }
                act.absorb_mempool(sent.mempool, ctx);
            }
            Err(e) => warn!(act.log, "pending diff not delivered"; "stage" => "pending_diff_failed",
                "host" => addr.short(), "error" => e),
        }));
    }
}
