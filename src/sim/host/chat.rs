//! `POST {prefix}/sessions/{id}/chat/completions` (docs/protocol.md §3.2), up to the receipt.
//!
//! Order: counters and fault set → RTT/2 → `http_status` fault → escrow lookup (500
//! `escrow not found`) → auth (401) → owner check (403) → JSON and diff decoding (400) →
//! availability (503 `requests_disabled` during PoC when configured) → strict diff application
//! (500 `apply diff nonce N: …`) → receipt when this host executes `req.nonce` and the payload
//! matches the Start (500 otherwise; applied diffs stay) → state signature. [`super::stream`]
//! then writes the SSE response.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use hyper::body::Incoming;

use devshard_actors::protocol::{
    auth::{self, ERROR_REQUESTS_DISABLED, HEADER_SIGNATURE, HEADER_TIMESTAMP},
    canonical::prompt_hash,
    crypto::SigningKey,
    diff::Diff,
    proto::{DevshardTx, MsgConfirmStart, MsgStartInference, Tx},
    state::{sign_receipt, sign_state, InferenceStatus},
    wire::{InferenceRequest, PayloadJson, ReceiptBody},
};

use super::{
    session::{Execution, HostSession},
    stream::{ExecMode, ExecPlan, Plan},
    HostState,
};
use crate::sim::{
    chain::EscrowInfo,
    faults::{AtomicCounters, Faults},
    network::NetCore,
    server::{self, Reject, Resp},
};

/// Handles one chat request end to end.
pub(crate) async fn handle(
    core: Arc<NetCore>,
    host: Arc<HostState>,
    escrow_id: String,
    req: Request<Incoming>,
) -> Resp {
    AtomicCounters::bump(&host.counters.chat);
    let faults = host.take_chat_faults();
    let latency = host.latency();
    host.delay(latency.half_rtt()).await;
    match prepare(&core, &host, &escrow_id, req, &faults).await {
        Ok(plan) => super::stream::respond(core, host, plan, faults, latency).await,
        Err(reject) => {
            host.delay(latency.half_rtt()).await;
            reject.into_response()
        }
    }
}

/// The answer of an `http_status` fault.
fn fault_reject(status: u16, faults: &Faults) -> Reject {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let default = match status.as_u16() {
        401 => "timestamp drift 45s exceeds maximum 30s",
        403 => auth::MSG_RESTRICTED_TO_OWNER,
        404 => "Not Found",
        429 => "rate limit exceeded",
        500 => "escrow not found",
        503 => ERROR_REQUESTS_DISABLED,
        _ => "simulated failure",
    };
    let text = faults.body.as_deref().unwrap_or(default);
    let devshard_error = (status == StatusCode::SERVICE_UNAVAILABLE).then_some(
        if text == auth::ERROR_INITIALIZING {
            auth::ERROR_INITIALIZING
        } else {
            ERROR_REQUESTS_DISABLED
        },
    );
    Reject {
        status,
        message: text.to_owned(),
        retry_after_s: faults.retry_after_s,
        devshard_error,
    }
}

/// Escrow lookup, body, auth and the owner check shared by the POST routes.
pub(crate) async fn authenticate_owner(
    core: &NetCore,
    escrow_id: &str,
    req: Request<Incoming>,
    now: i64,
) -> Result<(EscrowInfo, Bytes), Reject> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (sig, ts) = (header(HEADER_SIGNATURE), header(HEADER_TIMESTAMP));
    let body = server::read_body(req).await?;
    let escrow = core
        .chain
        .escrow(escrow_id)
        .ok_or_else(|| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, "escrow not found"))?;
    let signer = auth::verify_request(
        escrow_id,
        &body,
        sig.as_deref(),
        ts.as_deref(),
        now,
        auth::MAX_CLOCK_DRIFT_S,
    )
    .map_err(|e| Reject::new(StatusCode::UNAUTHORIZED, e.http_message()))?;
    if signer != escrow.creator {
        let text = if escrow.slots.contains(&signer) {
            auth::MSG_RESTRICTED_TO_OWNER
        } else {
            auth::MSG_SENDER_NOT_IN_GROUP
        };
        return Err(Reject::new(StatusCode::FORBIDDEN, text));
    }
    Ok((escrow, body))
}

/// Decodes the wire diffs (400 on a bad one).
pub(crate) fn decode_diffs(
    diffs: &[devshard_actors::protocol::wire::DiffJson],
) -> Result<Vec<Diff>, Reject> {
    diffs
        .iter()
        .map(|d| {
            d.to_diff().map_err(|e| {
                Reject::new(
                    StatusCode::BAD_REQUEST,
                    format!("decode diff nonce {}: {e}", d.nonce),
                )
            })
        })
        .collect()
}

/// Checks a payload against the fields of its Start (upstream `ErrPromptHashMismatch` /
/// `ErrPayloadMismatch`).
pub(crate) fn check_payload(p: &PayloadJson, start: &MsgStartInference) -> Result<(), String> {
    let hash = prompt_hash(&p.prompt).map_err(|e| format!("prompt hash mismatch: {e}"))?;
    if hash.as_slice() != start.prompt_hash.as_slice() {
        return Err("prompt hash mismatch".to_owned());
    }
    let field = if p.model != start.model {
        "model"
    } else if p.input_length != start.input_length {
        "input_length"
    } else if p.max_tokens != start.max_tokens {
        "max_tokens"
    } else if p.started_at != start.started_at {
        "started_at"
    } else {
        return Ok(());
    };
    Err(format!("payload mismatch: {field}"))
}

/// Availability is off: a raw PoC phase, the schedule disables hosts and this one is not
/// preserved.
pub(crate) fn availability_disabled(core: &NetCore, host: &HostState) -> bool {
    core.cfg.epochs.hosts_disable_during_poc
        && core.chain.epoch_view().is_poc()
        && !core
            .chain
            .participants()
            .get(host.index)
            .is_some_and(|p| p.preserved)
}

/// The 503 `requests_disabled` answer.
pub(crate) fn requests_disabled() -> Reject {
    fault_reject(503, &Faults::default())
}

/// True when a diff carries work a disabled host refuses (Start, Timeout, Validation, Vote).
fn carries_work(diffs: &[Diff]) -> bool {
    diffs.iter().flat_map(|d| &d.txs).any(|tx| {
        matches!(
            tx.tx,
            Some(
                Tx::StartInference(_)
                    | Tx::TimeoutInference(_)
                    | Tx::Validation(_)
                    | Tx::ValidationVote(_)
            )
        )
    })
}

async fn prepare(
    core: &Arc<NetCore>,
    host: &Arc<HostState>,
    escrow_id: &str,
    req: Request<Incoming>,
    faults: &Faults,
) -> Result<Plan, Reject> {
    if let Some(status) = faults.http_status {
        return Err(fault_reject(status, faults));
    }
    let now = host.now_ms_with(faults).div_euclid(1000);
    let (escrow, body) = authenticate_owner(core, escrow_id, req, now).await?;
    let request: InferenceRequest = serde_json::from_slice(&body).map_err(|e| {
        Reject::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })?;
    let diffs = decode_diffs(&request.diffs)?;
    if availability_disabled(core, host) && (request.payload.is_some() || carries_work(&diffs)) {
        return Err(requests_disabled());
    }
    let input = ChatInput {
        escrow,
        escrow_id: escrow_id.to_owned(),
        request,
        diffs,
        faults: faults.clone(),
        now,
    };
    let (core, host) = (Arc::clone(core), Arc::clone(host));
    super::off_thread(move || apply_and_receipt(&core, &host, &input)).await
}

/// What a chat request brings to the host's lock.
struct ChatInput {
    escrow: EscrowInfo,
    escrow_id: String,
    request: InferenceRequest,
    diffs: Vec<Diff>,
    faults: Faults,
    /// The host's clock (unix seconds).
    now: i64,
}

/// Steps 1–3 of §3.2 under the host's lock: the diffs applied (every signature verified), the
/// receipt when this host executes the nonce, the state signature.
fn apply_and_receipt(core: &NetCore, host: &HostState, input: &ChatInput) -> Result<Plan, Reject> {
    let ChatInput {
        escrow,
        escrow_id,
        request,
        diffs,
        faults,
        now,
    } = input;
    let (escrow_id, now) = (escrow_id.as_str(), *now);
    let mut sessions = host.sessions();
    let session = sessions.get_or_create(core, host, escrow, escrow_id)?;
    session
        .apply_diffs(
            diffs,
            faults.fork_from_nonce,
            core.cfg.validation_rate,
            host.signer(faults),
        )
        .map_err(|text| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, text))?;
    let exec = receipt(session, host, host.signer(faults), request, diffs, now)
        .map_err(|text| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, text))?;
    let reported = session.reported_root();
    let mut root = reported;
    if faults.wrong_state_hash {
        root = devshard_actors::protocol::crypto::sha256(&[root.as_slice(), b"wrong"].concat());
    }
    let nonce = session.sm.latest_nonce();
    let state_sig = sign_state(&root, escrow_id, nonce, host.signer(faults)).to_vec();
    if !faults.withhold_state_sig {
        let stored = sign_state(&reported, escrow_id, nonce, host.signer(faults)).to_vec();
        session.signatures.insert(nonce, stored);
    }
    let receipt_body = ReceiptBody {
        state_sig: (!faults.withhold_state_sig).then_some(state_sig),
        state_hash: Some(root.to_vec()),
        nonce,
        receipt: exec.as_ref().map(|e| e.receipt.clone()),
        confirmed_at: exec.as_ref().map(|e| e.confirmed_at),
    };
    Ok(Plan {
        escrow_id: escrow_id.to_owned(),
        incarnation: session.incarnation,
        receipt: receipt_body,
        exec,
    })
}

/// Step 3 of §3.2: the receipt, if this host executes `req.nonce` and the payload matches.
fn receipt(
    session: &mut HostSession,
    host: &HostState,
    signer: &SigningKey,
    request: &InferenceRequest,
    diffs: &[Diff],
    now: i64,
) -> Result<Option<ExecPlan>, String> {
    let Some(payload) = &request.payload else {
        return Ok(None);
    };
    let start = diffs
        .iter()
        .filter(|d| d.nonce == request.nonce)
        .flat_map(|d| &d.txs)
        .find_map(|tx| match &tx.tx {
            Some(Tx::StartInference(s)) => Some(s.clone()),
            _ => None,
        });
    let Some(start) = start else { return Ok(None) };
    let executor = session.sm.executor_slot(start.inference_id).clone();
    if &executor.validator != host.key.address() {
        return Ok(None);
    }
    check_payload(payload, &start)?;
    let escrow_id = session.sm.escrow_id().to_owned();
    let (execution, mode) = match session.executions.get(&start.inference_id) {
        Some(e) => {
            let mode = match &e.cached {
                Some(events) => ExecMode::Replay(events.clone()),
                None => ExecMode::AlreadyRunning,
            };
            (e.clone(), mode)
        }
        None => {
            let receipt = sign_receipt(&start, &escrow_id, now, signer).to_vec();
            let e = Execution {
                receipt,
                confirmed_at: now,
                cached: None,
            };
            session.executions.insert(start.inference_id, e.clone());
            (e, ExecMode::New)
        }
    };
    let pending = session
        .sm
        .record(start.inference_id)
        .is_some_and(|r| r.status == InferenceStatus::Pending);
    if pending {
        session.add_to_mempool(DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
            inference_id: start.inference_id,
            executor_sig: execution.receipt.clone(),
            confirmed_at: execution.confirmed_at,
        })));
    }
    Ok(Some(ExecPlan {
        inference_id: start.inference_id,
        executor_slot: executor.slot_id,
        prompt: payload.prompt.clone(),
        max_tokens: payload.max_tokens,
        receipt: execution.receipt,
        confirmed_at: execution.confirmed_at,
        mode,
    }))
}
