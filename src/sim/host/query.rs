//! The unauthenticated GETs of a host (docs/protocol.md §3.6): `diffs`, `mempool`, `signatures`.
//! A host without a session for the escrow answers 404 `session not found`.

use std::sync::Arc;

use http::StatusCode;

use devshard_actors::protocol::{
    crypto::sha256,
    diff::Diff,
    state::sign_state,
    wire::{DiffJson, DiffRecord, MempoolResponse, SignaturesResponse},
};

use super::HostState;
use crate::sim::{
    faults::AtomicCounters,
    server::{self, query_param, Reject, Resp},
};

const SESSION_NOT_FOUND: &str = "session not found";

/// Wraps a GET answer in the host's RTT.
async fn with_rtt(host: &HostState, answer: impl std::future::Future<Output = Resp>) -> Resp {
    let half = host.latency().half_rtt();
    host.delay(half).await;
    let resp = answer.await;
    host.delay(half).await;
    resp
}

fn parse_u64(query: Option<&str>, name: &str) -> Result<Option<u64>, Reject> {
    match query_param(query, name) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Reject::new(StatusCode::BAD_REQUEST, format!("invalid {name} parameter"))),
    }
}

/// `diff` as a lying host serves it (`forge_diffs_from_nonce`): a rewritten root it signs itself.
fn forged(host: &HostState, escrow_id: &str, diff: &Diff) -> Diff {
    let root = sha256(&[diff.post_state_root.as_slice(), b"forged"].concat());
    Diff::sign(diff.nonce, diff.txs.clone(), escrow_id, root, &host.key)
}

/// `GET …/diffs?from=A&to=B` (inclusive; defaults 1 and the latest nonce).
pub(crate) async fn diffs(host: &Arc<HostState>, escrow_id: &str, query: Option<&str>) -> Resp {
    AtomicCounters::bump(&host.counters.diffs);
    let forge_from = host.faults().forge_diffs_from_nonce;
    with_rtt(host, async {
        let (from, to) = match (parse_u64(query, "from"), parse_u64(query, "to")) {
            (Ok(f), Ok(t)) => (f.unwrap_or(1), t),
            (Err(r), _) | (_, Err(r)) => return r.into_response(),
        };
        let (forger, id) = (Arc::clone(host), escrow_id.to_owned());
        let records = host
            .on_session(escrow_id, move |s| {
                let to = to.unwrap_or_else(|| s.sm.latest_nonce());
                s.diffs_in(from, to)
                    .map(|d| {
                        let diff = match forge_from {
                            Some(k) if d.diff.nonce >= k => forged(&forger, &id, &d.diff),
                            _ => d.diff.clone(),
                        };
                        DiffRecord {
                            diff: DiffJson::from_diff(&diff),
                            state_hash: d.state_hash.to_vec(),
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        match records {
            Some(r) => server::json(StatusCode::OK, &r),
            None => server::message(StatusCode::NOT_FOUND, SESSION_NOT_FOUND),
        }
    })
    .await
}

/// `GET …/mempool`.
pub(crate) async fn mempool(host: &Arc<HostState>, escrow_id: &str) -> Resp {
    AtomicCounters::bump(&host.counters.mempool);
    with_rtt(host, async {
        let mempool = host.on_session(escrow_id, |s| MempoolResponse::from_txs(&s.mempool));
        match mempool.await {
            Some(m) => server::json(StatusCode::OK, &m),
            None => server::message(StatusCode::NOT_FOUND, SESSION_NOT_FOUND),
        }
    })
    .await
}

/// `GET …/signatures?nonce=N`: the host's own signature for each of its slots, if it signed
/// at exactly that nonce; `null` otherwise (and always with `signatures_empty`).
pub(crate) async fn signatures(
    host: &Arc<HostState>,
    escrow_id: &str,
    query: Option<&str>,
) -> Resp {
    AtomicCounters::bump(&host.counters.signatures);
    let faults = host.faults();
    let empty = faults.signatures_empty;
    with_rtt(host, async {
        let nonce = match parse_u64(query, "nonce") {
            Ok(Some(n)) => n,
            Ok(None) => return server::message(StatusCode::BAD_REQUEST, "invalid nonce parameter"),
            Err(r) => return r.into_response(),
        };
        let (signer, id) = (Arc::clone(host), escrow_id.to_owned());
        let sigs = host
            .on_session(escrow_id, move |s| {
                if faults.signatures_wrong_root {
                    let wrong = sha256(&[b"wrong-root".as_slice(), &nonce.to_be_bytes()].concat());
                    let sig = sign_state(&wrong, &id, nonce, signer.signer(&faults)).to_vec();
                    return Some(s.my_slots.iter().map(|slot| (*slot, sig.clone())).collect());
                }
                let sig = s.signatures.get(&nonce).filter(|_| !empty)?;
                Some(s.my_slots.iter().map(|slot| (*slot, sig.clone())).collect())
            })
            .await;
        match sigs {
            Some(signatures) => server::json(StatusCode::OK, &SignaturesResponse { signatures }),
            None => server::message(StatusCode::NOT_FOUND, SESSION_NOT_FOUND),
        }
    })
    .await
}
