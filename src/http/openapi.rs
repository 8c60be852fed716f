//! `GET /openapi.json`: the OpenAPI 3.0 description of every route (hand-written). The edge
//! test `openapi` probes every documented path/method against the app (none may be an unknown
//! route or a wrong method) and checks a list of served routes is documented.

use actix_web::HttpResponse;
use serde_json::{json, Map, Value};

/// Who may call an operation.
#[derive(Clone, Copy)]
enum Auth {
    None,
    /// Per-model `access_mode` (open / API key / admin key).
    Model,
    Admin,
}

struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    auth: Auth,
    body: Option<Value>,
    ok: (&'static str, Value),
}

fn op(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    auth: Auth,
    body: Option<Value>,
    ok: (&'static str, Value),
) -> Op {
    Op {
        method,
        path,
        summary,
        auth,
        body,
        ok,
    }
}

fn obj() -> Value {
    json!({"type": "object", "additionalProperties": true})
}

fn escrow_body() -> Value {
    json!({"oneOf": [
        {"type": "object", "required": ["escrow_id"], "properties": {
            "escrow_id": {"type": "string"}, "model": {"type": "string"},
            "adopt": {"type": "boolean"}}},
        {"type": "object", "required": ["model", "amount"], "properties": {
            "model": {"type": "string"}, "amount": {"type": "integer"},
            "wait_ms": {"type": "integer"}}},
    ]})
}

fn participant_body() -> Value {
    json!({"type": "object", "properties": {
        "participant_key": {"type": "string"}, "all": {"type": "boolean"}}})
}

fn chat_body() -> Value {
    json!({"type": "object", "required": ["messages"], "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object", "properties": {
            "role": {"type": "string"}, "content": {}}}},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": "integer"},
        "max_completion_tokens": {"type": "integer"}}})
}

/// One entry of `GET /v1/debug/actors`.
fn actor() -> Value {
    let int = || json!({"type": "integer"});
    json!({"type": "object", "properties": {
        "kind": {"type": "string", "enum": ["directory", "escrow", "participant", "race", "repair", "chain_poller"]},
        "id": {"type": "string"}, "state": {"type": "string"}, "alive": {"type": "boolean"},
        "restarts": int(), "in_flight": int(),
        "mailbox_depth": int(), "messages_enqueued": int(), "messages_handled": int(),
        "last_message_at": {"type": "integer", "nullable": true, "description": "unix ms"},
        "started_at": {"type": "integer", "description": "unix ms"},
        "timers": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "due_at": {"type": "integer", "description": "unix ms"},
            "due_in_ms": int()}}},
        "detail": {}}})
}

fn actor_list() -> Value {
    json!({"type": "object", "properties": {"object": {"type": "string"}, "data": {"type": "array", "items": actor()}}})
}

fn ops() -> Vec<Op> {
    use Auth::{Admin, Model, None as Open};
    let list = || json!({"type": "object", "properties": {"object": {"type": "string"}, "data": {"type": "array", "items": obj()}}});
    vec![
        op("post", "/v1/chat/completions", "OpenAI chat completion (JSON, or SSE with stream=true). Optional Idempotency-Key header.", Model, Some(chat_body()), ("200", obj())),
        op("get", "/v1/models", "Served models", Open, None, ("200", list())),
        op("get", "/v1/status", "The Go gateway's gateway-mode status: {mode, runtimes, devshards[], limiter, capacity} (fields without an honest figure are omitted)", Open, None, ("200", obj())),
        op("get", "/healthz", "Liveness", Open, None, ("200", obj())),
        op("get", "/readyz", "Readiness (503 until an escrow is routable)", Open, None, ("200", obj())),
        op("get", "/metrics", "Prometheus metrics (text)", Open, None, ("200", json!({"type": "string"}))),
        op("get", "/debug/ui", "Live actor dashboard (HTML; data fetched with the admin key)", Open, None, ("200", json!({"type": "string"}))),
        op("get", "/openapi.json", "This document", Open, None, ("200", obj())),
        op("get", "/v1/requests/{request_id}", "A request (admin key, or the API key that made it): the accounting table's record (fingerprint, escrow, race id, nonces, attempts, outcome, replays) and its durable `ledger` row (tokens, reserved/actual/total cost, every attempt's cost once its nonce settled)", Admin, None, ("200", obj())),
        op("get", "/v1/admin/ledger", "Streams the cost ledger: ?since=&until= (unix ms, ended in [since, until)) &format=jsonl|csv", Admin, None, ("200", json!({"type": "string"}))),
        op("get", "/v1/admin/state", "Settings in force, escrows with snapshots, participants by state", Admin, None, ("200", obj())),
        op("get", "/v1/admin/escrows", "Registered escrows with live snapshots", Admin, None, ("200", list())),
        op("post", "/v1/admin/escrows", "Register an escrow (201, 200 when already registered); with \"adopt\": true, rebuild its live session from the hosts' diffs (201, 409 when registered); with {model, amount} create one on chain (201 registered, 202 still pending)", Admin, Some(escrow_body()), ("201", obj())),
        op("get", "/v1/admin/rotation", "Rotation: per model target, deposits today vs cap, decision, back-off, escrow roles; open creation intents", Admin, None, ("200", obj())),
        op("get", "/v1/admin/escrows/{id}", "One registered escrow", Admin, None, ("200", obj())),
        op("delete", "/v1/admin/escrows/{id}", "Unregister a settled escrow, or (?force=true) one that never granted a nonce; 409 otherwise. Its store rows are archived for accounting", Admin, None, ("200", obj())),
        op("post", "/v1/admin/escrows/{id}/deactivate", "Stop routing new requests to the escrow (running ones finish)", Admin, None, ("200", obj())),
        op("post", "/v1/admin/escrows/{id}/activate", "Route new requests to the escrow again", Admin, None, ("200", obj())),
        op("post", "/v1/admin/escrows/{id}/sync", "Sequence pending txs and catch every host up", Admin, None, ("200", obj())),
        op("post", "/v1/admin/escrows/{id}/participants/{address}/repair", "Run a repair tick now", Admin, None, ("202", obj())),
        op("get", "/v1/admin/participants", "Participant health", Admin, None, ("200", list())),
        op("post", "/v1/admin/participants/unquarantine", "End an ejection, start probation", Admin, Some(participant_body()), ("200", obj())),
        op("post", "/v1/admin/participants/forget", "Clear a participant's record", Admin, Some(participant_body()), ("200", obj())),
        op("post", "/v1/admin/participants/eject", "Eject a participant now", Admin, Some(participant_body()), ("200", obj())),
        op("get", "/v1/admin/settings", "Runtime settings (chain polling)", Admin, None, ("200", obj())),
        op("put", "/v1/admin/settings", "Change runtime settings (persisted)", Admin, Some(obj()), ("200", obj())),
        op("get", "/v1/debug/series", "The live page's series: one point every 2 s over 15 min (requests/s, TTFB p50/p99, errors by class, hedges, sheds, participants by state, per escrow nonce / nonces left / balance)", Admin, None, ("200", obj())),
        op("get", "/v1/debug/chain", "The chain poller's view and admission per model", Admin, None, ("200", obj())),
        op("get", "/v1/debug/actors", "Every live actor (?kind=directory|escrow|participant|race|repair|chain_poller, ?state=): state, restarts, mailbox depth, messages handled, last message time, armed timers with due times, detail; an actor that does not answer within 300 ms is `unresponsive`", Admin, None, ("200", actor_list())),
        op("get", "/v1/debug/actors/{kind}/{id}", "One actor (same fields as the listing; an escrow's full session; a race's attempts with timings and its hedge decision)", Admin, None, ("200", actor())),
        op("get", "/v1/debug/escrows/{id}", "One escrow's debug view with its stats and repair state", Admin, None, ("200", obj())),
    ]
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn operation(o: &Op) -> Value {
    let mut params: Vec<Value> = o
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    if o.path == "/v1/chat/completions" {
        params.push(json!({"name": "Idempotency-Key", "in": "header", "required": false,
            "schema": {"type": "string", "maxLength": 255},
            "description": "Retries with the same key (and same body, model, caller) within the window get the first answer; a different body → 422 idempotency_key_reused"}));
    }
    let mut responses = Map::new();
    responses.insert(
        o.ok.0.into(),
        json!({"description": "OK", "content": {"application/json": {"schema": o.ok.1}}}),
    );
    let security = match o.auth {
        Auth::None => json!([]),
        Auth::Model => {
            responses.insert(
                "401".into(),
                error_response("missing or invalid key (invalid_api_key)"),
            );
            responses.insert(
                "403".into(),
                error_response("the model's access_mode refuses this key (model_access_denied)"),
            );
            responses.insert(
                "409".into(),
                error_response("idempotent_replay_unavailable"),
            );
            responses.insert("422".into(), error_response("idempotency_key_reused"));
            json!([{}, {"apiKey": []}, {"adminKey": []}])
        }
        Auth::Admin => {
            responses.insert("401".into(), error_response("missing or invalid admin key"));
            responses.insert(
                "404".into(),
                error_response("not found, or the admin surface is off"),
            );
            json!([{"adminKey": []}])
        }
    };
    let mut v = json!({"summary": o.summary, "parameters": params, "responses": responses, "security": security});
    if let (Some(body), Some(m)) = (&o.body, v.as_object_mut()) {
        m.insert(
            "requestBody".into(),
            json!({"required": true, "content": {"application/json": {"schema": body}}}),
        );
    }
    v
}

/// The document.
pub fn spec() -> Value {
    let mut paths = Map::new();
    for o in ops() {
        let entry = paths.entry(o.path).or_insert_with(|| json!({}));
        if let Some(m) = entry.as_object_mut() {
            m.insert(o.method.into(), operation(&o));
        }
    }
    json!({
        "openapi": "3.0.3",
        "info": {"title": "devshard-gateway", "version": env!("CARGO_PKG_VERSION"),
            "description": "OpenAI-compatible gateway in front of Gonka devshard hosts. See docs/operator-surface.md."},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "A key of DEVSHARD_API_KEYS"},
                "adminKey": {"type": "http", "scheme": "bearer", "description": "DEVSHARD_ADMIN_API_KEY"}
            },
            "schemas": {"Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                "message": {"type": "string"}, "type": {"type": "string"},
                "param": {"type": "string", "nullable": true}, "code": {"type": "string"}}}}}}
        }
    })
}

/// `GET /openapi.json`.
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json(spec())
}
