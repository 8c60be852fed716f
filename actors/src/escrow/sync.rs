//! `SyncHosts` (docs/protocol.md §5.6): once pending txs are sequenced in one more diff and durable,
//! catch every routable host up to our nonce with chunked, payload-less sends. Dead hosts are
//! skipped (a host's sends stop at its first failure). The actor processes each answer (sync
//! nonce, state signature, mempool) and answers who is in sync; a host that lost its session
//! (restarted empty) or reports a nonce gap gets its sync nonce reset, so the next sync or send
//! replays from nonce 1.

use futures::future::LocalBoxFuture;

use super::{routing::Routing, session::Session, EscrowDeps};
use crate::{
    host::{
        client::{self, SendResult},
        HostError, Rejection,
    },
    protocol::{
        crypto::Address,
        wire::{DiffJson, InferenceRequest},
    },
    store::Ack,
};

/// The host lacks diffs we think it holds (it restarted empty, or a nonce gap): its sync nonce
/// must be reset so that the next send replays from nonce 1.
pub(super) fn lost_diffs(e: &HostError) -> bool {
    matches!(
        e.rejection(),
        Some(Rejection::SessionNotFound | Rejection::NonceGap { .. })
    )
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
        let mut diffs = session.catch_up(&host.address, usize::MAX);
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
    let (key, clock, timeout) = (
        deps.key.clone(),
        deps.clock.clone(),
        deps.cfg.host_timeouts.query,
    );
    let escrow_id = info.escrow_id.clone();
    Box::pin(async move {
        if let Some(ack) = ready {
            ack.await.map_err(|e| e.to_string())?;
        }
        let mut results = Vec::new();
        for (addr, url, requests) in plans {
            for request in requests {
                let res =
                    client::send_diffs(&url, &escrow_id, &request, &key, clock.now_unix(), timeout)
                        .await;
                let ok = res.is_ok();
                results.push((addr.clone(), res));
                if !ok {
                    break;
                }
            }
        }
        Ok(results)
    })
}
