//! The escrow actor's side of the reachability gate (`escrow/reach.rs`): asking it about a new
//! primary request, and telling it what each attempt showed (a refused connection, or an answer
//! of some host). Logs the gate's changes and counts every event.

use slog::{debug, info, warn};

use super::EscrowActor;
use crate::{
    escrow::{
        error::EscrowError,
        reach::{self, Admission, Change},
    },
    outcome::{AttemptEnd, OutcomeClass},
    policy::reason::OutcomeReason,
    protocol::crypto::Address,
};

impl EscrowActor {
    /// The gate's word on a new primary request: `Err` when it is refused without a nonce.
    pub(super) fn reach_admit(&mut self, race_id: u64) -> Result<(), EscrowError> {
        let now = self.now_ms();
        let admission = self.reach.admit(now);
        match admission {
            Admission::Admit => return Ok(()),
            Admission::Probe => {
                info!(self.deps.log, "hosts refuse connections: this request probes them";
                    "stage" => "reach_probe", "race" => race_id);
                self.count_reach("probe");
                return Ok(());
            }
            Admission::Refuse => {}
        }
        self.count_reach("refused");
        let view = self.reach.view();
        let retry_after_s =
            u64::try_from(self.reach.retry_after_ms(now).saturating_add(999) / 1_000)
                .unwrap_or(1)
                .max(1);
        debug!(self.deps.log, "request refused without a nonce: hosts refuse connections";
            "stage" => "reach_refused", "race" => race_id, "refusing" => view.refusing);
        Err(EscrowError::HostsUnreachable {
            escrow: self.escrow_id().to_string(),
            refusing: view.refusing,
            retry_after_s,
        })
    }

    /// A receipt came back: some host answered.
    pub(super) fn reach_answered(&mut self) {
        let now = self.now_ms();
        let change = self.reach.answered(now);
        self.reach_changed(change);
    }

    /// What an ended attempt shows about reachability: its connection was refused, or its host
    /// answered (an attempt cancelled or abandoned before it heard anything shows neither).
    pub(super) fn reach_attempt_ended(
        &mut self,
        host: &Address,
        end: &AttemptEnd,
        class: OutcomeClass,
        reason: OutcomeReason,
    ) {
        let now = self.now_ms();
        let change = if reason == OutcomeReason::ConnectFailed {
            let (distinct, routable) = self.routing.counts();
            let usize_of = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
            let threshold = reach::threshold(usize_of(distinct), usize_of(routable));
            self.reach.connect_refused(host, threshold, now)
        } else if host_answered(end, class, reason) {
            self.reach.answered(now)
        } else {
            None
        };
        self.reach_changed(change);
    }

    fn reach_changed(&mut self, change: Option<Change>) {
        match change {
            Some(Change::Closed { hosts }) => {
                warn!(self.deps.log, "hosts refuse connections and none answered since: new requests wait for a probe";
                    "stage" => "reach_gate_closed", "hosts" => hosts);
                self.count_reach("closed");
            }
            Some(Change::Opened { closed_ms }) => {
                info!(self.deps.log, "a host answered: requests get nonces again";
                    "stage" => "reach_gate_opened", "closed_ms" => closed_ms);
                self.count_reach("opened");
            }
            None => {}
        }
    }

    fn count_reach(&self, event: &str) {
        self.deps
            .metrics
            .reach_gate
            .with_label_values(&[event])
            .inc();
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
