//! The chain as the gateway sees it: the public API (`/v1/epochs/…`), the chain REST queries
//! (`/productscience/inference/inference/…`) and a request log for rate tests.
//!
//! Public-API integers are JSON numbers; chain REST `uint64`s are JSON strings (grpc-gateway).
//! An unknown escrow answers `{"found": false}`; an unknown participant a grpc-gateway 404.
//! Every request to a chain path (and every miner `GET /v1/versions`) passes the chain faults
//! and is logged ([`super::traffic`]).

use std::sync::{Mutex, MutexGuard};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use http::{Method, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};

use devshard_actors::{
    clock::SharedClock,
    protocol::{crypto::Address, state::SessionConfig},
};

use super::{
    config::EpochSchedule,
    epoch::{self, EpochView},
    ledger::{EscrowStatus, Ledger},
    server::{self, Resp},
    traffic::{ChainFaults, ChainGate, ChainRequest, ChainRequests},
};

const REST_PREFIX: &str = "/productscience/inference/inference/";

/// An escrow as the chain stores it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EscrowInfo {
    pub escrow_id: String,
    pub creator: Address,
    pub amount: u64,
    /// Validator address of each slot, in slot order.
    pub slots: Vec<Address>,
    pub epoch_index: u64,
    pub session_config: SessionConfig,
    /// Chain nonce limit the hosts enforce (`max_nonce − (N + 1)` while Active).
    pub max_nonce: u64,
}

/// A registered participant (one per host).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParticipantInfo {
    pub index: usize,
    pub address: Address,
    /// Host base URL (`inference_url`).
    pub url: String,
    pub weight: u64,
    /// Base64 of the compressed public key.
    pub validator_key: String,
    pub node_id: String,
    /// The ML node keeps serving during PoC (`timeslot_allocation[1]`, `poc_validation_inference`).
    pub preserved: bool,
}

/// The simulated chain.
#[derive(Debug)]
pub(crate) struct Chain {
    clock: SharedClock,
    start_ms: i64,
    schedule: EpochSchedule,
    model: String,
    participants: Vec<ParticipantInfo>,
    log: Mutex<ChainRequests>,
    gate: Mutex<ChainGate>,
    ledger: Mutex<Ledger>,
}

impl Chain {
    pub(crate) fn new(
        clock: SharedClock,
        schedule: EpochSchedule,
        model: String,
        participants: Vec<ParticipantInfo>,
        ledger: Ledger,
    ) -> Chain {
        let start_ms = clock.now_ms();
        Chain {
            clock,
            start_ms,
            schedule,
            model,
            participants,
            log: Mutex::new(ChainRequests::default()),
            gate: Mutex::new(ChainGate::default()),
            ledger: Mutex::new(ledger),
        }
    }

    /// The ledger with every due mempool tx committed (a poisoned lock is recovered: the
    /// ledger is only changed by complete, checked steps).
    pub(crate) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        let mut l = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let now_ms = self.clock.now_ms();
        l.advance(now_ms, self.epoch_view().block_height);
        l
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// An escrow the chain holds: configured at start or created by a tx.
    pub(crate) fn escrow(&self, id: &str) -> Option<EscrowInfo> {
        self.ledger().escrows.get(id).map(|b| b.info.clone())
    }

    pub(crate) fn participants(&self) -> &[ParticipantInfo] {
        &self.participants
    }

    /// Height, epoch and phase now.
    pub(crate) fn epoch_view(&self) -> EpochView {
        let elapsed = u64::try_from(self.clock.now_ms() - self.start_ms).unwrap_or(0);
        epoch::view_at(&self.schedule, epoch::height_at(&self.schedule, elapsed))
    }

    /// Answers a request to `server` (`chain` or `host-<i>` for `/v1/versions`) through the
    /// chain faults, and logs it.
    pub(crate) fn serve(
        &self,
        server: &str,
        path: &str,
        client: &str,
        answer: impl FnOnce() -> Resp,
    ) -> Resp {
        let now_ms = self.clock.now_ms();
        let rejected = self
            .gate
            .lock()
            .ok()
            .and_then(|mut g| g.check(server, client, now_ms));
        let resp = rejected.unwrap_or_else(answer);
        let entry = ChainRequest {
            at_ms: now_ms,
            server: server.to_owned(),
            path: path.to_owned(),
            client: client.to_owned(),
            status: resp.status().as_u16(),
        };
        if let Ok(mut log) = self.log.lock() {
            log.record(entry);
        }
        resp
    }

    pub(crate) fn faults(&self) -> ChainFaults {
        self.gate.lock().map(|g| g.faults()).unwrap_or_default()
    }

    pub(crate) fn set_faults(&self, faults: ChainFaults) {
        if let Ok(mut g) = self.gate.lock() {
            g.set(faults);
        }
    }

    pub(crate) fn requests(&self) -> ChainRequests {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub(crate) fn reset_requests(&self) {
        if let Ok(mut log) = self.log.lock() {
            *log = ChainRequests::default();
        }
    }

    /// Answers a chain path (already logged by the caller).
    pub(crate) fn handle(&self, method: &Method, path: &str) -> Resp {
        if method != Method::GET {
            return server::message(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        }
        if path == "/v1/epochs/latest" {
            let view = self.epoch_view();
            return server::json(StatusCode::OK, &epoch::latest_json(&self.schedule, &view));
        }
        if path == "/v1/epochs/current/participants" {
            return server::json(StatusCode::OK, &self.participants_json());
        }
        match path.strip_prefix(REST_PREFIX) {
            Some("params") => server::json(StatusCode::OK, &self.params_json()),
            Some(rest) => {
                if let Some(id) = rest.strip_prefix("devshard_escrow/") {
                    return server::json(StatusCode::OK, &self.escrow_json(id));
                }
                if let Some(addr) = rest.strip_prefix("participant/") {
                    return self.participant_response(addr);
                }
                not_found()
            }
            None => not_found(),
        }
    }

    fn participants_json(&self) -> Value {
        let view = self.epoch_view();
        let list: Vec<Value> = self
            .participants
            .iter()
            .map(|p| {
                json!({
                    "index": p.address,
                    "validator_key": p.validator_key,
                    "weight": p.weight,
                    "inference_url": p.url,
                    "models": [self.model],
                    "ml_nodes": [{"ml_nodes": [{
                        "node_id": p.node_id,
                        "timeslot_allocation": [true, p.preserved],
                        "poc_weight": p.weight,
                    }]}],
                })
            })
            .collect();
        json!({
            "active_participants": {
                "participants": list,
                "epoch_group_id": view.epoch_index,
                "poc_start_block_height": view.poc_start,
                "created_at_block_height": view.poc_start + self.schedule.poc_blocks(),
            },
            "block_height": view.block_height,
        })
    }

    fn params_json(&self) -> Value {
        // Every escrow shares one config; report the first (defaults when there is none).
        let first = self
            .ledger()
            .escrows
            .values()
            .next()
            .map(|b| b.info.clone());
        let cfg = first.as_ref().map(|e| (&e.session_config, e.slots.len()));
        let (refusal, execution, rate, factor) = match cfg {
            Some((c, n)) => {
                let factor = if c.vote_threshold as usize == n / 2 {
                    0
                } else {
                    u64::from(c.vote_threshold) * 100 / n.max(1) as u64
                };
                (
                    c.refusal_timeout,
                    c.execution_timeout,
                    c.validation_rate,
                    factor,
                )
            }
            None => (60, 1200, 5000, 0),
        };
        json!({"params": {"devshard_escrow_params": {
            "refusal_timeout": refusal.to_string(),
            "execution_timeout": execution.to_string(),
            "validation_rate": rate.to_string(),
            "vote_threshold_factor": factor.to_string(),
        }}})
    }

    fn escrow_json(&self, id: &str) -> Value {
        let Some((e, status)) = self
            .ledger()
            .escrows
            .get(id)
            .map(|b| (b.info.clone(), b.status.clone()))
        else {
            return json!({"found": false});
        };
        let c = &e.session_config;
        let settled = status != EscrowStatus::Open;
        let app_hash = hex::encode_upper(devshard_actors::protocol::crypto::sha256(id.as_bytes()));
        json!({"found": true, "escrow": {
            "id": e.escrow_id,
            "creator": e.creator,
            "amount": e.amount.to_string(),
            "slots": e.slots,
            "epoch_index": e.epoch_index.to_string(),
            "app_hash": app_hash,
            "settled": settled,
            "max_nonce": e.max_nonce.to_string(),
            "token_price": c.token_price.to_string(),
            "create_devshard_fee": c.create_devshard_fee.to_string(),
            "fee_per_nonce": c.fee_per_nonce.to_string(),
            "inference_seal_grace_nonces": c.inference_seal_grace_nonces.to_string(),
            "inference_seal_grace_seconds": c.inference_seal_grace_seconds.to_string(),
            "auto_seal_every_n_nonces": c.auto_seal_every_n_nonces.to_string(),
            // Simulator extension: the exact frozen config every host uses.
            "session_config": c,
        }})
    }

    fn participant_response(&self, addr: &str) -> Resp {
        match self
            .participants
            .iter()
            .find(|p| p.address.as_str() == addr)
        {
            Some(p) => server::json(
                StatusCode::OK,
                &json!({"participant": {
                    "index": p.address,
                    "address": p.address,
                    "inference_url": p.url,
                    "validator_key": p.validator_key,
                    "weight": p.weight.to_string(),
                    "status": "ACTIVE",
                }}),
            ),
            None => server::json(
                StatusCode::NOT_FOUND,
                &json!({"code": 5, "message": "participant not found", "details": []}),
            ),
        }
    }
}

fn not_found() -> Resp {
    server::json(
        StatusCode::NOT_FOUND,
        &json!({"code": 5, "message": "Not Found", "details": []}),
    )
}

/// Base64 of a compressed public key.
pub(crate) fn pubkey_b64(compressed: &[u8]) -> String {
    B64.encode(compressed)
}
