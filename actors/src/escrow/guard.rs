//! The fault guard, one part of the escrow actor (docs/health.md §1): builds the one outcome of each
//! attempt and runs the correlation guard over host faults. A host fault is *held* until it is
//! confirmed as that host's own — some host of this escrow succeeds, or its window passes with no
//! other host failing the same way — and is dropped (no strike, no sample) when two or more hosts
//! share it. Owns the held outcomes, the correlation detector, the release timer and the last
//! success per participant (relative evidence). Outcomes are returned to the actor, which sends
//! them to the participant router.

use std::collections::{BTreeMap, BTreeSet};

use slog::{info, warn, Logger};

use super::book::Settled;
use crate::{
    metrics::ActorMetrics,
    outcome::{AttemptTimings, OutcomeClass, ParticipantOutcome},
    policy::{
        correlation::{self, FaultSignature, HeldFault, SharedFault, SharedFaultDetector},
        health::EscrowView,
        settings::HealthSettings,
    },
    protocol::crypto::Address,
    stats::timers::Timer,
};

/// An outcome to send, with the request id it is logged with.
pub(super) type Outbound = (ParticipantOutcome, String);

/// A host fault waiting for confirmation.
struct HeldOutcome {
    host: Address,
    at_ms: i64,
    signature: FaultSignature,
    msg: ParticipantOutcome,
}

/// What a failure settled into.
pub(super) struct FailureSettled {
    /// Outcomes to send now.
    pub send: Vec<Outbound>,
    /// Set when several hosts share the fault (the race stops fanning out and tells the client).
    pub shared: Option<SharedFault<Address>>,
    /// The fault is held: the release timer must be re-armed.
    pub held: bool,
}

/// See the module docs.
pub(super) struct FaultGuard {
    /// Correlation guard (docs/health.md §1).
    detector: SharedFaultDetector<Address>,
    /// Host faults waiting for confirmation.
    held: Vec<HeldOutcome>,
    release_timer: Option<Timer>,
    /// Last success per participant (relative evidence).
    last_success: BTreeMap<Address, i64>,
    /// This escrow has seen a success.
    any_success: bool,
    /// `peer_evidence_window_ms` of the live settings.
    peer_window_ms: i64,
    log: Logger,
    metrics: ActorMetrics,
}

impl FaultGuard {
    pub(super) fn new(settings: &HealthSettings, log: Logger, metrics: ActorMetrics) -> FaultGuard {
        FaultGuard {
            detector: SharedFaultDetector::new(settings),
            held: Vec::new(),
            release_timer: None,
            last_success: BTreeMap::new(),
            any_success: false,
            peer_window_ms: settings.peer_evidence_window_ms,
            log,
            metrics,
        }
    }

    /// Follows a settings change.
    pub(super) fn set_settings(&mut self, settings: &HealthSettings) {
        self.detector.set_settings(settings);
        self.peer_window_ms = settings.peer_evidence_window_ms;
    }

    /// Builds the participant's outcome (`counts`: distinct and routable hosts of the escrow).
    fn outcome(&self, s: Settled, counts: (u32, u32), now: i64) -> Outbound {
        let o = &s.outcome;
        self.observe(o.class, &o.timings, o.finish_late_ms);
        let window = self.peer_window_ms;
        let escrow_view = EscrowView {
            distinct: counts.0,
            routable: counts.1,
            peer_success_recent: self
                .last_success
                .iter()
                .any(|(a, at)| *a != s.participant && now.saturating_sub(*at) <= window),
        };
        let msg = ParticipantOutcome {
            escrow_view,
            escrow_has_success: self.any_success,
            participant: s.participant,
            outcome: s.outcome,
            winner: s.winner,
            shared: false,
        };
        (msg, s.request_id)
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

    /// The outcome of an attempt, not through the guard. A success releases the host faults it
    /// confirms (sent before it).
    pub(super) fn emit(&mut self, s: Settled, counts: (u32, u32), now: i64) -> Vec<Outbound> {
        let success = s.outcome.class == OutcomeClass::Success;
        let out = self.outcome(s, counts, now);
        let mut send = Vec::new();
        if success {
            self.any_success = true;
            self.last_success.insert(out.0.participant.clone(), now);
            // An attempt without a send time (none reaches here today) counts as sent now.
            let sent = Some(out.0.outcome.timings.send_ms)
                .filter(|t| *t > 0)
                .unwrap_or(now);
            let released = self.detector.record_success(&out.0.participant, sent, now);
            send = self.release(released);
        }
        send.push(out);
        send
    }

    /// Settles a failed attempt through the correlation guard (`status`, `message`: what the
    /// host answered, for the fault signature).
    pub(super) fn emit_failure(
        &mut self,
        s: Settled,
        counts: (u32, u32),
        status: Option<u16>,
        message: &str,
        now: i64,
    ) -> FailureSettled {
        let class = s.outcome.class;
        let reason = s.outcome.reason;
        let (mut msg, request) = self.outcome(s, counts, now);
        let mut settled = FailureSettled {
            send: Vec::new(),
            shared: None,
            held: false,
        };
        let guarded = matches!(
            class,
            OutcomeClass::HostFault
                | OutcomeClass::Overload
                | OutcomeClass::EscrowFault
                | OutcomeClass::GatewayFault
        );
        if !guarded {
            settled.send.push((msg, request));
            return settled;
        }
        let signature = FaultSignature::new(class, status, reason, message);
        if self.detector.excuse(&msg.participant, &signature, now) {
            info!(self.log, "connection lost in a shared outage; no strike"; "stage" => "shared_outage_excused",
                "participant" => msg.participant.as_str(), "reason" => &reason);
            self.metrics
                .shared_faults
                .with_label_values(&[reason.as_str()])
                .inc();
            msg.shared = true;
            settled.send.push((msg, request));
            return settled;
        }
        match self
            .detector
            .record_failure(msg.participant.clone(), signature.clone(), now)
        {
            Some(shared) => {
                let cause = correlation::cause_message(&shared);
                warn!(self.log, "fault shared by several hosts; no strikes"; "stage" => "shared_fault_detected",
                    "reason" => &reason, "hosts" => shared.hosts.len(), "cause" => &cause);
                self.metrics
                    .shared_faults
                    .with_label_values(&[reason.as_str()])
                    .inc();
                let (same, rest): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut self.held).into_iter().partition(|h| {
                        h.signature == signature
                            || !self.detector.still_held(&h.host, h.at_ms, &h.signature)
                    });
                self.held = rest;
                for mut h in same {
                    h.msg.shared = true;
                    settled.send.push((h.msg, String::new()));
                }
                msg.shared = true;
                settled.send.push((msg, request));
                settled.shared = Some(shared);
            }
            None if class == OutcomeClass::HostFault => {
                self.held.push(HeldOutcome {
                    host: msg.participant.clone(),
                    at_ms: now,
                    signature,
                    msg,
                });
                settled.held = true;
            }
            None => settled.send.push((msg, request)),
        }
        settled
    }

    /// Confirmed host faults: now they are struck and sampled. Several identical failures of one
    /// host confirmed at once are one incident: the first strikes, the others are counted
    /// without touching health (sent as shared). The hour-long chaos run: every host went down
    /// for 2 s, one host's 14 in-flight streams ended empty only after a peer had succeeded
    /// again, and the next success confirmed them as 14 strikes: ejected for an outage every
    /// host shared.
    fn release(&mut self, released: Vec<HeldFault<Address>>) -> Vec<Outbound> {
        let mut send = Vec::new();
        let mut struck: BTreeSet<(Address, FaultSignature)> = BTreeSet::new();
        for r in released {
            if let Some(i) = self
                .held
                .iter()
                .position(|h| h.host == r.host && h.at_ms == r.at_ms && h.signature == r.signature)
            {
                let mut h = self.held.remove(i);
                if !struck.insert((h.host.clone(), h.signature.clone())) {
                    h.msg.shared = true;
                }
                send.push((h.msg, String::new()));
            }
        }
        send
    }

    /// The release timer fired: faults whose window passed unmatched are confirmed.
    pub(super) fn release_due(&mut self, now: i64) -> Vec<Outbound> {
        self.release_timer = None;
        let released = self.detector.release_due(now);
        self.release(released)
    }

    /// When the next held fault is due for release.
    pub(super) fn next_release(&self) -> Option<i64> {
        self.detector.next_release()
    }

    pub(super) fn set_release_timer(&mut self, timer: Timer) {
        self.release_timer = Some(timer);
    }

    pub(super) fn take_release_timer(&mut self) -> Option<Timer> {
        self.release_timer.take()
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
