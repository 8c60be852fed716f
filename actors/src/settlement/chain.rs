//! The chain REST calls of a settlement (docs/lifecycle.md §3), over the same per-thread awc client
//! as every other chain and host call: the chain id (`node_info`), the account number, a
//! `BROADCAST_MODE_SYNC` broadcast, the tx lookup and the escrow's `settled` flag. Answers are
//! classified once, here, into the typed outcomes the state machine decides on.

use std::time::Duration;

use awc::error::SendRequestError;
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::machine::{BroadcastOutcome, Confirmation};
use crate::protocol::crypto::Address;

/// Largest answer read.
const MAX_BODY: usize = 1024 * 1024;
/// Code of "tx already in the mempool cache" (the same bytes were seen).
const CODE_DUPLICATE: u32 = 19;

/// Why a chain query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainTxError {
    #[error("chain {url} unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("chain {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("chain answer of {url} not understood: {reason}")]
    Decode { url: String, reason: String },
    #[error("account {0} does not exist on the chain")]
    NoAccount(String),
}

/// A chain REST endpoint and the timeout of each call.
#[derive(Debug, Clone)]
pub struct ChainTxClient {
    pub rest_url: String,
    pub timeout: Duration,
}

enum Answer {
    Ok(Bytes),
    NotFound,
}

#[derive(Deserialize)]
struct TxResponseBody {
    tx_response: TxResponse,
}

#[derive(Deserialize)]
struct TxResponse {
    #[serde(default)]
    code: u32,
    #[serde(default)]
    raw_log: String,
    #[serde(default)]
    events: Vec<TxEvent>,
}

/// One event of a committed tx (`tx_response.events[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TxEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub attributes: Vec<TxAttribute>,
}

/// `{key, value}` of an event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TxAttribute {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// A committed tx: its code, log and events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedTx {
    pub code: u32,
    pub log: String,
    pub events: Vec<TxEvent>,
}

impl CommittedTx {
    /// The value of attribute `key` of the first event of type `kind`.
    pub fn attribute(&self, kind: &str, key: &str) -> Option<&str> {
        self.events
            .iter()
            .filter(|e| e.kind == kind)
            .flat_map(|e| &e.attributes)
            .find(|a| a.key == key)
            .map(|a| a.value.as_str())
    }
}

fn excerpt(b: &[u8]) -> String {
    String::from_utf8_lossy(b).chars().take(200).collect()
}

impl ChainTxClient {
    async fn call(&self, path: &str, post: Option<Value>) -> Result<Answer, ChainTxError> {
        let url = format!("{}{path}", self.rest_url.trim_end_matches('/'));
        let c = crate::host::client::client();
        let req = match post {
            Some(_) => c.post(&url),
            None => c.get(&url),
        }
        .insert_header((awc::http::header::ACCEPT, "application/json"))
        .timeout(self.timeout);
        let sent = match post {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        };
        let unreachable = |reason: String| ChainTxError::Unreachable {
            url: url.clone(),
            reason,
        };
        let mut resp = sent.map_err(|e| match e {
            SendRequestError::Timeout => {
                unreachable(format!("no answer within {:?}", self.timeout))
            }
            other => unreachable(other.to_string()),
        })?;
        let status = resp.status().as_u16();
        let body = tokio::time::timeout(self.timeout, resp.body().limit(MAX_BODY))
            .await
            .map_err(|_| unreachable("body not read in time".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        match status {
            200 => Ok(Answer::Ok(body)),
            404 => Ok(Answer::NotFound),
            s if s >= 500 || s == 429 => Err(unreachable(format!("HTTP {s}: {}", excerpt(&body)))),
            s => Err(ChainTxError::Status {
                url,
                status: s,
                body: excerpt(&body),
            }),
        }
    }

    async fn get_json(&self, path: &str) -> Result<Option<Value>, ChainTxError> {
        match self.call(path, None).await? {
            Answer::NotFound => Ok(None),
            Answer::Ok(b) => {
                serde_json::from_slice(&b)
                    .map(Some)
                    .map_err(|e| ChainTxError::Decode {
                        url: path.to_owned(),
                        reason: e.to_string(),
                    })
            }
        }
    }

    fn decode_err(path: &str, what: &str) -> ChainTxError {
        ChainTxError::Decode {
            url: path.to_owned(),
            reason: format!("missing {what}"),
        }
    }

    /// `default_node_info.network`.
    pub async fn chain_id(&self) -> Result<String, ChainTxError> {
        let path = "/cosmos/base/tendermint/v1beta1/node_info";
        let v = self.get_json(path).await?;
        v.as_ref()
            .and_then(|v| v["default_node_info"]["network"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| Self::decode_err(path, "default_node_info.network"))
    }

    /// `account.account_number` (a decimal string on the wire).
    pub async fn account_number(&self, address: &Address) -> Result<u64, ChainTxError> {
        let path = format!("/cosmos/auth/v1beta1/accounts/{address}");
        let v = self
            .get_json(&path)
            .await?
            .ok_or_else(|| ChainTxError::NoAccount(address.to_string()))?;
        let n = &v["account"]["account_number"];
        n.as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| n.as_u64())
            .ok_or_else(|| Self::decode_err(&path, "account.account_number"))
    }

    /// `POST /cosmos/tx/v1beta1/txs` in `BROADCAST_MODE_SYNC`.
    pub async fn broadcast(&self, tx_bytes: &[u8]) -> BroadcastOutcome {
        let body = serde_json::json!({
            "tx_bytes": B64.encode(tx_bytes),
            "mode": "BROADCAST_MODE_SYNC",
        });
        let path = "/cosmos/tx/v1beta1/txs";
        let answer = match self.call(path, Some(body)).await {
            Ok(Answer::Ok(b)) => b,
            Ok(Answer::NotFound) => {
                return BroadcastOutcome::Unknown("broadcast answered 404".into())
            }
            Err(e) => return BroadcastOutcome::Unknown(e.to_string()),
        };
        match serde_json::from_slice::<TxResponseBody>(&answer) {
            Ok(r) if r.tx_response.code == 0 => BroadcastOutcome::Accepted,
            Ok(r) if r.tx_response.code == CODE_DUPLICATE => BroadcastOutcome::Duplicate,
            Ok(r) => BroadcastOutcome::Refused {
                code: r.tx_response.code,
                log: r.tx_response.raw_log,
            },
            Err(e) => BroadcastOutcome::Unknown(format!("broadcast answer: {e}")),
        }
    }

    /// `GET /cosmos/tx/v1beta1/txs/{hash}`.
    pub async fn confirmation(&self, hash: &str) -> Confirmation {
        let path = format!("/cosmos/tx/v1beta1/txs/{hash}");
        match self.call(&path, None).await {
            Ok(Answer::NotFound) => Confirmation::NotFound,
            Ok(Answer::Ok(b)) => match serde_json::from_slice::<TxResponseBody>(&b) {
                Ok(r) => Confirmation::Committed {
                    code: r.tx_response.code,
                    log: r.tx_response.raw_log,
                },
                Err(e) => Confirmation::Unreachable(format!("tx answer: {e}")),
            },
            Err(e) => Confirmation::Unreachable(e.to_string()),
        }
    }

    /// `GET /cosmos/tx/v1beta1/txs/{hash}` with the events (`Ok(None)`: not committed).
    pub async fn committed_tx(&self, hash: &str) -> Result<Option<CommittedTx>, ChainTxError> {
        let path = format!("/cosmos/tx/v1beta1/txs/{hash}");
        match self.call(&path, None).await? {
            Answer::NotFound => Ok(None),
            Answer::Ok(b) => serde_json::from_slice::<TxResponseBody>(&b)
                .map(|r| {
                    Some(CommittedTx {
                        code: r.tx_response.code,
                        log: r.tx_response.raw_log,
                        events: r.tx_response.events,
                    })
                })
                .map_err(|e| ChainTxError::Decode {
                    url: path,
                    reason: e.to_string(),
                }),
        }
    }

    /// The escrow's `settled` flag (`None` when the chain cannot say now).
    pub async fn escrow_settled(&self, escrow_id: &str) -> Option<bool> {
        let path = format!("/productscience/inference/inference/devshard_escrow/{escrow_id}");
        let v = self.get_json(&path).await.ok()??;
        v["escrow"]["settled"].as_bool()
    }
}
