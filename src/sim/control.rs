//! The control API, served next to the chain API so external tools can drive the simulator.
//!
//! | route | effect |
//! |---|---|
//! | `GET /sim/hosts` | `[{index, address, url, up, faults, fault_script, latency, counters}]` |
//! | `PUT /sim/hosts/{i}/faults` | a fault set or an array of sets (script); replaces the host's faults |
//! | `DELETE /sim/hosts/{i}/faults` | clears them |
//! | `PUT /sim/faults` / `DELETE /sim/faults` | the same for every host |
//! | `PUT /sim/hosts/{i}/latency` | replaces the host's latency profile |
//! | `GET /sim/hosts/{i}/sessions/{escrow}` | the host's nonce, roots, mempool size, signed nonces, open (pending/started) inferences, each slot's cost |
//! | `GET /sim/hosts/{i}/forgotten/{escrow}` | what the host held of the escrow when it last restarted empty (`forget_session`): `latest_nonce`, `forked_at`, `host_costs` |
//! | `GET /sim/escrows` | every escrow the chain holds: `[{id, max_nonce, status}]`, `status` `open` or `settled` with the tx, final nonce, fees, refund and what each validator address was `paid` |
//! | `GET /sim/escrows/{id}` | the chain's escrow record (creator, slots, amount, session config) |
//! | `GET /sim/chain/requests` | request counts per path / client / server and the last 1 000 requests |
//! | `POST /sim/chain/requests/reset` | clears the request log |
//! | `GET/PUT/DELETE /sim/chain/faults` | the chain API's faults ([`ChainFaults`]: fixed answer, nginx-style rate limit) |
//! | `GET/PUT/DELETE /sim/chain/tx-faults` | the settlement tx knobs ([`TxFaults`]): `broadcast_delay_ms` + `delay_times` (the broadcast times out but the tx commits), `reject_code` + `reject_times` (code ≠ 0), `drop_times` (dropped from the mempool), `commit_delay_ms`, `min_fee` |
//! | `POST /sim/chain/unreachable` | `{"for_ms": N, "after_ms": M}`: the chain port closes `M` ms from now (default 100, so this answer gets out) and reopens `N` ms later (connection refused meanwhile, for the control API too) |
//! | `/sim/warm/…` | warm-key grants and the grants endpoint's faults (`warm.rs`) |
//!
//! Unknown knobs or bad JSON answer 400 `{"message": …}`; an unknown host 404.

use devshard_actors::protocol::state::InferenceStatus;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::{
    faults::{parse_fault_script, Faults},
    host::HostState,
    ledger::TxFaults,
    network::NetCore,
    profile::LatencyProfile,
    server::{self, Reject, Resp},
    traffic::ChainFaults,
};

/// Body of `POST /sim/chain/unreachable`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Outage {
    for_ms: u64,
    #[serde(default = "default_after_ms")]
    after_ms: u64,
}

fn default_after_ms() -> u64 {
    100
}

/// Closes the chain port after `after_ms` for `for_ms` (a background task on this runtime).
fn chain_outage(core: &NetCore, o: Outage) -> Resp {
    let Some(listener) = core.chain_listener.get().cloned() else {
        return server::message(StatusCode::SERVICE_UNAVAILABLE, "chain listener not ready");
    };
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(o.after_ms)).await;
        if let Some(l) = listener.upgrade() {
            l.set_up(false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(o.for_ms)).await;
        if let Some(l) = listener.upgrade() {
            l.set_up(true);
        }
    });
    server::json(
        StatusCode::OK,
        &json!({"unreachable_in_ms": o.after_ms, "for_ms": o.for_ms}),
    )
}

fn host_json(h: &HostState) -> Value {
    json!({
        "index": h.index,
        "address": h.key.address(),
        "warm_key": h.warm_key.as_ref().map(|k| k.address()),
        "url": h.url,
        "up": h.listener().is_some_and(|l| l.is_up()),
        "faults": h.faults(),
        "fault_script": h.script(),
        "latency": h.latency(),
        "counters": h.counters.snapshot(),
    })
}

fn bad_request(e: impl std::fmt::Display) -> Resp {
    server::message(StatusCode::BAD_REQUEST, &e.to_string())
}

async fn read_script(req: Request<Incoming>) -> Result<Vec<Faults>, Reject> {
    let body = server::read_body(req).await?;
    parse_fault_script(&body).map_err(|e| Reject::new(StatusCode::BAD_REQUEST, e.to_string()))
}

pub(crate) async fn handle(core: &NetCore, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    let parts: Vec<&str> = path.split('/').skip(2).collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["hosts"]) => {
            let list: Vec<Value> = core.hosts.iter().map(|h| host_json(h)).collect();
            server::json(StatusCode::OK, &list)
        }
        (&Method::PUT, ["faults"]) => match read_script(req).await {
            Ok(script) => {
                for h in &core.hosts {
                    h.replace_script(script.clone()).await;
                }
                server::json(
                    StatusCode::OK,
                    &core.hosts.iter().map(|h| host_json(h)).collect::<Vec<_>>(),
                )
            }
            Err(reject) => reject.into_response(),
        },
        (&Method::DELETE, ["faults"]) => {
            for h in &core.hosts {
                h.replace_script(Vec::new()).await;
            }
            server::json(
                StatusCode::OK,
                &core.hosts.iter().map(|h| host_json(h)).collect::<Vec<_>>(),
            )
        }
        (_, ["hosts", index, rest @ ..]) => {
            let Some(host) = index.parse::<usize>().ok().and_then(|i| core.hosts.get(i)) else {
                return server::message(StatusCode::NOT_FOUND, &format!("unknown host {index}"));
            };
            host_route(host, &method, rest, req).await
        }
        (_, ["warm", rest @ ..]) => super::warm_api::control(core, &method, rest, req).await,
        (&Method::GET, ["escrows"]) => {
            let books: Vec<Value> = core
                .chain
                .ledger()
                .escrows
                .iter()
                .map(|(id, b)| json!({"id": id, "max_nonce": b.max_nonce, "status": b.status}))
                .collect();
            server::json(StatusCode::OK, &books)
        }
        (&Method::GET, ["escrows", id]) => match core.chain.escrow(id) {
            Some(e) => server::json(StatusCode::OK, &e),
            None => server::message(StatusCode::NOT_FOUND, "escrow not found"),
        },
        (&Method::GET, ["chain", "faults"]) => server::json(StatusCode::OK, &core.chain.faults()),
        (&Method::PUT, ["chain", "faults"]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            match serde_json::from_slice::<ChainFaults>(&body) {
                Ok(f) => {
                    core.chain.set_faults(f);
                    server::json(StatusCode::OK, &core.chain.faults())
                }
                Err(e) => bad_request(e),
            }
        }
        (&Method::DELETE, ["chain", "faults"]) => {
            core.chain.set_faults(ChainFaults::default());
            server::json(StatusCode::OK, &core.chain.faults())
        }
        (&Method::GET, ["chain", "tx-faults"]) => {
            server::json(StatusCode::OK, &core.chain.ledger().faults)
        }
        (&Method::PUT, ["chain", "tx-faults"]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            match serde_json::from_slice::<TxFaults>(&body) {
                Ok(f) => {
                    let mut ledger = core.chain.ledger();
                    ledger.faults = f;
                    server::json(StatusCode::OK, &ledger.faults)
                }
                Err(e) => bad_request(e),
            }
        }
        (&Method::DELETE, ["chain", "tx-faults"]) => {
            let mut ledger = core.chain.ledger();
            ledger.faults = TxFaults::default();
            server::json(StatusCode::OK, &ledger.faults)
        }
        (&Method::POST, ["chain", "unreachable"]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            match serde_json::from_slice::<Outage>(&body) {
                Ok(o) => chain_outage(core, o),
                Err(e) => bad_request(e),
            }
        }
        (&Method::GET, ["chain", "requests"]) => {
            server::json(StatusCode::OK, &core.chain.requests())
        }
        (&Method::POST, ["chain", "requests", "reset"]) => {
            core.chain.reset_requests();
            server::json(StatusCode::OK, &json!({"reset": true}))
        }
        _ => server::message(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn host_route(
    host: &std::sync::Arc<HostState>,
    method: &Method,
    rest: &[&str],
    req: Request<Incoming>,
) -> Resp {
    match (method, rest) {
        (&Method::GET, []) => server::json(StatusCode::OK, &host_json(host)),
        (&Method::PUT, ["faults"]) => match read_script(req).await {
            Ok(script) => {
                host.replace_script(script).await;
                server::json(StatusCode::OK, &host_json(host))
            }
            Err(reject) => reject.into_response(),
        },
        (&Method::DELETE, ["faults"]) => {
            host.replace_script(Vec::new()).await;
            server::json(StatusCode::OK, &host_json(host))
        }
        (&Method::PUT, ["latency"]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            match serde_json::from_slice::<LatencyProfile>(&body) {
                Ok(l) => {
                    host.set_latency(l);
                    server::json(StatusCode::OK, &host_json(host))
                }
                Err(e) => bad_request(e),
            }
        }
        (&Method::GET, ["sessions", escrow]) => {
            let view = host
                .on_session(escrow, |s| {
                    json!({
                        "latest_nonce": s.sm.latest_nonce(),
                        "state_root": hex::encode(s.reported_root()),
                        "real_root": hex::encode(s.view().real_root),
                        "forked_at": s.forked_at,
                        "mempool_len": s.mempool.len(),
                        "signed_nonces": s.signatures.keys().collect::<Vec<_>>(),
                        "phase": s.sm.phase().as_str(),
                        "balance": s.sm.balance(),
                        "warm_keys": s.sm.warm_keys(),
                        // Each slot's cost in this state (the chaos runner's payout check).
                        "host_costs": s.held()["host_costs"].take(),
                        // Inferences not finished nor timed out (the chaos runner's settlement check).
                        "open_inferences": s.sm.records().filter(|r| matches!(r.status,
                            InferenceStatus::Pending | InferenceStatus::Started))
                            .map(|r| json!({"id": r.inference_id, "status": r.status.as_str(),
                                "started_at": r.started_at, "confirmed_at": r.confirmed_at}))
                            .collect::<Vec<_>>(),
                    })
                })
                .await;
            match view {
                Some(v) => server::json(StatusCode::OK, &v),
                None => server::message(StatusCode::NOT_FOUND, "session not found"),
            }
        }
        (&Method::GET, ["forgotten", escrow]) => match host.forgotten(escrow).await {
            Some(v) => server::json(StatusCode::OK, &v),
            None => server::message(StatusCode::NOT_FOUND, "nothing forgotten of this escrow"),
        },
        _ => server::message(StatusCode::NOT_FOUND, "Not Found"),
    }
}
