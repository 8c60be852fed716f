//! The one outcome of each attempt, the correlation guard and the escrow's view for health
//! (HEALTH.md §1): a host fault is *held* until it is confirmed as that host's own — some host of
//! this escrow succeeds, or its window passes with no other host failing the same way — and is
//! dropped (no strike, no sample) when two or more hosts share it.

use actix::prelude::*;
use slog::{info, warn};

use super::{actor::EscrowActor, attempt::AttemptTimings};
use crate::{
    outcome::{AttemptOutcome, OutcomeClass, ParticipantOutcome},
    policy::{
        correlation::{self, FaultSignature, SharedFault},
        health::EscrowView,
        reason::OutcomeReason,
    },
    protocol::crypto::Address,
    stats::timers,
};

/// A host fault waiting for confirmation.
pub(super) struct HeldOutcome {
    pub host: Address,
    pub at_ms: i64,
    pub signature: FaultSignature,
    pub msg: ParticipantOutcome,
}

impl EscrowActor {
    /// Routability of this escrow as health decisions need it.
    pub(super) fn escrow_view(&self, participant: &Address) -> EscrowView {
        let now = self.now_ms();
        let window = self.settings.peer_evidence_window_ms;
        let hosts = &self.session.info().hosts;
        EscrowView {
            distinct: u32::try_from(hosts.len()).unwrap_or(u32::MAX),
            routable: u32::try_from(
                hosts
                    .iter()
                    .filter(|h| !self.withheld.contains(&h.address))
                    .count(),
            )
            .unwrap_or(u32::MAX),
            peer_success_recent: self
                .last_success
                .iter()
                .any(|(a, at)| a != participant && now.saturating_sub(*at) <= window),
        }
    }

    /// Builds the outcome of `nonce` once (marks the attempt as emitted).
    fn build_outcome(
        &mut self,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        finish_late_ms: Option<i64>,
    ) -> Option<(ParticipantOutcome, String)> {
        let escrow_id = self.session.info().escrow_id.clone();
        let entry = self.attempts.get_mut(&nonce)?;
        if entry.emitted {
            return None;
        }
        entry.emitted = true;
        let (host, timings, crowned) = (entry.host.clone(), entry.timings, entry.crowned);
        let request = entry.request_id.clone();
        self.observe(class, &timings, finish_late_ms);
        let outcome = AttemptOutcome {
            escrow_id,
            nonce,
            class,
            reason,
            timings,
            finish_late_ms,
        };
        let msg = ParticipantOutcome {
            escrow_view: self.escrow_view(&host),
            escrow_has_success: self.any_success,
            participant: host,
            outcome,
            winner: crowned,
            shared: false,
        };
        Some((msg, request))
    }

    fn observe(&self, class: OutcomeClass, t: &AttemptTimings, late: Option<i64>) {
        self.metrics
            .attempts
            .with_label_values(&[class.as_str()])
            .inc();
        let secs = |to: Option<i64>| to.map(|x| x.saturating_sub(t.send_ms) as f64 / 1000.0);
        let phases = [
            ("receipt", secs(t.receipt_ms)),
            ("first_content", secs(t.first_content_ms)),
            ("total", secs(Some(t.end_ms))),
        ];
        for (phase, v) in phases {
            if let Some(v) = v.filter(|v| *v >= 0.0) {
                self.metrics
                    .attempt_seconds
                    .with_label_values(&[phase])
                    .observe(v);
            }
        }
        if late.is_some() {
            self.metrics
                .late_finishes
                .with_label_values(&["arrived_late"])
                .inc();
        }
    }

    /// Emits the final outcome of an attempt (exactly once per attempt). Successes release the
    /// host faults they confirm.
    pub(super) fn emit(
        &mut self,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        finish_late_ms: Option<i64>,
    ) {
        let Some((msg, request)) = self.build_outcome(nonce, class, reason, finish_late_ms) else {
            return;
        };
        if class == OutcomeClass::Success {
            let now = self.now_ms();
            self.any_success = true;
            self.last_success.insert(msg.participant.clone(), now);
            let released = self.detector.record_success(&msg.participant, now);
            self.release(released);
        }
        self.send_outcome(msg, &request);
    }

    /// Settles a failed attempt through the correlation guard. Returns the shared fault, if the
    /// failure is shared by several hosts (the race stops fanning out and tells the client).
    pub(super) fn emit_failure(
        &mut self,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        status: Option<u16>,
        message: &str,
        ctx: &mut Context<Self>,
    ) -> Option<SharedFault<Address>> {
        let (mut msg, request) = self.build_outcome(nonce, class, reason, None)?;
        let guarded = matches!(
            class,
            OutcomeClass::HostFault
                | OutcomeClass::Overload
                | OutcomeClass::EscrowFault
                | OutcomeClass::GatewayFault
        );
        if !guarded {
            self.send_outcome(msg, &request);
            return None;
        }
        let now = self.now_ms();
        let signature = FaultSignature::new(class, status, reason, message);
        match self
            .detector
            .record_failure(msg.participant.clone(), signature.clone(), now)
        {
            Some(shared) => {
                let cause = correlation::cause_message(&shared);
                warn!(self.log, "fault shared by several hosts; no strikes"; "stage" => "shared_fault_detected",
                    "reason" => reason.as_str(), "hosts" => shared.hosts.len(), "cause" => &cause);
                self.metrics
                    .shared_faults
                    .with_label_values(&[reason.as_str()])
                    .inc();
                let (same, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
                    .into_iter()
                    .partition(|h| h.signature == signature);
                self.held = rest;
                for mut h in same {
                    h.msg.shared = true;
                    self.send_outcome(h.msg, "");
                }
                msg.shared = true;
                self.send_outcome(msg, &request);
                Some(shared)
            }
            None if class == OutcomeClass::HostFault => {
                self.held.push(HeldOutcome {
                    host: msg.participant.clone(),
                    at_ms: now,
                    signature,
                    msg,
                });
                self.arm_release(ctx);
                None
            }
            None => {
                self.send_outcome(msg, &request);
                None
            }
        }
    }

    /// Confirmed host faults: now they are struck and sampled.
    fn release(&mut self, released: Vec<crate::policy::correlation::HeldFault<Address>>) {
        for r in released {
            if let Some(i) = self
                .held
                .iter()
                .position(|h| h.host == r.host && h.at_ms == r.at_ms && h.signature == r.signature)
            {
                let h = self.held.remove(i);
                self.send_outcome(h.msg, "");
            }
        }
    }

    fn arm_release(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.release_timer.take() {
            t.cancel(&self.stats, ctx);
        }
        let Some(at) = self.detector.next_release() else {
            return;
        };
        let delay = std::time::Duration::from_millis(
            u64::try_from(at.saturating_sub(self.now_ms())).unwrap_or(0),
        );
        let timer = timers::run_later(&self.stats, ctx, "fault_release", delay, |act, ctx| {
            act.release_timer = None;
            let released = act.detector.release_due(act.now_ms());
            act.release(released);
            act.arm_release(ctx);
        });
        self.release_timer = Some(timer);
    }

    fn send_outcome(&mut self, msg: ParticipantOutcome, request: &str) {
        let o = &msg.outcome;
        info!(self.log, "attempt settled"; "stage" => "attempt_outcome", "nonce" => o.nonce,
            "host" => msg.participant.short(), "class" => o.class.as_str(), "reason" => o.reason.as_str(),
            "shared" => msg.shared, "request" => request);
        if self.outcomes.try_send(msg).is_err() {
            warn!(self.log, "outcome dropped: participant router unavailable"; "stage" => "outcome_dropped");
        }
    }
}
