//! `SyncHosts` (docs/protocol.md §5.6), one handler of the escrow actor: pending txs sequenced and
//! durable first, then every routable host caught up (`escrow/sync.rs` builds the sends); each
//! answer is processed, and a host that lost its session or reports a nonce gap has its sync
//! point moved back to what it holds (`sync::rewind`).

use actix::prelude::*;
use slog::info;

use super::super::{messages::SyncHosts, sync};
use super::EscrowActor;
use crate::{policy::reason::EmptyDiffReason, protocol::crypto::Address};

impl Handler<SyncHosts> for EscrowActor {
    type Result = ResponseActFuture<Self, Vec<(Address, u64)>>;

    fn handle(&mut self, _: SyncHosts, _: &mut Self::Context) -> Self::Result {
        self.sync_hosts(false)
    }
}

impl EscrowActor {
    /// Pending txs sequenced, then every routable host caught up (`with_ejected`: ejected hosts
    /// too, for the verifiers a timeout vote needs; diverged hosts never, docs/health.md §6);
    /// answers each host's sync nonce.
    pub(super) fn sync_hosts(
        &mut self,
        with_ejected: bool,
    ) -> ResponseActFuture<Self, Vec<(Address, u64)>> {
        // Every diff that catch-up may carry must be durable first: either the new diff's ack
        // (writes commit in order) or a flush covering diffs composed by in-flight grants.
        let ready = self
            .durable
            .settle_pending(&mut self.session, &self.deps, EmptyDiffReason::SyncHosts)
            .map(|(_, ack)| ack);
        let sends = sync::catch_up_hosts(
            &self.session,
            (&self.routing, with_ejected),
            &self.deps,
            ready,
            false,
        );
        Box::pin(sends.into_actor(self).map(|res, act, ctx| {
            for (addr, res) in res.unwrap_or_default() {
                match res {
                    Ok(sent) => {
                        if let Some(r) = sent.receipt {
                            let _ = act.take_report(&addr, None, &r);
                            act.durable.syncs_changed();
                        }
                        act.absorb_mempool(&addr, sent.mempool, ctx);
                    }
                    // A host that restarted empty (or missed diffs) has its sync point moved back
                    // to what it holds, so the next send replays from there, as after an attempt
                    // (`settle::judge`).
                    Err(e) => {
                        if let Some(holds) = e.rejection().and_then(|r| r.host_holds()) {
                            sync::rewind(&mut act.session, &act.deps, &addr, holds);
                            act.durable.syncs_changed();
                        }
                    }
                }
            }
            info!(act.deps.log, "hosts synced"; "stage" => "sync_hosts", "nonce" => act.session.nonce());
            act.session
                .host_syncs()
                .iter()
                .map(|(a, n)| (a.clone(), *n))
                .collect()
        }))
    }
}
