//! Actor-level inspection under `/v1/debug` (admin key):
//!
//! - `GET /v1/debug/actors[?kind=escrow|participant|race|repair|chain_poller|directory][&state=…]`
//!   lists every live actor with its kind, id, a state summary, whether it is alive, restarts,
//!   races in flight, and its statistics: `mailbox_depth`, `messages_enqueued`,
//!   `messages_handled`, `last_message_at` (unix ms), `started_at` and the armed `timers`
//!   (`name`, `due_at` unix ms, `due_in_ms`).
//! - `GET /v1/debug/actors/{kind}/{id}`: one actor's full state (escrow: nonce, phase, root,
//!   per-host sync nonce, pending txs, signatures, attempts in flight, pending finishes and
//!   timeouts, repairs; participant: health state, decayed strikes, level, deadlines, perf;
//!   race: attempts with their nonce, host, role, timings and result, the hedge decision and due
//!   time, the winner).
//! - `GET /v1/debug/escrows/{id}`: the escrow's session, its stats and the state of each of its
//!   repairs (blocked since, attempts, last result, next tick).
//! - `kind=limiter`: one entry, `edge`, the adaptive concurrency limit (`crate::overload`): its
//!   limit, ceiling, races starting, queue, latencies and sheds by reason (state `open`,
//!   `queueing` while requests wait, or `disabled`).
//! - `kind=settlement` entries: each registered escrow's settlement state, attempts, last error,
//!   weight/threshold and nonce/balance budget ([`super::debug_settlement`]).
//! - `GET /v1/debug/chain` and `/v1/debug/series`: [`super::debug_chain`].
//!
//! The statistics come from the actor registry ([`devshard_actors::stats`]), read without
//! messaging any actor, so a stuck actor is still listed, with its growing mailbox depth. The
//! state details come from probes sent **concurrently**, each with a [`PROBE_TIMEOUT`] deadline:
//! one round to the directory (status, live addresses, health settings) and the chain poller,
//! then one round to every escrow and participant. An actor that misses its deadline is
//! reported `unresponsive`; the listing answers within about two deadlines whatever the load.
//!
//! No secret (private key, API keys) is in any of these answers.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use actix_web::{web, HttpRequest, HttpResponse};
use devshard_actors::{
    directory::{
        ActorKind, DirectoryStatus, GetEscrow, GetHealthSettings, GetLiveActors, GetStatus,
        LiveActors,
    },
    escrow::messages::{GetRepairStates, GetSnapshot},
    participant::messages::{GetParticipant, ParticipantView},
    policy::settings::HealthSettings,
    stats::{Describe, Kind, StatsView},
};
use futures::future::join_all;
use serde_json::{json, Value};

use super::{error::ApiError, participants::participant_json};
use crate::state::{AppState, ACTOR_TIMEOUT};

/// How long one actor may take to answer a probe before it is reported `unresponsive`.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

fn query_param<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.query_string().split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then_some(v)
    })
}

async fn escrow_detail(state: &AppState, id: &str) -> Result<Value, ApiError> {
    let addr = state
        .directory
        .send(GetEscrow {
            escrow_id: id.to_string(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("escrow {id} is not running")))?;
    let (snapshot, repairs) = futures::join!(
        addr.send(GetSnapshot).timeout(PROBE_TIMEOUT),
        addr.send(GetRepairStates).timeout(PROBE_TIMEOUT)
    );
    let snapshot = match snapshot {
        Ok(s) => serde_json::to_value(s).unwrap_or(Value::Null),
        Err(_) => json!({"state": "unresponsive"}),
    };
    let repairs = match repairs {
        Ok(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Err(_) => json!("unresponsive"),
    };
    let stats = addr.stats().view(state.clock.now_ms());
    Ok(json!({"kind": "escrow", "id": id, "state": snapshot, "repairs": repairs, "stats": stats}))
}

/// What the probes found (`None`: no answer in time).
#[derive(Default)]
struct Probed {
    status: Option<DirectoryStatus>,
    settings: Option<Arc<HealthSettings>>,
    /// Escrow id → (snapshot, repair states).
    escrows: BTreeMap<String, (Option<Value>, Option<Vec<Value>>)>,
    participants: BTreeMap<String, Option<Arc<ParticipantView>>>,
    poller: Option<Value>,
}

/// Which probes a listing needs (a `?kind=` filter skips the others).
fn wants(kind: Option<&str>, k: Kind) -> bool {
    kind.is_none_or(|w| w == k.as_str())
}

async fn probe(state: &AppState, kind: Option<&str>) -> Probed {
    let dir = &state.directory;
    let need_escrows = wants(kind, Kind::Escrow) || wants(kind, Kind::Repair);
    let need_participants = wants(kind, Kind::Participant);
    let live = async {
        if need_escrows || need_participants {
            dir.send(GetLiveActors).timeout(PROBE_TIMEOUT).await.ok()
        } else {
            None
        }
    };
    let poller = async {
        match state.polling.poller() {
            Some(p) if wants(kind, Kind::ChainPoller) => {
                let view = p
                    .send(devshard_actors::chain::GetSnapshot)
                    .timeout(PROBE_TIMEOUT);
                view.await.ok().and_then(|v| serde_json::to_value(&*v).ok())
            }
            _ => None,
        }
    };
    let (status, live, settings, poller) = futures::join!(
        dir.send(GetStatus).timeout(PROBE_TIMEOUT),
        live,
        dir.send(GetHealthSettings).timeout(PROBE_TIMEOUT),
        poller
    );
    let live = live.unwrap_or_else(LiveActors::default);
    let escrow_probes = live
        .escrows
        .iter()
        .filter(|_| need_escrows)
        .map(|(id, a)| async move {
            let (snap, repairs) = futures::join!(
                a.send(GetSnapshot).timeout(PROBE_TIMEOUT),
                a.send(GetRepairStates).timeout(PROBE_TIMEOUT)
            );
            let snap = snap.ok().and_then(|s| serde_json::to_value(s).ok());
            let repairs = repairs.ok().map(|r| {
                r.iter()
                    .filter_map(|s| serde_json::to_value(s).ok())
                    .collect()
            });
            (id.clone(), (snap, repairs))
        });
    let participant_probes =
        live.participants
            .iter()
            .filter(|_| need_participants)
            .map(|(address, a)| async move {
                let view = a.send(GetParticipant).timeout(PROBE_TIMEOUT).await.ok();
                (address.to_string(), view)
            });
    let (escrows, participants) =
        futures::join!(join_all(escrow_probes), join_all(participant_probes));
    Probed {
        status: status.ok(),
        settings: settings.ok(),
        escrows: escrows.into_iter().collect(),
        participants: participants.into_iter().collect(),
        poller,
    }
}

/// `entry` with the actor's statistics merged in.
fn with_stats(mut entry: Value, stats: Option<&StatsView>) -> Value {
    if let (Some(o), Some(s)) = (entry.as_object_mut(), stats) {
        o.insert("mailbox_depth".into(), json!(s.mailbox_depth));
        o.insert("messages_enqueued".into(), json!(s.messages_enqueued));
        o.insert("messages_handled".into(), json!(s.messages_handled));
        o.insert("last_message_at".into(), json!(s.last_message_at));
        o.insert("started_at".into(), json!(s.started_at));
        o.insert("timers".into(), json!(s.timers));
    }
    entry
}

fn escrow_entry(id: &str, p: &Probed) -> Value {
    let entity = p.status.as_ref().and_then(|s| {
        s.entities
            .iter()
            .find(|e| e.kind == ActorKind::Escrow && e.id == id)
    });
    let snapshot = p.escrows.get(id).and_then(|(s, _)| s.clone());
    let summary = match (entity, &snapshot) {
        (Some(e), _) if e.failed => "failed",
        (Some(e), _) if !e.alive => "restarting",
        (_, None) => "unresponsive",
        _ => "active",
    };
    json!({"kind": "escrow", "id": id, "state": summary,
        "alive": entity.is_none_or(|e| e.alive), "restarts": entity.map(|e| e.restarts),
        "in_flight": entity.map(|e| e.in_flight), "detail": snapshot})
}

fn repair_entry(s: &StatsView, p: &Probed) -> Value {
    let escrow = s.labels.get("escrow").map_or("", String::as_str);
    let participant = s.labels.get("participant").map_or("", String::as_str);
    let detail = p
        .escrows
        .get(escrow)
        .and_then(|(_, r)| r.as_ref())
        .and_then(|r| r.iter().find(|d| d["participant"] == participant).cloned());
    let summary = match &detail {
        Some(d) if d["gave_up"].as_bool() == Some(true) => "gave_up",
        Some(_) => "repairing",
        None => "unresponsive",
    };
    json!({"kind": "repair", "id": s.id, "state": summary, "alive": true, "detail": detail})
}

fn participant_entry(id: &str, p: &Probed, now: i64) -> Value {
    let entity = p.status.as_ref().and_then(|s| {
        s.entities
            .iter()
            .find(|e| e.kind == ActorKind::Participant && e.id == id)
    });
    let view = p.participants.get(id).and_then(Option::as_ref);
    let settings = p.settings.clone().unwrap_or_default();
    json!({"kind": "participant", "id": id,
        "state": view.map_or("unresponsive", |v| v.state),
        "alive": entity.is_none_or(|e| e.alive), "restarts": entity.map(|e| e.restarts),
        "detail": view.map(|v| participant_json(v, &settings, now))})
}

fn entry(s: &StatsView, p: &Probed, races: usize, now: i64) -> Value {
    let e = match s.kind {
        Kind::Directory => {
            let escrows = p.status.as_ref().map(|st| {
                st.entities
                    .iter()
                    .filter(|e| e.kind == ActorKind::Escrow)
                    .count()
            });
            json!({"kind": "directory", "id": s.id,
                "state": if p.status.is_some() { "running" } else { "unresponsive" },
                "alive": true, "escrows": escrows, "races_in_flight": races})
        }
        Kind::Escrow => escrow_entry(&s.id, p),
        Kind::Participant => participant_entry(&s.id, p, now),
        Kind::Race => json!({"kind": "race", "id": s.id, "state": "racing", "alive": true,
            "detail": {"escrow": s.labels.get("escrow"), "request_id": s.labels.get("request_id")}}),
        Kind::Repair => repair_entry(s, p),
        Kind::ChainPoller => json!({"kind": "chain_poller", "id": s.id,
            "state": if p.poller.is_some() { "polling" } else { "unresponsive" },
            "alive": true, "detail": p.poller}),
    };
    with_stats(e, Some(s))
}

fn kind_rank(v: &Value) -> usize {
    const ORDER: [&str; 9] = [
        "limiter",
        "directory",
        "escrow",
        "settlement",
        "rotation",
        "repair",
        "participant",
        "race",
        "chain_poller",
    ];
    let k = v["kind"].as_str().unwrap_or_default();
    ORDER.iter().position(|o| *o == k).unwrap_or(ORDER.len())
}

/// Every actor (see the module docs); `kind` limits the probes to what that kind needs.
async fn all_actors(state: &AppState, kind: Option<&str>) -> Vec<Value> {
    let settlements = async {
        if kind.is_none_or(|k| k == "settlement") {
            super::debug_settlement::entries(state).await
        } else {
            Vec::new()
        }
    };
    let rotation = async {
        if kind.is_none_or(|k| k == "rotation") {
            super::escrow_create::debug_entries(state).await
        } else {
            Vec::new()
        }
    };
    let (probed, settlements, rotation) = futures::join!(probe(state, kind), settlements, rotation);
    let now = state.clock.now_ms();
    // Read after the probes: participants the directory started for them are listed too.
    let all = state.actors.list();
    let races = all.iter().filter(|s| s.kind() == Kind::Race).count();
    let views: Vec<StatsView> = all
        .iter()
        .filter(|s| wants(kind, s.kind()))
        .map(|s| s.view(now))
        .collect();
    let mut out: Vec<Value> = views
        .iter()
        .map(|s| entry(s, &probed, races, now))
        .collect();
    // Entities the directory knows that have no running actor (restarting, failed).
    let running: Vec<(&str, &str)> = views
        .iter()
        .map(|s| (s.kind.as_str(), s.id.as_str()))
        .collect();
    for e in probed.status.iter().flat_map(|s| s.entities.iter()) {
        let k = match e.kind {
            ActorKind::Escrow => Kind::Escrow,
            ActorKind::Participant => Kind::Participant,
            ActorKind::Race => continue,
        };
        if wants(kind, k) && !running.contains(&(k.as_str(), e.id.as_str())) {
            out.push(match k {
                Kind::Escrow => escrow_entry(&e.id, &probed),
                _ => participant_entry(&e.id, &probed, now),
            });
        }
    }
    out.extend(settlements);
    out.extend(rotation);
    if kind.is_none_or(|k| k == "limiter") {
        out.push(limiter_entry(state));
    }
    out.sort_by(|a, b| {
        kind_rank(a)
            .cmp(&kind_rank(b))
            .then_with(|| a["id"].as_str().cmp(&b["id"].as_str()))
    });
    out
}

/// The edge limiter's entry (no actor: shared state read under its lock).
fn limiter_entry(state: &AppState) -> Value {
    let v = state.overload.view();
    let status = if !v.enabled {
        "disabled"
    } else if v.queued > 0 {
        "queueing"
    } else {
        "open"
    };
    json!({"kind": "limiter", "id": "edge", "state": status, "alive": true, "detail": v})
}

/// `GET /v1/debug/actors`.
pub async fn actors(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let kind = query_param(&req, "kind");
    let wanted_state = query_param(&req, "state");
    let data: Vec<Value> = all_actors(&state, kind)
        .await
        .into_iter()
        .filter(|a| kind.is_none_or(|k| a["kind"] == k))
        .filter(|a| wanted_state.is_none_or(|s| a["state"] == s))
        .collect();
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": data})))
}

/// `GET /v1/debug/actors/{kind}/{id}`.
pub async fn actor(
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let (kind, id) = path.into_inner();
    if kind == "escrow" {
        return Ok(HttpResponse::Ok().json(escrow_detail(&state, &id).await?));
    }
    let mut found = all_actors(&state, Some(&kind))
        .await
        .into_iter()
        .find(|a| a["kind"] == kind.as_str() && a["id"] == id.as_str())
        .ok_or_else(|| ApiError::NotFound(format!("no {kind} actor with id {id}")))?;
    if kind == "race" {
        found["detail"] = race_detail(&state, &id).await;
    }
    Ok(HttpResponse::Ok().json(found))
}

/// A race's attempts with their timings and its hedge decision, asked with a deadline (the
/// listing shows only its escrow and request id: races are many and short-lived).
async fn race_detail(state: &AppState, id: &str) -> Value {
    let describer = state
        .actors
        .list()
        .into_iter()
        .find(|s| s.kind() == Kind::Race && s.id() == id)
        .and_then(|s| s.describer());
    match describer {
        Some(r) => match r.send(Describe).timeout(PROBE_TIMEOUT).await {
            Ok(view) => view,
            Err(_) => json!({"state": "unresponsive"}),
        },
        None => json!({"state": "ended"}),
    }
}

/// `GET /v1/debug/escrows/{id}`.
pub async fn escrow(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(escrow_detail(&state, &path.into_inner()).await?))
}
