//! `SyncHosts` (docs/protocol.md §5.6): once pending txs are sequenced in one more diff and durable,
//! catch every routable host up to our nonce with chunked, payload-less sends, each signed as it
//! leaves (`devshard_catch_up_chunks_total{path="sync"}`), every host at once (each host's
//! chunks in order). Dead hosts are skipped (a host's sends stop at its first failure). The actor processes each answer (sync
//! nonce, state signature, mempool) and answers who is in sync; a host that lost its session
//! (restarted empty) or reports a nonce gap gets its sync nonce reset, so the next sync or send
//! replays from nonce 1.

use futures::future::LocalBoxFuture;

use super::{
    diff_log::{self, DiffPath},
    routing::Routing,
    session::Session,
    EscrowDeps,
};
use crate::{
    host::{
        client::{self, SendResult},
        HostError,
    },
    protocol::{
        crypto::Address,
        wire::{DiffJson, InferenceRequest},
    },
    store::Ack,
};

/// A host holds fewer diffs than its sync point says (a `NonceGap` names what it holds, a lost
/// session holds nothing): moves the sync point back only that far, so the next send replays
/// from there instead of from nonce 1. Log stage `host_sync_rewound`, metric
/// `devshard_host_sync_rewinds_total{cause}`. The caller marks the sync points dirty.
pub(super) fn rewind(session: &mut Session, deps: &EscrowDeps, host: &Address, holds: u64) {
    let from = session.rewind_host_sync(host, holds);
    let to = session.host_sync(host);
    let cause = if holds == 0 {
        "session_lost"
    } else {
        "nonce_gap"
    };
    deps.metrics
        .host_sync_rewinds
        .with_label_values(&[cause])
        .inc();
    slog::info!(deps.log, "host sync point moved back to what the host holds";
        "stage" => "host_sync_rewound", "host" => host.short(), "from" => from, "to" => to,
        "cause" => cause);
}

/// Every send's answer, per host, in order.
pub(super) type SyncAnswers = Vec<(Address, Result<SendResult, HostError>)>;

/// The catch-up sends of every routable host, run after `ready` (if any) resolved. With
/// `resend_last`, a host that lacks nothing is sent the latest diff again (it answers with its
/// state signature of that nonce: settlement collection).
pub(super) fn catch_up_hosts(
    session: &Session,
    routing: &Routing,
    deps: &EscrowDeps,
    ready: Option<Ack>,
    resend_last: bool,
) -> LocalBoxFuture<'static, Result<SyncAnswers, String>> {
    let info = session.info().clone();
    let chunk = deps.cfg.catch_up_chunk.max(1);
    let mut plans = Vec::new();
    for host in info
        .hosts
        .iter()
        .filter(|h| !routing.is_withheld(&h.address))
    {
        let after = session.catch_up_after(&host.address);
        let mut diffs = match diff_log::diffs_after(
            session,
            deps,
            DiffPath::Sync,
            after,
            u64::MAX,
            usize::MAX,
        ) {
            Ok(d) => d,
            Err(e) => {
                slog::warn!(deps.log, "a host's catch-up could not be read"; "stage" => "diffs_from_store_failed",
                        "host" => host.address.short(), "error" => %e);
                continue;
            }
        };
        if diffs.is_empty() && resend_last {
            diffs.extend(session.diff(session.nonce()).cloned());
        }
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
    let signer = super::wire_cache::signer(session, deps);
    let timeout = deps.cfg.host_timeouts.query;
    let chunks = deps.metrics.catch_up_chunks.clone();
    Box::pin(async move {
        if let Some(ack) = ready {
            ack.await.map_err(|e| e.to_string())?;
        }
        // Hosts in parallel, each host's chunks in order: two hosts restarted empty far behind
        // are caught up in the time of one (the hour-long run: a sync at ≈ 360 diffs a second
        // left a second host behind the lockstep's bound).
        let per_host = plans.into_iter().map(|(addr, url, requests)| {
            let (signer, chunks) = (signer.clone(), chunks.clone());
            async move {
                let mut results = Vec::new();
                for request in requests {
                    let res = client::send_diffs(&url, &request, &signer, timeout).await;
                    let result = crate::race::sends::chunk_result(res.as_ref().err());
                    chunks.with_label_values(&["sync", result]).inc();
                    let ok = res.is_ok();
                    results.push((addr.clone(), res));
                    if !ok {
                        break;
                    }
                }
                results
            }
        });
        Ok(futures::future::join_all(per_host)
            .await
            .into_iter()
            .flatten()
            .collect())
    })
}
