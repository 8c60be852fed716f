//! `SyncHosts` (PROTOCOL.md §5.6): sequence pending txs in one more diff, then catch every host
//! up to our nonce with chunked, payload-less sends, processing each answer (sync nonce, state
//! signature, mempool). Dead hosts are skipped; the result says who is in sync.

use actix::prelude::*;
use slog::info;

use super::{actor::EscrowActor, messages::SyncHosts};
use crate::{
    host::client,
    protocol::{
        crypto::Address,
        wire::{DiffJson, InferenceRequest},
    },
};

impl Handler<SyncHosts> for EscrowActor {
    type Result = ResponseActFuture<Self, Vec<(Address, u64)>>;

    fn handle(&mut self, _: SyncHosts, ctx: &mut Self::Context) -> Self::Result {
        // Every diff that catch-up may carry must be durable first: either the new diff's ack
        // (writes commit in order) or a flush covering diffs composed by in-flight grants.
        let ack = if self.session.pending().is_empty() {
            Some((self.session.nonce(), self.store.flush()))
        } else {
            self.compose_withheld(crate::policy::reason::EmptyDiffReason::SyncHosts)
                .map(|(d, ack)| (d.nonce, ack))
        };
        let info = self.session.info().clone();
        let chunk = self.cfg.catch_up_chunk.max(1);
        let mut plans = Vec::new();
        for host in info
            .hosts
            .iter()
            .filter(|h| !self.withheld.contains(&h.address))
        {
            let diffs = self.session.catch_up(&host.address, usize::MAX);
            let requests: Vec<InferenceRequest> = diffs
                .chunks(chunk)
                .map(|part| InferenceRequest {
                    diffs: part.iter().map(|d| DiffJson::from_diff(d)).collect(),
                    nonce: part.last().map_or(0, |d| d.nonce),
                    payload: None,
                    stream: None,
                })
                .collect();
            plans.push((
                host.address.clone(),
                info.session_url(host, "chat/completions"),
                requests,
            ));
        }
        let (key, clock, timeout) = (
            self.key.clone(),
            self.clock.clone(),
            self.cfg.host_timeouts.query,
        );
        let escrow_id = info.escrow_id.clone();
        let _ = ctx;
        let fut = async move {
            if let Some((_, ack)) = ack {
                ack.await.map_err(|e| e.to_string())?;
            }
            let mut results = Vec::new();
            for (addr, url, requests) in plans {
                for request in requests {
                    let res = client::send_diffs(
                        &url,
                        &escrow_id,
                        &request,
                        &key,
                        clock.now_unix(),
                        timeout,
                    )
                    .await;
                    let ok = res.is_ok();
                    results.push((addr.clone(), res));
                    if !ok {
                        break;
                    }
                }
            }
            Ok::<_, String>(results)
        };
        Box::pin(fut.into_actor(self).map(|res, act, ctx| {
            let results = res.unwrap_or_default();
            for (addr, res) in results {
                if let Ok(sent) = res {
                    if let Some(r) = sent.receipt {
                        let _ = act.session.process_receipt(&addr, None, &r);
                        act.sync_dirty = true;
                    }
                    act.absorb_mempool(sent.mempool, ctx);
                }
            }
            let syncs: Vec<(Address, u64)> = act
                .session
                .host_syncs()
                .iter()
                .map(|(a, n)| (a.clone(), *n))
                .collect();
            info!(act.log, "hosts synced"; "stage" => "sync_hosts", "nonce" => act.session.nonce());
            syncs
        }))
    }
}
