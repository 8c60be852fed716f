//! `SyncHosts` (docs/protocol.md §5.6): once pending txs are sequenced in one more diff and durable,
//! catch every routable host up to our nonce with chunked, payload-less sends, each signed as it
//! leaves (`devshard_catch_up_chunks_total{path="sync"}`), every host at once (each host's
//! chunks in order). Dead hosts are skipped (a host's sends stop at its first failure). The actor processes each answer (sync
//! nonce, state signature, mempool) and answers who is in sync; a host that lost its session
//! (restarted empty) or reports a nonce gap gets its sync nonce reset, so the next sync or send
//! replays from nonce 1. A host that answers a chunk with a nonce beyond it is skipped forward
//! to there (upstream's `sendCatchUp`).

use futures::future::LocalBoxFuture;

use std::sync::Arc;

use super::{routing::Routing, session::Session, EscrowDeps};
use crate::{
    host::{
        client::{self, SendResult},
        HostError,
    },
    protocol::{
        crypto::Address,
        diff::Diff,
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

/// Each host's last answers: to the last chunk it took, then the failure that stopped its sends
/// (if any). Only those are kept: each answer carries the host's whole mempool, and a host restarted empty
/// 122 000 nonces behind answers 611 chunks (seed long-1: every answer of a sync was kept until
/// its end, and the gateway grew by 100 MB a second to 10 GB).
pub(super) type SyncAnswers = Vec<(Address, Result<SendResult, HostError>)>;

/// One host's catch-up: the part below the diff window, read from the store one chunk at a time
/// as it is sent (`from..=to`, empty when `from > to`), then the part in memory.
struct Plan {
    addr: Address,
    url: String,
    from: u64,
    to: u64,
    held: Vec<Arc<Diff>>,
}

/// Which hosts a catch-up goes to.
pub(super) enum Targets<'a> {
    /// Every routable host (`with_ejected`: and every ejected one, never a diverged one), but
    /// those in `skip` (a background sync sends to them: two senders would meet each other's
    /// nonce gaps).
    Routable {
        routing: &'a Routing,
        with_ejected: bool,
        skip: &'a [Address],
    },
    /// One host, at most `round` diffs past its sync point: a round of its background catch-up
    /// (`actor/background.rs`).
    One { host: &'a Address, round: u64 },
}

impl Targets<'_> {
    /// The last nonce a host's sends go up to, when it holds `after`.
    fn end(&self, after: u64) -> u64 {
        match self {
            Targets::One { round, .. } => after.saturating_add(*round),
            Targets::Routable { .. } => u64::MAX,
        }
    }

    fn includes(&self, host: &Address) -> bool {
        match self {
            Targets::One { host: one, .. } => *one == host,
            Targets::Routable {
                routing,
                with_ejected,
                skip,
            } => {
                !skip.contains(host)
                    && (!routing.is_withheld(host)
                        || (*with_ejected
                            && !routing.is_repairing(host)
                            && !routing.has_given_up(host)))
            }
        }
    }
}

/// The catch-up sends of the `targets`, run after `ready` (if any) resolved. With
/// `resend_last`, a host that lacks nothing is sent the latest diff again (it answers with its
/// state signature of that nonce: settlement collection). The diffs below the window are read
/// and encoded one chunk at a time while they are sent: three hosts restarted empty 55 000
/// nonces behind were each built their whole catch-up in memory at once before (the hour-long
/// chaos run's gateway grew past 2 GB after restarts).
pub(super) fn catch_up_hosts(
    session: &Session,
    targets: Targets<'_>,
    deps: &EscrowDeps,
    ready: Option<Ack>,
    resend_last: bool,
) -> LocalBoxFuture<'static, Result<SyncAnswers, String>> {
    let info = session.info().clone();
    let chunk = deps.cfg.catch_up_chunk.max(1);
    let first_held = session.first_held();
    let mut plans = Vec::new();
    for host in info.hosts.iter().filter(|h| targets.includes(&h.address)) {
        let after = session.catch_up_after(&host.address);
        let end = targets.end(after);
        let (from, to) = (
            after.saturating_add(1),
            first_held.saturating_sub(1).min(end),
        );
        let mut held = session
            .held_after(after.max(to), end, usize::MAX)
            .unwrap_or_default();
        if from > to && held.is_empty() && resend_last {
            held.extend(session.diff(session.nonce()).cloned());
        }
        plans.push(Plan {
            addr: host.address.clone(),
            url: info.session_url(host, "chat/completions"),
            from,
            to,
            held,
        });
    }
    let signer = super::wire_cache::signer(session, deps);
    let timeout = deps.cfg.host_timeouts.query;
    let metrics = deps.metrics.clone();
    let store = deps.store.clone();
    let escrow_id = info.escrow_id.clone();
    Box::pin(async move {
        if let Some(ack) = ready {
            ack.await.map_err(|e| e.to_string())?;
        }
        // Hosts in parallel, each host's chunks in order: two hosts restarted empty far behind
        // are caught up in the time of one (the hour-long run: a sync at ≈ 360 diffs a second
        // left a second host behind the lockstep's bound).
        let per_host = plans.into_iter().map(|plan| {
            let (signer, metrics, store, escrow_id) = (
                signer.clone(),
                metrics.clone(),
                store.clone(),
                escrow_id.clone(),
            );
            async move {
                let mut last = Answers::default();
                let mut from = plan.from;
                // What the host said it holds (0 until it answered).
                let mut held_by_host = 0;
                while from <= plan.to {
                    let to = plan.to.min(from.saturating_add(chunk as u64 - 1));
                    let part = match store.load_diffs_range(&escrow_id, from, to) {
                        Ok(d) if !d.is_empty() => d,
                        _ => return last.into_vec(),
                    };
                    metrics
                        .diffs_from_store
                        .with_label_values(&["sync"])
                        .inc_by(part.len() as u64);
                    let res = send_chunk(&plan, &part, (&signer, timeout), &metrics).await;
                    let holds = host_nonce(&res);
                    if !last.keep(&plan.addr, res) {
                        return last.into_vec();
                    }
                    from = skip_forward(to, holds);
                    held_by_host = held_by_host.max(holds.unwrap_or(0));
                }
                let held: Vec<&Diff> = (plan.held.iter())
                    .map(|d| d.as_ref())
                    .filter(|d| d.nonce > held_by_host)
                    .collect();
                for part in held.chunks(chunk) {
                    let part = part.to_vec();
                    let res = send_chunk(&plan, &part, (&signer, timeout), &metrics).await;
                    if !last.keep(&plan.addr, res) {
                        break;
                    }
                }
                last.into_vec()
            }
        });
        Ok(futures::future::join_all(per_host)
            .await
            .into_iter()
            .flatten()
            .collect())
    })
}

/// The nonce a host says it holds in its answer to a chunk, if it answered one.
fn host_nonce(res: &Result<SendResult, HostError>) -> Option<u64> {
    res.as_ref().ok()?.receipt.as_ref().map(|r| r.nonce)
}

/// The first nonce of the next chunk after one that ended at `to`: past what the host says it
/// holds when that is beyond the chunk (upstream's `sendCatchUp` "skip-forward"; a host whose
/// sync point was stale, e.g. after a restart of the gateway, was sent every diff it already
/// held again, and skipped each).
fn skip_forward(to: u64, holds: Option<u64>) -> u64 {
    let next = to.saturating_add(1);
    holds.map_or(next, |h| next.max(h.saturating_add(1)))
}

/// One host's answers as its sends go (see [`SyncAnswers`]).
#[derive(Default)]
struct Answers {
    ok: Option<(Address, SendResult)>,
    failed: Option<(Address, HostError)>,
}

impl Answers {
    /// Keeps `res` in place of the previous success; `false` when it failed (sends stop).
    fn keep(&mut self, addr: &Address, res: Result<SendResult, HostError>) -> bool {
        match res {
            Ok(sent) => {
                self.ok = Some((addr.clone(), sent));
                true
            }
            Err(e) => {
                self.failed = Some((addr.clone(), e));
                false
            }
        }
    }

    fn into_vec(self) -> SyncAnswers {
        let ok = self.ok.map(|(a, s)| (a, Ok(s)));
        let failed = self.failed.map(|(a, e)| (a, Err(e)));
        ok.into_iter().chain(failed).collect()
    }
}

/// Encodes and sends one chunk: the host's answer (an error stops its sends).
async fn send_chunk<D: std::borrow::Borrow<Diff>>(
    plan: &Plan,
    part: &[D],
    (signer, timeout): (&crate::host::RequestSigner, std::time::Duration),
    metrics: &crate::metrics::ActorMetrics,
) -> Result<SendResult, HostError> {
    let request = InferenceRequest {
        diffs: part
            .iter()
            .map(|d| DiffJson::from_diff(d.borrow()))
            .collect(),
        nonce: part.last().map_or(0, |d| d.borrow().nonce),
        payload: None,
        stream: None,
    };
    let res = client::send_diffs(&plan.url, &request, signer, timeout).await;
    let result = crate::race::sends::chunk_result(res.as_ref().err());
    metrics
        .catch_up_chunks
        .with_label_values(&["sync", result])
        .inc();
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed long-1: a sync of a host 122 000 nonces behind kept its 611 answers, each with the
    /// host's whole mempool, until the sync ended (the gateway grew to 10 GB).
    /// The hour-long run (2026-12-04): after each restart of the gateway a background catch-up
    /// started from the persisted sync point and resent ≈ 30 000 diffs the host already held.
    #[test]
    fn a_host_that_holds_more_than_a_chunk_skips_the_sync_forward() {
        assert_eq!(skip_forward(200, None), 201, "no answer: the next chunk");
        assert_eq!(skip_forward(200, Some(150)), 201, "behind the chunk");
        assert_eq!(skip_forward(200, Some(200)), 201);
        assert_eq!(skip_forward(200, Some(30_000)), 30_001, "skips forward");
        assert_eq!(skip_forward(u64::MAX, Some(5)), u64::MAX, "saturates");
    }

    #[test]
    fn seed_long_1_a_long_sync_keeps_only_a_hosts_last_success_and_its_failure() {
        let host = Address::unchecked("gonka1host".to_owned());
        let sent = || SendResult {
            receipt: None,
            mempool: Vec::new(),
        };
        let mut answers = Answers::default();
        for _ in 0..611 {
            assert!(answers.keep(&host, Ok(sent())));
        }
        let timeout = HostError::Timeout(std::time::Duration::from_secs(1));
        assert!(!answers.keep(&host, Err(timeout)));
        let kept = answers.into_vec();
        assert_eq!(kept.len(), 2);
        assert!(kept[0].1.is_ok() && kept[1].1.is_err());
        assert_eq!(Answers::default().into_vec().len(), 0);
    }
}
