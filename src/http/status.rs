//! `GET /v1/status` (public, no secrets): the Go gateway's **gateway-mode** shape,
//! `{mode, runtimes, devshards[], limiter, capacity}`,
//! with only the fields this gateway can fill honestly — a field it has no figure for (input-token
//! limits, weight scale factors, protocol version) is omitted, not faked. Unlike the Go gateway the
//! shape does not change with the number of escrows: scripts always get the gateway mode.
//!
//! - `devshards[]`: `{id, model, active, phase, nonce, balance, active_requests, chain_phase,
//!   confirmation_poc_phase, requests_blocked, block_reason}` from each escrow's live snapshot and
//!   the chain poller's view (`phase`/`nonce`/`balance` absent when the actor did not answer).
//! - `limiter`: `{in_flight_requests, max_concurrent_requests, effective_max_concurrent_requests,
//!   queued_requests}`: races in flight, the hard ceiling `max_concurrent_races`, the adaptive
//!   limit on races starting (`crate::overload`) and the requests waiting for it.
//! - `capacity`: `{host_count, available_host_count, unavailable_host_count, total_weight,
//!   current_weight, lost_weight, available_percent, lost_percent, escrow_weights, models{…}}`,
//!   where a host is available when its health state routes it.

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{web, HttpResponse};
use devshard_actors::{
    chain::{admission, Admission, PhaseKind},
    directory::{GetEscrow, ListParticipants},
    escrow::messages::GetSnapshot,
};
use serde_json::{json, Map, Value};

use super::error::ApiError;
use crate::{
    escrows,
    state::{AppState, ACTOR_TIMEOUT, SNAPSHOT_TIMEOUT},
};

/// Percent of `part` in `whole` with two decimals (100 when `whole` is 0).
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 100.0;
    }
    (part as f64 * 10_000.0 / whole as f64).round() / 100.0
}

/// One model's escrows and their distinct hosts (a host shared by two escrows counts once).
#[derive(Debug, Default)]
struct ModelCapacity {
    active: usize,
    routable: usize,
    /// Address → (weight, routable).
    hosts: BTreeMap<String, (u64, bool)>,
}

fn block_reason(kind: PhaseKind) -> &'static str {
    match kind {
        PhaseKind::ConfirmationPoC => "confirmation_poc",
        PhaseKind::PoC | PhaseKind::Inference => "poc",
    }
}

/// `GET /v1/status` (see the module docs).
pub async fn status(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let off = state
        .deactivated
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let statuses = escrows::statuses(&state.directory).await?;
    let views = state
        .directory
        .send(ListParticipants)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let routable: BTreeMap<String, bool> = views
        .iter()
        .map(|v| (v.address.to_string(), v.routable))
        .collect();
    let chain = state.polling.view();
    let mode = state.polling.settings().poc_request_mode;
    let now = state.clock.now_ms();
    let (chain_phase, cpoc) = match chain.as_ref().and_then(|c| c.epoch.as_ref()) {
        Some(e) => (
            Some(e.info.phase.as_str().to_string()),
            e.info
                .confirmation_poc
                .map(|(p, _)| serde_json::to_value(p).unwrap_or(Value::Null)),
        ),
        None => (None, None),
    };

    let mut devshards = Vec::with_capacity(statuses.len());
    let mut hosts: BTreeMap<String, u64> = BTreeMap::new();
    let mut escrow_weights = Map::new();
    let mut models: BTreeMap<String, ModelCapacity> = BTreeMap::new();
    for s in &statuses {
        let Some(info) = escrows::stored_info(&state.store, &s.id)? else {
            continue;
        };
        let active = !off.contains(&s.id) && s.alive && !s.failed;
        let weight: u64 = info.hosts.iter().map(|h| h.weight).sum();
        let current: u64 = info
            .hosts
            .iter()
            .filter(|h| {
                routable
                    .get(&h.address.to_string())
                    .copied()
                    .unwrap_or(true)
            })
            .map(|h| h.weight)
            .sum();
        for h in &info.hosts {
            hosts.insert(h.address.to_string(), h.weight);
        }
        escrow_weights.insert(s.id.clone(), json!(weight));
        let m = models.entry(info.model.clone()).or_default();
        m.active += usize::from(active);
        m.routable += usize::from(active && current > 0);
        for h in &info.hosts {
            let addr = h.address.to_string();
            let up = routable.get(&addr).copied().unwrap_or(true);
            m.hosts.insert(addr, (h.weight, up));
        }

        let snapshot = match state
            .directory
            .send(GetEscrow {
                escrow_id: s.id.clone(),
            })
            .timeout(SNAPSHOT_TIMEOUT)
            .await
        {
            Ok(Some(addr)) => addr.send(GetSnapshot).timeout(SNAPSHOT_TIMEOUT).await.ok(),
            _ => None,
        };
        let mut d = Map::new();
        d.insert("id".into(), json!(s.id));
        d.insert("model".into(), json!(info.model));
        d.insert("active".into(), json!(active));
        if let Some(snap) = &snapshot {
            d.insert("phase".into(), json!(snap.phase));
            d.insert("nonce".into(), json!(snap.nonce));
            d.insert("balance".into(), json!(snap.balance));
        }
        d.insert("active_requests".into(), json!(s.in_flight));
        if let Some(p) = &chain_phase {
            d.insert("chain_phase".into(), json!(p));
        }
        if let Some(c) = &cpoc {
            d.insert("confirmation_poc_phase".into(), c.clone());
        }
        let refused = chain
            .as_ref()
            .map(|c| admission(c, mode, &info.model, now))
            .and_then(|a| match a {
                Admission::Refuse { phase, .. } => Some(phase),
                _ => None,
            });
        d.insert("requests_blocked".into(), json!(refused.is_some()));
        if let Some(kind) = refused {
            d.insert("block_reason".into(), json!(block_reason(kind)));
        }
        devshards.push(Value::Object(d));
    }

    let total: u64 = hosts.values().sum();
    let available: BTreeSet<&String> = hosts
        .keys()
        .filter(|a| routable.get(*a).copied().unwrap_or(true))
        .collect();
    let current: u64 = available.iter().map(|a| hosts[*a]).sum();
    let per_model: Map<String, Value> = models
        .into_iter()
        .map(|(m, c)| {
            let (active, routable_n) = (c.active, c.routable);
            let weight: u64 = c.hosts.values().map(|(w, _)| w).sum();
            let cur: u64 = c.hosts.values().filter(|(_, up)| *up).map(|(w, _)| w).sum();
            let access = serde_json::to_value(state.access.mode(&m)).unwrap_or(Value::Null);
            (
                m,
                json!({
                    "full_weight": weight, "current_weight": cur,
                    "lost_weight": weight.saturating_sub(cur),
                    "available_percent": percent(cur, weight),
                    "lost_percent": 100.0 - percent(cur, weight),
                    "active_devshards": active, "routable_devshards": routable_n,
                    "routable": routable_n > 0, "access_enabled": true, "access_mode": access,
                }),
            )
        })
        .collect();
    let max = state.limits.max_concurrent_races;
    let in_flight = max.saturating_sub(state.races.available_permits());
    let limiter = state.overload.view();
    Ok(HttpResponse::Ok().json(json!({
        "mode": "gateway",
        "runtimes": devshards.len(),
        "devshards": devshards,
        "limiter": {
            "in_flight_requests": in_flight,
            "max_concurrent_requests": max,
            "effective_max_concurrent_requests": limiter.limit,
            "queued_requests": limiter.queued,
        },
        "capacity": {
            "host_count": hosts.len(),
            "available_host_count": available.len(),
            "unavailable_host_count": hosts.len() - available.len(),
            "full_weight": total,
            "current_weight": current,
            "lost_weight": total.saturating_sub(current),
            "available_percent": percent(current, total),
            "lost_percent": 100.0 - percent(current, total),
            "escrow_weights": escrow_weights,
            "models": per_model,
        },
    })))
}
