//! Forwarding to the replica that owns a suitable escrow (PostgreSQL replicas,
//! `crate::replicas`; README "Any replica serves any request").
//!
//! - [`chat_elsewhere`]: a chat request whose model has no usable escrow here goes, once, to the
//!   owner of an escrow of the model (`replicas::route::chat_route`); its answer streams back
//!   chunk by chunk as it arrives, with its status and the headers that matter.
//! - [`chat_after_local_refusal`]: one routed here that no escrow here could take after all
//!   (the pick found none, or its escrow closed under its race), no nonce granted to it here,
//!   goes to an owner elsewhere the same way; forwarded here, it is handed back
//!   ([`handed_back`]: the refusal, marked) and its forwarder sends it to another owner.
//! - [`escrow_calls`]: the middleware of the admin and debug scopes that sends a call about one
//!   escrow (`/v1/admin/escrows/{id}[/…]`, `/v1/debug/escrows/{id}`) to its owner when this
//!   replica does not hold its lease.
//!
//! The forwarded request keeps the client's `Authorization` (the owner checks it again), its
//! `Content-Type`, `Idempotency-Key` and request id, and carries
//! `X-Devshard-Forwarded-By: <this replica>`, so the owner never forwards it again. An owner
//! that cannot be reached → 503 + `Retry-After` (`owner_unreachable`) and the lookup cache is
//! dropped. An owner that refuses the request because it cannot serve the model any more (its
//! escrow closed after the lookup: 503 `forward_hop_limit`, marked with
//! `X-Devshard-Forward-Refused`) has the lookup dropped, and the request goes once more to
//! another owner, if any (outcome `rerouted`; still one hop each). Log stage `request_forwarded`; metric `devshard_requests_forwarded_total{outcome}`.

use std::{cell::RefCell, time::Duration};

use actix_web::{
    body::{BoxBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    http::header::{self, HeaderName},
    middleware::Next,
    web::{self, Bytes},
    Error, HttpRequest, HttpResponse, ResponseError,
};
use slog::{info, warn, Logger};

use super::{
    admin::ADMIN_BODY_LIMIT, error::ApiError, normalize, placement::Elsewhere, read_body,
    HEADER_DEVSHARD_ID, HEADER_ESCROW, HEADER_REQUEST_ID,
};
use crate::{
    replicas::{
        route::{self, ChatRoute},
        ForwardError, ForwardOutcome, Replicas, HEADER_FORWARDED_BY, HEADER_REPLICA,
    },
    state::AppState,
    store::postgres::replicas::RemoteEscrow,
};

/// A forwarded request may take this long, streamed answer included (as a host stream may).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3600);
/// Connections of one worker's forwarding client (awc's default of 100 would queue the 101st
/// concurrent forwarded stream; `max_concurrent_races` of the owner is the real bound).
const FORWARD_CONNECTIONS_PER_THREAD: usize = 4096;
/// Request headers passed to the owner.
const REQUEST_HEADERS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::ACCEPT,
    HeaderName::from_static(super::openai::HEADER_IDEMPOTENCY_KEY),
];
/// Marks an owner's refusal of a forwarded request it cannot serve (one hop only).
pub const HEADER_FORWARD_REFUSED: &str = "x-devshard-forward-refused";
/// Response headers passed back to the client.
const RESPONSE_HEADERS: [HeaderName; 8] = [
    header::CONTENT_TYPE,
    header::RETRY_AFTER,
    header::CACHE_CONTROL,
    HeaderName::from_static(HEADER_REQUEST_ID),
    HeaderName::from_static(HEADER_ESCROW),
    HeaderName::from_static(HEADER_DEVSHARD_ID),
    HeaderName::from_static(HEADER_REPLICA),
    HeaderName::from_static(HEADER_FORWARD_REFUSED),
];

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

/// This worker's forwarding client (created on first use).
fn client() -> awc::Client {
    CLIENT.with(|c| {
        c.borrow_mut()
            .get_or_insert_with(|| {
                devshard_actors::tls::awc_client(
                    Some(FORWARD_CONNECTIONS_PER_THREAD),
                    Some(FORWARD_TIMEOUT),
                )
            })
            .clone()
    })
}

/// The replica that forwarded `req` here, if any.
fn forwarded_by(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(HEADER_FORWARDED_BY)
        .and_then(|v| v.to_str().ok())
}

/// Serves a chat request at another replica when no escrow of its model is usable here:
/// `Ok(None)` when it is served here.
pub async fn chat_elsewhere(
    req: &HttpRequest,
    state: &AppState,
    requested: Option<&str>,
    body: Bytes,
    rid: &str,
    log: &Logger,
) -> Result<Option<HttpResponse>, ApiError> {
    let Some(replicas) = &state.replicas else {
        return Ok(None);
    };
    let board = state.board.load();
    let model = match requested {
        Some(m) => m.to_string(),
        None => match normalize::choose_model(
            None,
            &board.models,
            state.limits.default_model.as_deref(),
        ) {
            Ok(m) => m,
            Err(_) => return Ok(None),
        },
    };
    let usable = {
        let off = state.deactivated.lock().unwrap_or_else(|e| e.into_inner());
        route::local_usable(&board, &model, &off)
    };
    if usable {
        return Ok(None);
    }
    let from = forwarded_by(req);
    let remote = match from {
        Some(_) => Default::default(),
        None => replicas.remote().await,
    };
    match route::chat_route(
        usable,
        from.is_some(),
        &model,
        &remote,
        replicas.next_spread(),
    ) {
        ChatRoute::Local => Ok(None),
        ChatRoute::RefuseSecondHop => {
            replicas.count_forward(ForwardOutcome::SecondHopRefused);
            warn!(log, "a forwarded request cannot be served here; not forwarded again";
                "stage" => "request_forwarded", "outcome" => ForwardOutcome::SecondHopRefused.as_str(),
                "model" => &model);
            let refused = ApiError::from(ForwardError::SecondHop {
                from: from.unwrap_or_default().to_string(),
                here: replicas.id().to_string(),
                model,
            });
            Ok(Some(marked_refusal(&refused)))
        }
        ChatRoute::Forward(to) => forward_to(replicas, (req, body), rid, &model, &to, log)
            .await
            .map(Some),
    }
}

/// What became of a chat request no escrow here could take after all.
#[derive(Debug)]
pub enum AfterRefusal {
    /// An owner elsewhere answered it (its answer streams back).
    Served(HttpResponse),
    /// It was forwarded here: the replica that sent it is to send it to another owner
    /// ([`handed_back`]).
    HandBack,
    /// Nowhere else to go: the local refusal stands.
    Stays,
}

/// A chat request no escrow here could take after all, with no nonce granted to it here
/// (`placement::Unplaced::Elsewhere`: its only escrow here closed between the route and the
/// pick, or under its race): to an owner of an escrow of `model` on another replica, with a
/// fresh lookup (outcome `after_local_refusal` or `after_escrow_closed`); handed back when it was
/// forwarded here (one hop each).
pub async fn chat_after_local_refusal(
    req: &HttpRequest,
    state: &AppState,
    (model, why): (&str, &Elsewhere),
    body: Bytes,
    rid: &str,
    log: &Logger,
) -> Result<AfterRefusal, ApiError> {
    let Some(replicas) = &state.replicas else {
        return Ok(AfterRefusal::Stays);
    };
    if forwarded_by(req).is_some() {
        return Ok(AfterRefusal::HandBack);
    }
    replicas.forget_lookup();
    let remote = replicas.remote().await;
    let ChatRoute::Forward(to) =
        route::chat_route(false, false, model, &remote, replicas.next_spread())
    else {
        return Ok(AfterRefusal::Stays);
    };
    let outcome = match why {
        Elsewhere::NoLocalEscrow(_) => ForwardOutcome::AfterLocalRefusal,
        Elsewhere::EscrowClosed { .. } => ForwardOutcome::AfterEscrowClosed,
    };
    replicas.count_forward(outcome);
    info!(log, "no local escrow could take the request after all; forwarding it";
        "stage" => "request_forwarded", "outcome" => outcome.as_str(), "reason" => why.reason(),
        "closed" => why.closed(), "owner" => &to.owner, "escrow" => &to.escrow_id);
    forward_to(replicas, (req, body), rid, model, &to, log)
        .await
        .map(AfterRefusal::Served)
}

/// The refusal of a forwarded request this replica could not place after all, marked with
/// [`HEADER_FORWARD_REFUSED`] so that its forwarder sends it to another owner (outcome
/// `handed_back`).
pub fn handed_back(state: &AppState, refusal: &ApiError, log: &Logger) -> HttpResponse {
    if let Some(replicas) = &state.replicas {
        replicas.count_forward(ForwardOutcome::HandedBack);
    }
    info!(log, "a forwarded request no escrow here could take; handed back to its forwarder";
        "stage" => "request_forwarded", "outcome" => ForwardOutcome::HandedBack.as_str(),
        "error" => %refusal);
    marked_refusal(refusal)
}

/// `refusal` as an answer carrying [`HEADER_FORWARD_REFUSED`].
fn marked_refusal(refusal: &ApiError) -> HttpResponse {
    let mut res = refusal.error_response();
    res.headers_mut().insert(
        HeaderName::from_static(HEADER_FORWARD_REFUSED),
        header::HeaderValue::from_static("1"),
    );
    res
}

/// Sends a chat request to `to`'s replica; an owner that refuses it (its escrow closed since
/// the lookup) has the request sent once more to another owner, with a fresh lookup.
async fn forward_to(
    replicas: &Replicas,
    (req, body): (&HttpRequest, Bytes),
    rid: &str,
    model: &str,
    to: &RemoteEscrow,
    log: &Logger,
) -> Result<HttpResponse, ApiError> {
    let res = send(replicas, req, body.clone(), Some(rid), to, log).await?;
    if !res.headers().contains_key(HEADER_FORWARD_REFUSED) {
        return Ok(res);
    }
    replicas.forget_lookup();
    let others: Vec<RemoteEscrow> = (replicas.remote().await.iter())
        .filter(|r| r.owner != to.owner)
        .cloned()
        .collect();
    match route::chat_route(false, false, model, &others, replicas.next_spread()) {
        ChatRoute::Forward(next) => {
            replicas.count_forward(ForwardOutcome::Rerouted);
            info!(log, "the owner refused the request; forwarded to another one";
                "stage" => "request_forwarded", "outcome" => ForwardOutcome::Rerouted.as_str(),
                "refused_by" => &to.owner, "owner" => &next.owner);
            send(replicas, req, body, Some(rid), &next, log).await
        }
        _ => Ok(res),
    }
}

/// Sends `req` (with `body`) to `to`'s replica and streams its answer back.
async fn send(
    replicas: &Replicas,
    req: &HttpRequest,
    body: Bytes,
    rid: Option<&str>,
    to: &RemoteEscrow,
    log: &Logger,
) -> Result<HttpResponse, ApiError> {
    let path = req
        .uri()
        .path_and_query()
        .map_or(req.path(), |p| p.as_str());
    let mut out = client()
        .request(req.method().clone(), format!("{}{path}", to.address))
        .insert_header((HEADER_FORWARDED_BY, replicas.id()));
    for name in &REQUEST_HEADERS {
        if let Some(v) = req.headers().get(name) {
            out = out.insert_header((name.clone(), v.clone()));
        }
    }
    let rid = rid.or_else(|| {
        req.headers()
            .get(HEADER_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
    });
    if let Some(rid) = rid {
        out = out.insert_header((HEADER_REQUEST_ID, rid));
    }
    let answer = match out.send_body(body).await {
        Ok(answer) => answer,
        Err(e) => {
            replicas.forget_lookup();
            replicas.count_forward(ForwardOutcome::OwnerUnreachable);
            warn!(log, "the owner replica could not be reached"; "stage" => "request_forwarded",
                "outcome" => ForwardOutcome::OwnerUnreachable.as_str(), "owner" => &to.owner,
                "escrow" => &to.escrow_id, "error" => %e);
            return Err(ForwardError::OwnerUnreachable {
                owner: to.owner.clone(),
                escrow: to.escrow_id.clone(),
                reason: e.to_string(),
            }
            .into());
        }
    };
    replicas.count_forward(ForwardOutcome::Forwarded);
    info!(log, "request forwarded to the escrow's owner"; "stage" => "request_forwarded",
        "outcome" => ForwardOutcome::Forwarded.as_str(), "owner" => &to.owner,
        "escrow" => &to.escrow_id, "status" => answer.status().as_u16(), "path" => req.path());
    let mut res = HttpResponse::build(answer.status());
    for name in &RESPONSE_HEADERS {
        if let Some(v) = answer.headers().get(name) {
            res.insert_header((name.clone(), v.clone()));
        }
    }
    Ok(res.streaming(answer))
}

/// Middleware of the admin and debug scopes (see the module docs).
pub async fn escrow_calls(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let owner = match (
        req.app_data::<web::Data<AppState>>()
            .and_then(|s| s.replicas.clone()),
        route::escrow_of_path(req.path()).map(str::to_string),
    ) {
        (Some(replicas), Some(escrow))
            if !replicas.holds(&escrow) && forwarded_by(req.request()).is_none() =>
        {
            let remote = replicas.remote().await;
            remote
                .iter()
                .find(|r| r.escrow_id == escrow)
                .cloned()
                .map(|to| (replicas, to))
        }
        _ => None,
    };
    let Some((replicas, to)) = owner else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    };
    let payload = req.extract::<web::Payload>().await?;
    let log = replicas.log().clone();
    let res = match read_body(req.request(), payload, ADMIN_BODY_LIMIT).await {
        Ok(body) => send(&replicas, req.request(), body, None, &to, &log).await,
        Err(e) => Err(e),
    };
    Ok(req.into_response(res.unwrap_or_else(|e| e.error_response())))
}
