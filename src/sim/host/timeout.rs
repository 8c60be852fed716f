//! `POST {prefix}/sessions/{id}/verify-timeout` (docs/protocol.md §3.3, §6.7).
//!
//! The host applies the request's diffs best effort (stops at the first failure, ignores it),
//! then decides:
//! - REFUSED: the record must be Pending (else 500 `inference N: expected pending, got S`);
//!   accept iff `now − started_at ≥ refusal_timeout`, no ConfirmStart/Finish for it in the
//!   local mempool and the payload is present and matches the record. There is no executor
//!   challenge (as the prod wiring without an executor client).
//! - EXECUTION: the record must be Started; accept iff `now − confirmed_at ≥
//!   execution_timeout`, no Finish in the local mempool and none in the executor's mempool (an
//!   executor that is down, or has no session, counts as support).
//!
//! During PoC a host whose availability is off answers 503 `requests_disabled`.
//! An accepting answer carries `sign(TimeoutVoteContent{escrow_id, id, reason, accept: true})`;
//! `voter_slot` is the host's lowest slot.

use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;

use devshard_actors::protocol::{
    proto::{MsgStartInference, TimeoutReason},
    state::{sign_timeout_vote, InferenceStatus, StateError},
    wire::{VerifyTimeoutRequest, VerifyTimeoutResponse},
};

use super::{
    chat::{
        authenticate_owner, availability_disabled, check_payload, decode_diffs, requests_disabled,
    },
    session::{HostSession, KIND_CONFIRM, KIND_FINISH},
    HostState,
};
use crate::sim::{
    faults::AtomicCounters,
    network::NetCore,
    server::{self, Reject, Resp},
};

pub(crate) async fn handle(
    core: Arc<NetCore>,
    host: Arc<HostState>,
    escrow_id: String,
    req: Request<Incoming>,
) -> Resp {
    AtomicCounters::bump(&host.counters.verify_timeout);
    let latency = host.latency();
    host.delay(latency.half_rtt()).await;
    let resp = match decide(&core, &host, &escrow_id, req).await {
        Ok(answer) => server::json(StatusCode::OK, &answer),
        Err(reject) => reject.into_response(),
    };
    host.delay(latency.half_rtt()).await;
    resp
}

/// What the local checks concluded; the executor's mempool is consulted after the lock.
struct Local {
    accept: bool,
    voter_slot: u32,
    /// Slot of the executor to ask for a Finish (EXECUTION only).
    executor_slot: Option<u32>,
    reason: TimeoutReason,
}

async fn decide(
    core: &Arc<NetCore>,
    host: &Arc<HostState>,
    escrow_id: &str,
    req: Request<Incoming>,
) -> Result<VerifyTimeoutResponse, Reject> {
    let now = host.now_unix();
    let (escrow, body) = authenticate_owner(core, escrow_id, req, now).await?;
    if availability_disabled(core, host) {
        return Err(requests_disabled());
    }
    let bad = |text: String| Reject::new(StatusCode::BAD_REQUEST, text);
    let request: VerifyTimeoutRequest =
        serde_json::from_slice(&body).map_err(|e| bad(format!("invalid request body: {e}")))?;
    let reason = TimeoutReason::from_wire(&request.reason)
        .ok_or_else(|| bad(format!("invalid timeout reason {:?}", request.reason)))?;
    let diffs = decode_diffs(request.diffs.as_deref().unwrap_or_default())?;
    let faults = host.faults();
    let fork_from = faults.fork_from_nonce;
    let inference_id = request.inference_id;
    let local = {
        let (core, host) = (Arc::clone(core), Arc::clone(host));
        let (escrow_id, signer) = (escrow_id.to_owned(), host.signer(&faults).clone());
        let escrow = escrow.clone();
        super::off_thread(move || {
            let mut sessions = host.sessions();
            let session = sessions.get_or_create(&core, &host, &escrow, &escrow_id)?;
            for d in &diffs {
                let one = std::slice::from_ref(d);
                let rate = core.cfg.validation_rate;
                if session.apply_diffs(one, fork_from, rate, &signer).is_err() {
                    break;
                }
            }
            check_local(session, &request, reason, now)
                .map_err(|text| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, text))
        })
        .await?
    };
    let mut accept = local.accept;
    if let (true, Some(slot)) = (accept, local.executor_slot) {
        accept = !executor_has_finish(core, escrow_id, &escrow.slots, slot, inference_id).await;
    }
    let signature = accept.then(|| {
        sign_timeout_vote(
            escrow_id,
            inference_id,
            local.reason,
            local.voter_slot,
            host.signer(&faults),
        )
        .signature
    });
    Ok(VerifyTimeoutResponse {
        accept,
        signature,
        voter_slot: local.voter_slot,
    })
}

fn check_local(
    session: &HostSession,
    request: &VerifyTimeoutRequest,
    reason: TimeoutReason,
    now: i64,
) -> Result<Local, String> {
    let id = request.inference_id;
    let rec = session
        .sm
        .record(id)
        .ok_or_else(|| StateError::InferenceNotFound(id).to_string())?;
    let expected = match reason {
        TimeoutReason::Execution => InferenceStatus::Started,
        _ => InferenceStatus::Pending,
    };
    if rec.status != expected {
        return Err(format!(
            "inference {id}: expected {expected}, got {}",
            rec.status
        ));
    }
    let cfg = session.sm.config();
    let voter_slot = session.my_slots.first().copied().unwrap_or(0);
    let in_group = !session.my_slots.is_empty();
    let local = match reason {
        TimeoutReason::Execution => Local {
            accept: in_group
                && now - rec.confirmed_at >= cfg.execution_timeout
                && !session.mempool_has(KIND_FINISH, id),
            voter_slot,
            executor_slot: Some(rec.executor_slot),
            reason,
        },
        _ => {
            let start = MsgStartInference {
                inference_id: id,
                prompt_hash: rec.prompt_hash.to_vec(),
                model: rec.model.to_string(),
                input_length: rec.input_length,
                max_tokens: rec.max_tokens,
                started_at: rec.started_at,
            };
            let payload_ok = request
                .payload
                .as_ref()
                .is_some_and(|p| check_payload(p, &start).is_ok());
            Local {
                accept: in_group
                    && now - rec.started_at >= cfg.refusal_timeout
                    && !session.mempool_has(KIND_CONFIRM, id)
                    && !session.mempool_has(KIND_FINISH, id)
                    && payload_ok,
                voter_slot,
                executor_slot: None,
                reason,
            }
        }
    };
    Ok(local)
}

/// The executor's `GET /mempool` (in process): does it hold a Finish for `id`?
async fn executor_has_finish(
    core: &NetCore,
    escrow_id: &str,
    slots: &[devshard_actors::protocol::crypto::Address],
    executor_slot: u32,
    id: u64,
) -> bool {
    let Some(addr) = slots.get(executor_slot as usize) else {
        return false;
    };
    let Some(executor) = core.hosts.iter().find(|h| h.key.address() == addr) else {
        return false;
    };
    if !executor.listener().is_some_and(|l| l.is_up()) {
        return false;
    }
    executor
        .on_session(escrow_id, move |s| s.mempool_has(KIND_FINISH, id))
        .await
        .unwrap_or(false)
}
