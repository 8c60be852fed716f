//! `SyncHosts` (docs/protocol.md §5.6), one handler of the escrow actor: pending txs sequenced and
//! durable first, then every routable host caught up (`escrow/sync.rs` builds the sends); each
//! answer is processed, and a host that lost its session or reports a nonce gap has its sync
//! point moved back to what it holds (`sync::rewind`). A host caught up in the background
//! (`actor/background.rs`) is left to that sync.

use actix::prelude::*;
use slog::info;

use super::super::{messages::SyncHosts, sync};
use super::{voting::VoteWake, EscrowActor};
use crate::{host::HostError, policy::reason::EmptyDiffReason, protocol::crypto::Address};

impl Handler<SyncHosts> for EscrowActor {
    type Result = ResponseActFuture<Self, Vec<(Address, u64)>>;

    /// The admin sync verifies: a host in sync by its sync point is sent the latest diff again,
    /// so the answer says who holds the escrow's state. Run J (seed `long-1`, 3 430 s): a
    /// host that had restarted empty after a draining escrow's last diff was reported in sync
    /// at 10 125 by every admin sync for 40 minutes while it held nothing (invariant 1).
    fn handle(&mut self, _: SyncHosts, ctx: &mut Self::Context) -> Self::Result {
        self.sync_hosts((false, true), ctx)
    }
}

impl EscrowActor {
    /// Pending txs sequenced, then every routable host caught up (`with_ejected`: ejected hosts
    /// too, for the verifiers a timeout vote needs; diverged hosts never, docs/health.md §6);
    /// answers each host's sync nonce. With `verify`, a host that lacks nothing by its sync
    /// point is sent the latest diff again, so one that lost its state says so (its nonce gap
    /// moves its sync point back) even when no diff was composed since.
    pub(super) fn sync_hosts(
        &mut self,
        (with_ejected, verify): (bool, bool),
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Vec<(Address, u64)>> {
        // Every diff that catch-up may carry must be durable first: either the new diff's ack
        // (writes commit in order) or a flush covering diffs composed by in-flight grants.
        let ready = self
            .durable
            .settle_pending(&mut self.session, &self.deps, EmptyDiffReason::SyncHosts)
            .map(|(nonce, ack)| self.durable_then_ready(nonce, ack, ctx));
        let skip = self.reach.syncing_hosts();
        let targets = sync::Targets::Routable {
            routing: &self.routing,
            with_ejected,
            skip: &skip,
        };
        let sends = sync::catch_up_hosts(&self.session, targets, &self.deps, ready, verify);
        Box::pin(sends.into_actor(self).map(|res, act, ctx| {
            let _ = act.absorb_sync_answers(res.unwrap_or_default(), ctx);
            info!(act.deps.log, "hosts synced"; "stage" => "sync_hosts", "nonce" => act.session.nonce());
            act.session
                .host_syncs()
                .iter()
                .map(|(a, n)| (a.clone(), *n))
                .collect()
        }))
    }

    /// A sync's answers: each host's receipt and mempool taken; a host that restarted empty (or
    /// missed diffs) has its sync point moved back to what it holds, so the next send replays
    /// from there, as after an attempt (`settle::judge`). The first failure, if any host's sends
    /// stopped on one.
    pub(super) fn absorb_sync_answers(
        &mut self,
        answers: sync::SyncAnswers,
        ctx: &mut Context<Self>,
    ) -> Option<HostError> {
        let mut failed = None;
        let mut caught_up = false;
        let window = u64::try_from(self.deps.cfg.diff_window).unwrap_or(u64::MAX);
        for (addr, res) in answers {
            match res {
                Ok(sent) => {
                    if let Some(r) = sent.receipt {
                        // A verifier far behind (more than a window, `timeouts.rs`) that is
                        // near now may vote.
                        let was_far = self.session.lacks(&addr) > window;
                        let taken = self.take_report(&addr, None, &r).is_ok();
                        caught_up |= taken && was_far && self.session.lacks(&addr) <= window;
                        self.durable.syncs_changed();
                    }
                    self.absorb_mempool(&addr, sent.mempool, ctx);
                }
                Err(e) => {
                    if let Some(holds) = e.rejection().and_then(|r| r.host_holds()) {
                        sync::rewind(&mut self.session, &self.deps, &addr, holds);
                        self.durable.syncs_changed();
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        if caught_up {
            self.hasten_short_votes(VoteWake::HostCaughtUp, ctx);
        }
        failed
    }
}
