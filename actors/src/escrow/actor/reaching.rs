//! The escrow actor's side of host reachability (`escrow/reach.rs`): asking it about a new
//! primary request, and telling it what each attempt showed (a refused connection, or an answer
//! of its host). Logs every change and counts every event (`devshard_reach_total{event}`).

use slog::{info, warn};

use super::EscrowActor;
use crate::{
    escrow::{error::EscrowError, reach::GateChange},
    outcome::{AttemptEnd, OutcomeClass},
    policy::reason::OutcomeReason,
    protocol::crypto::Address,
};

impl EscrowActor {
    /// A new primary request: `Err` (no nonce taken) while every host refuses connections and
    /// the gate's probe is not due.
    pub(super) fn reach_admit(&mut self, race_id: u64) -> Result<(), EscrowError> {
        if self.reach.unreachable_count() == 0 {
            return Ok(());
        }
        let now = self.now_ms();
        if self.reach.admit(&self.routing.routable_hosts(), now) {
            return Ok(());
        }
        self.count_reach("refused");
        slog::debug!(self.deps.log, "request refused without a nonce: every host refuses connections";
            "stage" => "reach_refused", "race" => race_id);
        Err(EscrowError::HostsUnreachable {
            escrow: self.escrow_id().to_string(),
            refusing: self.reach.unreachable_count(),
            retry_after_s: self.reach.retry_after_s(now),
        })
    }

    /// `host` answered (a receipt, or an attempt that ended in something it said).
    pub(super) fn reach_answered(&mut self, host: &Address) {
        let now = self.now_ms();
        if let Some(ms) = self.reach.answered(host, now) {
            info!(self.deps.log, "a host that refused connections answered: it takes nonces again";
                "stage" => "host_reachable", "host" => host.short(), "unreachable_ms" => ms);
            self.count_reach("host_reachable");
            self.reach_gate(now);
        }
    }

    /// What an ended attempt shows about its host's reachability (an attempt cancelled or
    /// abandoned before it heard anything shows nothing).
    pub(super) fn reach_attempt_ended(
        &mut self,
        host: &Address,
        end: &AttemptEnd,
        class: OutcomeClass,
        reason: OutcomeReason,
    ) {
        if reason == OutcomeReason::ConnectFailed {
            let now = self.now_ms();
            if self.reach.connect_refused(host, now) {
                warn!(self.deps.log, "a host refused a connection: no nonces for it but probes until it answers";
                    "stage" => "host_unreachable", "host" => host.short(),
                    "unreachable" => self.reach.unreachable_count());
                self.count_reach("host_unreachable");
                self.reach_gate(now);
            }
        } else if host_answered(end, class, reason) {
            self.reach_answered(host);
        }
    }

    /// Follows the gate after a change of reachability or of the routable hosts.
    pub(super) fn reach_gate(&mut self, now: i64) {
        let change = if self.reach.unreachable_count() == 0 {
            self.reach.gate(&[], now)
        } else {
            self.reach.gate(&self.routing.routable_hosts(), now)
        };
        match change {
            Some(GateChange::Closed) => {
                warn!(self.deps.log, "every host refuses connections: new requests are answered 503 but for one probe per interval";
                    "stage" => "reach_gate_closed", "hosts" => self.reach.unreachable_count());
                self.count_reach("gate_closed");
            }
            Some(GateChange::Opened { closed_ms }) => {
                info!(self.deps.log, "a host is reachable again: requests get nonces";
                    "stage" => "reach_gate_opened", "closed_ms" => closed_ms);
                self.count_reach("gate_opened");
            }
            None => {}
        }
    }

    pub(super) fn count_reach(&self, event: &str) {
        self.deps.metrics.reach.with_label_values(&[event]).inc();
    }
}

/// Whether an attempt's end is something its host said (not a connection that failed, timed
/// out or broke, and not an attempt that ended on our side before it heard anything).
fn host_answered(end: &AttemptEnd, class: OutcomeClass, reason: OutcomeReason) -> bool {
    if class == OutcomeClass::Success {
        return true;
    }
    let ours = matches!(
        end,
        AttemptEnd::Cancelled | AttemptEnd::ClientGone | AttemptEnd::EscrowGone
    );
    !ours && !reason.is_unreachable() && reason != OutcomeReason::GrantUnclaimed
}
