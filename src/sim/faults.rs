//! Fault-injection knobs of a simulated host (docs/protocol.md §8.5 item 7) and per-host counters.
//!
//! A host holds a queue of fault sets ("script"). The first set is active; a set with
//! `times: N` is consumed by the next N `chat/completions` requests (catch-up sends included)
//! and then the next set becomes active; a set without `times` stays until replaced. One-shot
//! actions run when a set becomes active: `down_for_ms` (the listener closes and reopens on the
//! same port), `forget_session` (the host restarts with empty storage). `fork_from_nonce` arms a
//! divergence that survives the set. Everything else is read per request.
//!
//! Knob semantics (names are part of the control API contract):
//!
//! | knob | effect on `chat/completions` |
//! |---|---|
//! | `http_status`, `body`, `retry_after_s` | answer with that status and `{"message": body}` (default texts per status: 401 drift, 403 owner, 404 `Not Found`, 429 `rate limit exceeded`, 500 `escrow not found`, 503 `requests_disabled` with `X-Devshard-Error`); `Retry-After` when `retry_after_s` is set |
//! | `refuse_connections` | the listener is closed while the set is active (connection refused) |
//! | `down_for_ms` | closed for that long from activation, in-flight connections dropped; state survives |
//! | `stall_before_receipt_ms` | extra delay before headers + receipt |
//! | `drop_after_receipt` | receipt event, then the connection is aborted: the chunked body lacks its terminating chunk (awc reports that as a plain end of stream); no finish |
//! | `first_token_delay_ms` | extra delay before the first chunk |
//! | `stall_after_chunks` + `stall_ms` | pause after that many content chunks (forever when `stall_ms` is absent) |
//! | `empty_stream` | receipt, role chunk, `[DONE]`, finish (0 output tokens) and meta |
//! | `error_event` | receipt, the error event (`true` = default OpenAI error JSON, an object = sent as is, a string = its message), `[DONE]`; no finish, no meta |
//! | `truncate_before_done` | the content, then a clean EOF without `[DONE]`/meta; no finish |
//! | `omit_meta` | no meta event; the finish is still put in the mempool |
//! | `garble_meta` | the meta event carries an undecodable mempool (`["!garbled!"]`); the finish is in the mempool |
//! | `late_finish_ms` | the finish is left out of the meta and added to the mempool that many ms later (`-1` never); with `finish_via_peers` it appears in every *other* host's mempool instead |
//! | `withhold_state_sig` | the receipt carries no `state_sig` (nothing stored for `GET /signatures`) |
//! | `wrong_state_hash` | the receipt reports (and signs) a wrong `state_hash`; the stored signature stays correct |
//! | `fork_from_nonce` | the first diff with nonce ≥ K applies, then the host is forked: it reports and signs `sha256(root ‖ "fork")` and rejects every later diff with a root mismatch; clearing the knob does not un-fork, `forget_session` does |
//! | `forget_session` | one-shot: every session is dropped (the host restarted with empty storage) |
//! | `clock_skew_s` | the host's clock is offset (auth drift check, `confirmed_at`, timeout checks) |
//! | `signatures_empty` | `GET /signatures` answers `{"signatures":null}` |
//! | `signatures_wrong_root` | `GET /signatures?nonce=N` answers, for each of the host's slots, a signature by its own key over a wrong root (`sha256("wrong-root" ‖ N)`) at `N`: a forged final-state signature |
//! | `inject_foreign_txs` | the meta event's mempool also carries a `MsgFinalizeRound` and a `MsgStartInference` (txs only the escrow's creator may sequence: a byzantine host) |
//! | `oversize_meta_bytes` | the meta event (after `[DONE]`) carries a `padding` string of that many bytes beside the mempool (a huge meta line) |
//! | `forge_diffs_from_nonce` | `GET …/diffs` serves every stored diff with nonce ≥ K forged: its `post_state_root` replaced by `sha256(root ‖ "forged")` and signed by the host's own key (a host rewriting history cannot sign as the creator); the host's own state is untouched |
//! | `sign_with_ungranted_key` | every signature (receipt, state, finish, validation, timeout vote) is made with a key the chain holds no grant for |

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// One set of fault knobs; every knob defaults to "off".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    #[serde(skip_serializing_if = "is_false")]
    pub refuse_connections: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub drop_after_receipt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_before_receipt_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_token_delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_after_chunks: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_ms: Option<u64>,
    #[serde(skip_serializing_if = "is_false")]
    pub empty_stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_event: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "is_false")]
    pub truncate_before_done: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub omit_meta: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub garble_meta: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_finish_ms: Option<i64>,
    #[serde(skip_serializing_if = "is_false")]
    pub finish_via_peers: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub withhold_state_sig: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub wrong_state_hash: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork_from_nonce: Option<u64>,
    #[serde(skip_serializing_if = "is_false")]
    pub forget_session: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_skew_s: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_for_ms: Option<u64>,
    #[serde(skip_serializing_if = "is_false")]
    pub signatures_empty: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub signatures_wrong_root: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversize_meta_bytes: Option<usize>,
    #[serde(skip_serializing_if = "is_false")]
    pub inject_foreign_txs: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub sign_with_ungranted_key: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forge_diffs_from_nonce: Option<u64>,
    /// Number of `chat/completions` requests this set applies to (absent = until replaced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl Faults {
    /// True when no knob is set.
    pub fn is_empty(&self) -> bool {
        *self == Faults::default()
    }

    /// The default OpenAI error JSON of `error_event: true`.
    pub fn default_error_event() -> serde_json::Value {
        serde_json::json!({"error": {
            "message": "simulated ML node failure",
            "type": "InternalServerError",
            "code": 500
        }})
    }

    /// The error event to stream, if the knob is set (`false`/`null` mean off).
    pub fn error_event_json(&self) -> Option<serde_json::Value> {
        match self.error_event.as_ref()? {
            serde_json::Value::Bool(false) | serde_json::Value::Null => None,
            serde_json::Value::Bool(true) => Some(Faults::default_error_event()),
            serde_json::Value::String(msg) => Some(serde_json::json!({"error": {
                "message": msg, "type": "InternalServerError", "code": 500
            }})),
            other => Some(other.clone()),
        }
    }
}

/// Parses the body of `PUT …/faults`: one set or a script (an array of sets applied in order).
pub fn parse_fault_script(body: &[u8]) -> Result<Vec<Faults>, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(body)?;
    if value.is_array() {
        serde_json::from_value(value)
    } else {
        serde_json::from_value(value).map(|f| vec![f])
    }
}

/// Requests served by one host, per endpoint.
#[derive(Debug, Default)]
pub(crate) struct AtomicCounters {
    pub chat: AtomicU64,
    pub verify_timeout: AtomicU64,
    pub diffs: AtomicU64,
    pub signatures: AtomicU64,
    pub mempool: AtomicU64,
    pub openai: AtomicU64,
    pub versions: AtomicU64,
    pub stragglers: AtomicU64,
}

impl AtomicCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counters {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            chat: r(&self.chat),
            verify_timeout: r(&self.verify_timeout),
            diffs: r(&self.diffs),
            signatures: r(&self.signatures),
            mempool: r(&self.mempool),
            openai: r(&self.openai),
            versions: r(&self.versions),
            stragglers: r(&self.stragglers),
        }
    }
}

/// Snapshot of a host's request counters (`GET /sim/hosts`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub chat: u64,
    pub verify_timeout: u64,
    pub diffs: u64,
    pub signatures: u64,
    pub mempool: u64,
    /// Plain OpenAI `POST /v1/chat/completions`.
    pub openai: u64,
    /// Miner `GET /v1/versions`.
    pub versions: u64,
    /// Requests (devshard or plain OpenAI) the straggler knob stalled before their first token.
    #[serde(default)]
    pub stragglers: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_knob_is_rejected() {
        let err = serde_json::from_str::<Faults>(r#"{"http_stauts":500}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let ok: Faults = serde_json::from_str(r#"{"http_status":503,"times":2}"#).unwrap();
        assert_eq!(ok.http_status, Some(503));
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            serde_json::json!({"http_status":503,"times":2})
        );
    }

    #[test]
    fn script_or_single_set() {
        assert_eq!(
            parse_fault_script(br#"{"omit_meta":true}"#).unwrap().len(),
            1
        );
        let two = br#"[{"omit_meta":true,"times":1},{"empty_stream":true}]"#;
        assert_eq!(parse_fault_script(two).unwrap().len(), 2);
        let err = parse_fault_script(br#"[{"omit_mta":true}]"#).unwrap_err();
        assert!(err.to_string().contains("omit_mta"), "{err}");
    }
}
