//! The Cosmos REST endpoints of the simulated chain (docs/lifecycle.md §3, §6):
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/cosmos/base/tendermint/v1beta1/node_info` | `default_node_info.network` = chain id |
//! | GET | `/cosmos/auth/v1beta1/accounts/{addr}` | `account.account_number` (a string) |
//! | GET | `/cosmos/bank/v1beta1/balances/{addr}` | `balances[{denom, amount}]` |
//! | POST | `/cosmos/tx/v1beta1/txs` | `BROADCAST_MODE_SYNC`: `CheckTx`, `tx_response.code` |
//! | GET | `/cosmos/tx/v1beta1/txs/{hash}` | the committed `tx_response`, or 404 |
//!
//! Every request passes the chain faults and the request log like the other chain paths; the
//! tx faults ([`TxFaults`](super::ledger::TxFaults)) act on broadcasts.

use std::{sync::Arc, time::Duration};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{json, Value};

use devshard_actors::protocol::{cosmos::tx_hash, crypto::Address};

use super::{
    ledger::{Ledger, MempoolTx, DENOM, SIM_CHAIN_ID},
    network::NetCore,
    server::{self, Resp},
    txs::{self, TxError},
};

const ACCOUNTS: &str = "/cosmos/auth/v1beta1/accounts/";
const BALANCES: &str = "/cosmos/bank/v1beta1/balances/";
const TXS: &str = "/cosmos/tx/v1beta1/txs";
const NODE_INFO: &str = "/cosmos/base/tendermint/v1beta1/node_info";

/// True for the paths this module answers.
pub(crate) fn handles(path: &str) -> bool {
    path.starts_with("/cosmos/")
}

#[derive(Deserialize)]
struct BroadcastRequest {
    #[serde(default)]
    tx_bytes: String,
    #[serde(default)]
    mode: String,
}

/// Routes one `/cosmos/…` request (body read first, then the chain gate, then the answer).
pub(crate) async fn route(core: Arc<NetCore>, req: Request<Incoming>, client: String) -> Resp {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let body = match server::read_body(req).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    let mut delay_ms = 0;
    let resp = core.chain.serve("chain", &path, &client, || {
        answer(&core, &method, &path, &body, &mut delay_ms)
    });
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    resp
}

fn answer(core: &NetCore, method: &Method, path: &str, body: &[u8], delay_ms: &mut u64) -> Resp {
    let mut ledger = core.chain.ledger();
    if method == Method::POST && path == TXS {
        let now_ms = core.chain.now_ms();
        let height = core.chain.epoch_view().block_height;
        let (resp, delay) = broadcast(&mut ledger, body, now_ms, height);
        *delay_ms = delay;
        return resp;
    }
    if method != Method::GET {
        return server::message(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    if path == NODE_INFO {
        return server::json(
            StatusCode::OK,
            &json!({"default_node_info": {"network": SIM_CHAIN_ID, "moniker": "devshard-sim"},
                    "application_version": {"name": "inferenced", "version": "sim"}}),
        );
    }
    if let Some(addr) = path.strip_prefix(ACCOUNTS) {
        return match ledger.accounts.get(&Address::unchecked(addr)) {
            Some(a) => server::json(
                StatusCode::OK,
                &json!({"account": {
                    "@type": "/cosmos.auth.v1beta1.BaseAccount",
                    "address": a.address,
                    "pub_key": null,
                    "account_number": a.account_number.to_string(),
                    "sequence": "0",
                }}),
            ),
            None => grpc_not_found(&format!("account {addr} not found")),
        };
    }
    if let Some(addr) = path.strip_prefix(BALANCES) {
        let balance = ledger.balance(&Address::unchecked(addr));
        return server::json(
            StatusCode::OK,
            &json!({"balances": [{"denom": DENOM, "amount": balance.to_string()}],
                    "pagination": {"next_key": null, "total": "1"}}),
        );
    }
    if let Some(hash) = path.strip_prefix(TXS).and_then(|p| p.strip_prefix('/')) {
        return match ledger.committed.get(&hash.to_ascii_uppercase()) {
            Some(r) => server::json(
                StatusCode::OK,
                &json!({"tx": null, "tx_response": {
                    "height": r.height.to_string(),
                    "txhash": r.hash,
                    "code": r.code,
                    "codespace": r.codespace,
                    "raw_log": r.raw_log,
                    "events": r.events,
                }}),
            ),
            None => grpc_not_found(&format!("tx not found: {hash}")),
        };
    }
    grpc_not_found("Not Found")
}

fn grpc_not_found(message: &str) -> Resp {
    server::json(
        StatusCode::NOT_FOUND,
        &json!({"code": 5, "message": message, "details": []}),
    )
}

fn tx_response(hash: &str, code: u32, codespace: &str, log: &str) -> Value {
    json!({"tx_response": {"height": "0", "txhash": hash, "code": code,
                           "codespace": codespace, "raw_log": log}})
}

fn refused(hash: &str, e: &TxError) -> Resp {
    server::json(
        StatusCode::OK,
        &tx_response(hash, e.code(), e.codespace(), &e.to_string()),
    )
}

/// `BROADCAST_MODE_SYNC`: `CheckTx`, then into the mempool. Returns the answer and how long
/// to hold it back (the delay fault).
fn broadcast(ledger: &mut Ledger, body: &[u8], now_ms: i64, height: u64) -> (Resp, u64) {
    let req: BroadcastRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return (bad_request(&format!("invalid broadcast body: {e}")), 0),
    };
    if req.mode != "BROADCAST_MODE_SYNC" && req.mode != "BROADCAST_MODE_ASYNC" {
        return (
            bad_request(&format!("unsupported broadcast mode {:?}", req.mode)),
            0,
        );
    }
    let Ok(bytes) = B64.decode(req.tx_bytes.as_bytes()) else {
        return (bad_request("tx_bytes is not base64"), 0);
    };
    let hash = tx_hash(&bytes);
    let f = &mut ledger.faults;
    if f.reject_times > 0 && f.reject_code != 0 {
        f.reject_times -= 1;
        let code = f.reject_code;
        let body = tx_response(&hash, code, "sdk", "simulated CheckTx rejection");
        return (server::json(StatusCode::OK, &body), 0);
    }
    let delay = if f.delay_times > 0 {
        f.delay_times -= 1;
        f.broadcast_delay_ms
    } else {
        0
    };
    if ledger.seen.contains_key(&hash) || ledger.committed.contains_key(&hash) {
        return (refused(&hash, &TxError::Duplicate(hash.clone())), delay);
    }
    let checked = match txs::check(ledger, &bytes, Some(now_ms.div_euclid(1000))) {
        Ok(c) => c,
        Err(e) => return (refused(&hash, &e), delay),
    };
    if let Some(escrow) = &checked.settles {
        ledger
            .settle_hashes
            .entry(escrow.clone())
            .or_default()
            .insert(hash.clone());
    }
    if ledger.faults.drop_times > 0 {
        ledger.faults.drop_times -= 1;
    } else {
        ledger.seen.insert(hash.clone(), checked.timeout_unix_s);
        let commit_at_ms = now_ms.saturating_add_unsigned(ledger.faults.commit_delay_ms);
        ledger.mempool.push(MempoolTx {
            hash: hash.clone(),
            bytes,
            commit_at_ms,
            timeout_unix_s: checked.timeout_unix_s,
        });
        ledger.advance(now_ms, height);
    }
    (
        server::json(StatusCode::OK, &tx_response(&hash, 0, "", "")),
        delay,
    )
}

fn bad_request(message: &str) -> Resp {
    server::json(
        StatusCode::BAD_REQUEST,
        &json!({"code": 3, "message": message, "details": []}),
    )
}
