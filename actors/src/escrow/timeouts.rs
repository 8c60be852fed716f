//! Timeout votes for attempts that failed without a finish (docs/protocol.md §6.5, docs/health.md §5), and
//! the `SendPendingDiff` that carries a confirmed `MsgTimeoutInference` to its host.
//!
//! At the protocol deadline (`started_at + refusal_timeout` or `confirmed_at + execution_timeout`,
//! plus the buffer) the escrow asks every other host at once for a signed timeout vote (several
//! nonces at once, bounded: `vote_queue.rs`), each verifier with the whole catch-up it lacks,
//! verifies each vote, and when the accepted weight is strictly above `vote_threshold` sequences
//! `MsgTimeoutInference` in the next diff and sends it. The reason asked is the record's state in
//! ours (Started → execution, Pending → refused), what every verifier checks. Only a confirmed
//! timeout turns a pending finish into a `HostFault`. These functions build the I/O and judge its
//! answers; the actor runs them.

use std::collections::BTreeSet;

use futures::{future::LocalBoxFuture, stream::FuturesUnordered, StreamExt};
use slog::{info, warn};

use super::{
    diff_log::{self, DiffPath},
    info::HostEndpoint,
    nonces::NonceEntry,
    session::Session,
    EscrowDeps,
};
use crate::{
    host::client::{self, SendResult},
    protocol::{
        crypto::Address,
        proto::{DevshardTx, MsgTimeoutInference, TimeoutReason, TimeoutVote, Tx},
        state,
        wire::{DiffJson, InferenceRequest, VerifyTimeoutRequest, VerifyTimeoutResponse},
    },
    store::{Ack, StoreError},
};

/// Why a pending diff did not reach its host.
#[derive(Debug)]
pub(super) enum PendingDiffError {
    /// The diff's write failed: it must never be sent, and the escrow stops.
    NotDurable(StoreError),
    /// The diff is durable, but the host did not take it (catch-up carries it later). `holds`:
    /// what the host says it holds when it refused the diff for a nonce gap or a lost session.
    NotDelivered { error: String, holds: Option<u64> },
}

/// The answers of one vote round.
pub(super) type Answers = Vec<(Address, VerifyTimeoutResponse)>;

/// A vote round's answers, and the highest nonce each answering verifier was carried: it applied
/// those diffs before it answered, so its catch-up point moves there (`Session::acknowledged`).
/// Otherwise every later vote carried the same catch-up again: after a restart (sync points as
/// last persisted) each of 32 votes at once encoded hundreds of diffs for each verifier, and the
/// gateway of the hour-long run grew to 3.4 GB in 36 s.
pub(super) struct Round {
    pub answers: Answers,
    pub carried: Vec<(Address, u64)>,
    /// Verifiers that answered an error: one that restarted empty judges from a state without
    /// the nonce ("inference not found") while the escrow still counts it near, so every later
    /// round asks it again in vain; the caller kicks a sync, which finds out what it holds.
    pub failed: Vec<Address>,
}

/// How far below memory a verifier's catch-up may reach and still be carried by a vote (in
/// units of `diff_window`), one vote at a time per verifier.
const FAR_CARRY_WINDOWS: u64 = 16;

/// Who a round asks, and the far verifiers whose catch-up it carries.
struct Asked<'a> {
    hosts: Vec<&'a HostEndpoint>,
    behind: usize,
    carrying: Vec<Address>,
}

/// The verifiers a round asks: every host but the executor that is *near* (its catch-up is in
/// memory, or at most `window` more diffs below it); when their weight cannot pass the
/// threshold, the least far of the others (at most [`FAR_CARRY_WINDOWS`] windows below, and
/// not already carried by another vote) until it can; `None` when even they cannot. A verifier
/// far behind (restarted empty, down, ejected) was sent thousands of diffs read back from the
/// store and encoded for every vote, 32 votes at once: after each restart of the hour-long chaos
/// run votes fell from ≈ 70 a second to a few, and three hosts restarted empty 55 000 nonces
/// behind made each vote carry 160 000 diffs (the gateway grew past 2 GB). Now one vote at a
/// time carries a far verifier's catch-up (its answer moves the verifier's catch-up point,
/// `Session::acknowledged`), and hosts further behind are caught up by one sync (the caller
/// asks for it).
fn verifiers<'a>(
    session: &Session,
    hosts: &'a [HostEndpoint],
    (executor, window): (&Address, usize),
    carried: &BTreeSet<Address>,
) -> Option<Asked<'a>> {
    let threshold = u64::from(session.info().config.vote_threshold);
    let window = u64::try_from(window.max(1)).unwrap_or(u64::MAX);
    let weight = |h: &HostEndpoint| u64::try_from(h.slots.len()).unwrap_or(0);
    let below = |h: &HostEndpoint| {
        let after = session.catch_up_after(&h.address);
        session.first_held().saturating_sub(after.saturating_add(1))
    };
    let others = hosts.iter().filter(|h| h.address != *executor);
    let (mut chosen, mut far): (Vec<_>, Vec<_>) = others.partition(|h| below(h) <= window);
    let mut weight_in: u64 = chosen.iter().map(|h| weight(h)).sum();
    far.sort_by_key(|h| below(h));
    let mut carrying = Vec::new();
    for h in far.iter() {
        if weight_in > threshold {
            break;
        }
        if below(h) <= window.saturating_mul(FAR_CARRY_WINDOWS) && !carried.contains(&h.address) {
            weight_in = weight_in.saturating_add(weight(h));
            carrying.push(h.address.clone());
            chosen.push(h);
        }
    }
    let behind = far.len().saturating_sub(carrying.len());
    (weight_in > threshold).then_some(Asked {
        hosts: chosen,
        behind,
        carrying,
    })
}

/// Asks the verifiers ([`verifiers`]) for a vote on `entry`'s timeout once `ready` (the diffs
/// they need are durable) resolved, with the far verifiers whose catch-up this round carries
/// (the caller holds them in `carried` until the round ends); `None` when the verifiers that may
/// be asked cannot pass (the round is short at once, and far hosts need a sync first). They are asked at once, each with the whole catch-up
/// it lacks (a verifier behind judges from our state, not from a prefix of it); the round ends
/// when every one answered or the accepted weight passed the threshold.
pub(super) fn collect_votes(
    session: &Session,
    deps: &EscrowDeps,
    (entry, carried): (&NonceEntry, &BTreeSet<Address>),
    reason: TimeoutReason,
    ready: Ack,
) -> Option<(LocalBoxFuture<'static, Round>, Vec<Address>)> {
    let info = session.info().clone();
    let signer = super::wire_cache::signer(session, deps);
    let timeout = deps.cfg.host_timeouts.verify_timeout;
    let mut calls = Vec::new();
    let window = deps.cfg.diff_window;
    let Asked {
        hosts: asked,
        behind,
        carrying,
    } = verifiers(session, &info.hosts, (&entry.host, window), carried)?;
    if behind > 0 {
        deps.metrics
            .timeout_voters_behind
            .inc_by(u64::try_from(behind).unwrap_or(0));
        slog::debug!(deps.log, "verifiers far behind not asked";
            "stage" => "timeout_voters_behind", "nonce" => entry.nonce, "behind" => behind);
    }
    for host in asked {
        let after = session.catch_up_after(&host.address);
        let diffs = match diff_log::diffs_after(
            session,
            deps,
            DiffPath::Vote,
            after,
            u64::MAX,
            usize::MAX,
        ) {
            Ok(d) => d,
            Err(e) => {
                warn!(deps.log, "a verifier's catch-up could not be read"; "stage" => "diffs_from_store_failed",
                    "host" => host.address.short(), "error" => %e);
                continue;
            }
        };
        let top = diffs.last().map_or(0, |d| d.nonce);
        let request = VerifyTimeoutRequest {
            inference_id: entry.nonce,
            reason: reason.as_wire().to_string(),
            payload: entry.payload.clone(),
            diffs: Some(diffs.iter().map(|d| DiffJson::from_diff(d)).collect()),
        };
        let weight = u64::try_from(host.slots.len()).unwrap_or(0);
        let (addr, url, signer) = (
            host.address.clone(),
            info.session_url(host, "verify-timeout"),
            signer.clone(),
        );
        calls.push(async move {
            let res = client::verify_timeout(&url, &request, &signer, timeout).await;
            (addr, weight, top, res)
        });
    }
    let threshold = u64::from(info.config.vote_threshold);
    let round: LocalBoxFuture<'static, Round> = Box::pin(async move {
        let mut round = Round {
            answers: Vec::new(),
            carried: Vec::new(),
            failed: Vec::new(),
        };
        if ready.await.is_err() {
            return round;
        }
        let mut pending: FuturesUnordered<_> = calls.into_iter().collect();
        let mut weight = 0u64;
        while let Some((addr, w, top, res)) = pending.next().await {
            match res {
                Ok(answer) => {
                    if answer.accept {
                        weight += w;
                    }
                    round.carried.push((addr.clone(), top));
                    round.answers.push((addr, answer));
                }
                Err(_) => round.failed.push(addr),
            }
            if weight > threshold {
                break;
            }
        }
        round
    });
    Some((round, carrying))
}

/// Verifies the answers of a vote round. `Some(tx)`: the timeout is confirmed and `tx`
/// (`MsgTimeoutInference` with the accepted votes) goes into the next diff; `None`: not enough
/// weight.
pub(super) fn tally(
    session: &Session,
    deps: &EscrowDeps,
    nonce: u64,
    reason: TimeoutReason,
    answers: Answers,
) -> Option<DevshardTx> {
    let info = session.info();
    let content = state::timeout_vote_content(&info.escrow_id, nonce, reason);
    let mut voters = BTreeSet::new();
    let mut votes = Vec::new();
    let mut weight = 0u64;
    for (addr, answer) in answers {
        let Some(sig) = answer.signature.filter(|_| answer.accept) else {
            continue;
        };
        let owns_slot = info
            .group
            .iter()
            .any(|s| s.slot_id == answer.voter_slot && s.validator == addr);
        if !owns_slot
            || session
                .check_slot_signer(answer.voter_slot, &content, &sig)
                .is_err()
            || !voters.insert(addr.clone())
        {
            warn!(deps.log, "timeout vote rejected"; "stage" => "timeout_vote_invalid",
                "nonce" => nonce, "host" => addr.short());
            continue;
        }
        weight += info
            .host(&addr)
            .map_or(0, |h| u64::try_from(h.slots.len()).unwrap_or(0));
        votes.push(TimeoutVote {
            voter_slot: answer.voter_slot,
            accept: true,
            signature: sig,
        });
    }
    let threshold = u64::from(info.config.vote_threshold);
    let confirmed = weight > threshold;
    let result = if confirmed {
        "confirmed"
    } else {
        "insufficient"
    };
    deps.metrics.timeouts.with_label_values(&[result]).inc();
    if !confirmed {
        warn!(deps.log, "timeout not confirmed"; "stage" => "timeout_insufficient_votes",
            "nonce" => nonce, "weight" => weight, "threshold" => threshold);
        return None;
    }
    info!(deps.log, "timeout confirmed by votes"; "stage" => "timeout_confirmed",
        "nonce" => nonce, "reason" => reason.as_wire(), "weight" => weight);
    Some(DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
        inference_id: nonce,
        reason: reason as i32,
        votes,
    })))
}

/// `SendPendingDiff`: sends the just composed diff `nonce` to `host` with catch-up, once `ack`
/// says it is durable. Every answer but [`PendingDiffError::NotDurable`] means the diff is
/// durable (the caller advances its durable nonce on it).
pub(super) fn send_pending_diff(
    session: &Session,
    deps: &EscrowDeps,
    host: &HostEndpoint,
    nonce: u64,
    ack: Ack,
) -> LocalBoxFuture<'static, Result<SendResult, PendingDiffError>> {
    let info = session.info();
    let after = session.catch_up_after(&host.address);
    let limit = deps.cfg.catch_up_chunk;
    // A store read that fails still waits for the diff's own ack: the caller advances its
    // durable nonce on every answer but `NotDurable`.
    let diffs = diff_log::diffs_after(session, deps, DiffPath::Vote, after, u64::MAX, limit);
    let url = info.session_url(host, "chat/completions");
    let signer = super::wire_cache::signer(session, deps);
    let timeout = deps.cfg.host_timeouts.query;
    Box::pin(async move {
        ack.await.map_err(PendingDiffError::NotDurable)?;
        let diffs = diffs.map_err(|e| PendingDiffError::NotDelivered {
            error: e.to_string(),
            holds: None,
        })?;
        let request = InferenceRequest {
            diffs: diffs.iter().map(|d| DiffJson::from_diff(d)).collect(),
            nonce,
            payload: None,
            stream: None,
        };
        client::send_diffs(&url, &request, &signer, timeout)
            .await
            .map_err(|e| PendingDiffError::NotDelivered {
                holds: e.rejection().and_then(|r| r.host_holds()),
                error: e.to_string(),
            })
    })
}
