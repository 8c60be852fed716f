//! The escrow actor's side of host reachability (`escrow/reach/mod.rs`): asking it about a new
//! primary request, and telling it what each attempt showed (a refused connection, or an answer
//! of its host). Logs every change and counts every event (`devshard_reach_total{event}`).

use actix::prelude::*;
use slog::{info, warn};

use super::{voting::VoteWake, EscrowActor};
use crate::{
    escrow::{
        durable::{OnDurable, Pending},
        error::EscrowError,
        reach::{GateChange, Refusal},
    },
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
            cause: self.reach.cause(),
            retry_after_s: self.reach.retry_after_s(now),
        })
    }

    /// A grant to `host` at `nonce` is pending: when its catch-up chunks carry more than a
    /// request's window (`catch_up_window`), the host gets no other nonce until this attempt
    /// ends or is answered (`reach/mod.rs`).
    pub(super) fn reach_granted(&mut self, host: &Address, nonce: u64, pending: &Pending) {
        let OnDurable::Grant { grant, .. } = &pending.then else {
            return;
        };
        let cfg = &self.deps.cfg;
        let carried = grant
            .prelude
            .len()
            .saturating_mul(cfg.catch_up_chunk.max(1));
        let now = self.now_ms();
        if carried <= cfg.catch_up_window || !self.reach.catching_up(host, nonce, now) {
            return;
        }
        self.routing.set_catching(host, true);
        info!(self.deps.log, "a host lacks more than a chunk of diffs: its other nonces pass over it until this attempt caught it up";
            "stage" => "host_catching_up", "host" => host.short(), "nonce" => nonce,
            "chunks" => grant.prelude.len());
        self.count_reach("catching_up");
    }

    /// Before a resend of `nonce` to `host`, which holds up to `holds`, is built: while another
    /// attempt carries the host's catch-up, a second catch-up is refused (the attempt ends on
    /// its nonce gap, as a resend that fails does), or waits for it when no other host could take
    /// the request (`Reachability::resend_waits`). Concurrent catch-ups of one host meet each
    /// other's gaps and all fail (the hour-long run: 46 resends of ≈ 13 000 diffs each in 2.4 s
    /// to two hosts restarted empty). Nothing is read from the store before this is decided.
    pub(super) fn reach_resend(
        &mut self,
        host: &Address,
        nonce: u64,
        holds: u64,
        ctx: &mut Context<Self>,
    ) -> Result<ResendReach, EscrowError> {
        if self.reach.is_far(nonce.saturating_sub(holds)) {
            return Err(self.resend_far(host, nonce, holds, ctx));
        }
        let cfg = &self.deps.cfg;
        let chunk = cfg.catch_up_chunk.max(1);
        let carried = catch_up_chunks(nonce.saturating_sub(holds), chunk).saturating_mul(chunk);
        let by_another =
            self.reach.is_catching_up(host) && !self.reach.is_catching_up_at(host, nonce);
        if carried <= cfg.catch_up_window || !by_another {
            return Ok(ResendReach::Send);
        }
        let now = self.now_ms();
        if self
            .reach
            .resend_waits(host, &self.routing.routable_hosts(), now)
        {
            self.count_reach("resend_waiting");
            info!(self.deps.log, "resend waits: another attempt carries this host's catch-up and no other host can take the request";
                "stage" => "resend_waiting_catch_up", "host" => host.short(), "nonce" => nonce);
            return Ok(ResendReach::Wait);
        }
        self.count_reach("resend_refused");
        info!(self.deps.log, "resend refused: another attempt carries this host's catch-up";
            "stage" => "resend_refused_catching_up", "host" => host.short(), "nonce" => nonce);
        Err(EscrowError::Protocol(format!(
            "host {} is caught up by another attempt",
            host.short()
        )))
    }

    /// A resend of `nonce` to `host`, which holds only up to `holds`, would carry more than a
    /// request may: the host's sync point moves back to what it holds, its background catch-up
    /// starts (`actor/background.rs`) and the resend is refused, so the race tries another host
    /// instead of carrying it (the hour-long run: client attempts carried ≈ 120 000 diffs).
    fn resend_far(
        &mut self,
        host: &Address,
        nonce: u64,
        holds: u64,
        ctx: &mut Context<Self>,
    ) -> EscrowError {
        if !self.reach.is_catching_up(host) {
            super::super::sync::rewind(&mut self.session, &self.deps, host, holds);
            self.durable.syncs_changed();
            self.start_background_catch_up(host, ctx);
        }
        self.count_reach("resend_refused");
        info!(self.deps.log, "resend refused: the host lacks more diffs than a request may carry, a background sync catches it up";
            "stage" => "resend_refused_far", "host" => host.short(), "nonce" => nonce,
            "holds" => holds);
        EscrowError::hosts_catching_up(self.escrow_id().to_string(), host, self.session.lacks(host))
    }

    /// A resend of `nonce` to `host` carries `chunks` catch-up chunks: when they are more than a
    /// request's window, a catch-up like a grant's (the host's other nonces pass over it).
    pub(super) fn reach_resend_carries(&mut self, host: &Address, nonce: u64, chunks: usize) {
        let cfg = &self.deps.cfg;
        if chunks.saturating_mul(cfg.catch_up_chunk.max(1)) <= cfg.catch_up_window {
            return;
        }
        let now = self.now_ms();
        if self.reach.catching_up(host, nonce, now) {
            self.routing.set_catching(host, true);
            info!(self.deps.log, "a host lacks more than a window of diffs: its other nonces pass over it until this resend caught it up";
                "stage" => "host_catching_up", "host" => host.short(), "nonce" => nonce,
                "chunks" => chunks);
            self.count_reach("catching_up");
        }
    }

    /// `host` answered an inference at `nonce` (`answered`), or its attempt there ended: a
    /// catch-up that carried is over (`Reachability::caught_up`), and races that waited for it
    /// are granted.
    pub(super) fn reach_caught_up(
        &mut self,
        host: &Address,
        nonce: u64,
        answered: bool,
        ctx: &mut Context<Self>,
    ) {
        if self.reach.caught_up(host, nonce, answered) {
            self.routing.set_catching(host, false);
            info!(self.deps.log, "the attempt carrying a host's catch-up is over: it takes nonces again";
                "stage" => "host_caught_up", "host" => host.short(), "nonce" => nonce,
                "sync" => self.session.host_sync(host), "waiting" => self.picker.len());
            self.release_resends(host);
            self.pump(ctx);
            self.hasten_short_votes(VoteWake::HostCaughtUp, ctx);
        }
    }

    /// `host` answered (a receipt, or an attempt that ended in something it said).
    pub(super) fn reach_answered(&mut self, host: &Address, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        if let Some(ms) = self.reach.answered(host, now) {
            info!(self.deps.log, "a host that refused connections answered: it takes nonces again";
                "stage" => "host_reachable", "host" => host.short(), "unreachable_ms" => ms);
            self.count_reach("host_reachable");
            self.reach_gate(now);
            self.hasten_short_votes(VoteWake::HostReachable, ctx);
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
        ctx: &mut Context<Self>,
    ) {
        if let Some(cause) = Refusal::of(reason) {
            let now = self.now_ms();
            if self.reach.refused(host, cause, now) {
                warn!(self.deps.log, "a host refused a connection or rejected a request before any work: no nonces for it but probes until it answers";
                    "stage" => "host_unreachable", "host" => host.short(), "cause" => cause.as_str(),
                    "unreachable" => self.reach.unreachable_count());
                self.count_reach("host_unreachable");
                self.reach_gate(now);
            }
        } else if host_answered(end, class, reason) {
            self.reach_answered(host, ctx);
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
                warn!(self.deps.log, "every host refuses connections or rejects requests: new requests are answered 503 but for one probe per interval";
                    "stage" => "reach_gate_closed", "hosts" => self.reach.unreachable_count(),
                    "cause" => self.reach.cause().as_str());
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
        self.count_reach_by(event, 1);
    }

    pub(super) fn count_reach_by(&self, event: &str, n: u64) {
        self.deps
            .metrics
            .reach
            .with_label_values(&[event])
            .inc_by(n);
    }
}

/// What to do with a resend (`EscrowActor::reach_resend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResendReach {
    /// Build and send it now.
    Send,
    /// Park it until the host's catch-up in another attempt is over (`actor/resending.rs`).
    Wait,
}

/// Catch-up chunks ahead of a request carrying `diffs` diffs (the last chunk rides inline,
/// as `Durable::bodies` splits them).
fn catch_up_chunks(diffs: u64, chunk: usize) -> usize {
    let chunk64 = u64::try_from(chunk).unwrap_or(u64::MAX).max(1);
    usize::try_from(diffs.saturating_sub(chunk64).div_ceil(chunk64)).unwrap_or(usize::MAX)
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
