//! `POST /v1/admin/escrows {"escrow_id": "42", "adopt": true, "model"?, "protocol"?,
//! "key_file"?|"key_env"?}`: adopting a live escrow another gateway served (migration), so this
//! gateway resumes its session at the next nonce instead of starting again at nonce 0.
//!
//! The escrow is read from the chain and its creator checked against our key (as a plain
//! registration), the session is rebuilt from the hosts' `GET …/diffs` and made durable
//! (`devshard_actors::escrow::adopt` has the rules and the quorum), then the escrow is
//! registered and its actor restores that log. The answer (201) is the admin view of the
//! escrow plus `adoption`: the adopted nonce, the quorum reached, each host's verified nonce and
//! every rejected diff `{host, nonce, reason, detail}`.
//!
//! | refusal | status, code |
//! |---|---|
//! | `adopt` is not `true`, unknown field | 400 `invalid_value` |
//! | already registered here | 409 `escrow_already_registered` |
//! | created by another key | 400 `escrow_creator_mismatch` |
//! | no chain held by a quorum of hosts | 502 `adopt_no_quorum` (with `rejected`) |
//! | the store holds another log of the escrow | 409 `adopt_store_conflict` |
//!
//! Log stage `escrow_adopted` (one line for the adoption, one warning per rejected diff);
//! metrics `devshard_escrow_adoptions_total{result}` and
//! `devshard_escrow_adopt_rejected_diffs_total{reason}`.

use std::{sync::Arc, time::Duration};

use actix_web::{HttpResponse, HttpResponseBuilder, ResponseError};
use devshard_actors::{
    directory::{AddEscrow, GetWarmChecker},
    escrow::{
        adopt::{self, AdoptError, Adoption, RejectedDiff},
        key::KeySource,
    },
};
use serde::Deserialize;
use serde_json::json;
use slog::{info, warn};

use super::error::ApiError;
use crate::{
    chain::types::de_id,
    escrows,
    state::{AppState, ACTOR_TIMEOUT},
};

/// Per-page timeout of a host's `GET …/diffs`.
const HOST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest an adoption may wait for the directory to register the rebuilt escrow.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Body of an adoption.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdoptBody {
    #[serde(deserialize_with = "de_id")]
    escrow_id: String,
    adopt: bool,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    key_env: Option<String>,
}

/// Whether a `POST /v1/admin/escrows` body asks for an adoption (`"adopt"` present).
pub fn is_adoption(raw: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(raw)
        .is_ok_and(|v| v.get("adopt").is_some_and(|a| !a.is_null()))
}

/// The `result` label of an adoption's answer.
fn result_label(res: &Result<HttpResponse, ApiError>) -> &'static str {
    match res {
        Ok(_) => "adopted",
        Err(ApiError::Adopt(AdoptError::NoQuorum { .. })) => "no_quorum",
        Err(_) => "refused",
    }
}

/// The adoption (see the module docs). A refusal for want of a quorum also lists the rejected
/// diffs (`rejected`, beside the OpenAI `error`).
pub async fn adopt(state: &AppState, raw: &[u8]) -> Result<HttpResponse, ApiError> {
    let res = run(state, raw).await;
    state
        .metrics
        .adoptions
        .with_label_values(&[result_label(&res)])
        .inc();
    let rejected = match &res {
        Err(ApiError::Adopt(AdoptError::NoQuorum { report, .. })) => {
            report_rejected(state, report);
            json!(report)
        }
        _ => return res,
    };
    match res {
        Err(e) => {
            warn!(state.log, "escrow not adopted"; "stage" => "escrow_adopted", "error" => %e);
            let mut body = e.body();
            body["rejected"] = rejected;
            Ok(HttpResponseBuilder::new(e.status_code()).json(body))
        }
        ok => ok,
    }
}

async fn run(state: &AppState, raw: &[u8]) -> Result<HttpResponse, ApiError> {
    let body: AdoptBody = serde_json::from_slice(raw).map_err(|e| {
        ApiError::invalid(
            "adopt",
            "invalid_value",
            format!("expected {{\"escrow_id\": \"<id>\", \"adopt\": true, \"model\"?, \"protocol\"?, \"key_file\"?|\"key_env\"?}}: {e}"),
        )
    })?;
    if !body.adopt {
        return Err(ApiError::invalid(
            "adopt",
            "invalid_value",
            "\"adopt\" must be true (leave it out to register an escrow without its history)",
        ));
    }
    let id = body.escrow_id.trim();
    let protocol = escrows::requested_protocol(id, body.protocol.as_deref())?;
    if escrows::statuses(&state.directory)
        .await?
        .iter()
        .any(|e| e.id == id)
    {
        return Err(ApiError::EscrowConflict {
            code: "escrow_already_registered",
            message: format!(
                "escrow {id} is already registered on this gateway: adopting it again would \
                 fork its session (its diffs are here already)"
            ),
        });
    }
    let key = KeySource::from_fields(body.key_file.as_deref(), body.key_env.as_deref())
        .map_err(|m| ApiError::invalid("key_file", "invalid_value", m))?;
    let info = escrows::lookup(
        &state.chain,
        &state.signer,
        &state.polling,
        id,
        body.model.as_deref(),
        protocol,
        key.as_ref(),
    )
    .await?;
    let warm = state
        .directory
        .send(GetWarmChecker)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let adoption = adopt::rebuild(Arc::new(info.clone()), &warm, HOST_TIMEOUT).await?;
    report_rejected(state, &adoption.rejected);
    adopt::persist(&state.store, &adoption).await?;
    state
        .directory
        .send(AddEscrow {
            info: info.clone(),
            key,
        })
        .timeout(REGISTER_TIMEOUT)
        .await??;
    info!(state.log, "escrow adopted from the hosts' diffs"; "stage" => "escrow_adopted",
        "escrow" => id, "nonce" => adoption.nonce(), "weight" => adoption.weight,
        "threshold" => adoption.threshold, "rejected" => adoption.rejected.len());
    let status = escrows::statuses(&state.directory).await?;
    let s = status.iter().find(|e| e.id == id);
    let mut summary = escrows::summary(&state.directory, &info, s).await;
    summary["adoption"] = report(&adoption);
    Ok(HttpResponse::Created().json(summary))
}

/// The `adoption` field of the answer.
fn report(a: &Adoption) -> serde_json::Value {
    json!({
        "nonce": a.nonce(),
        "next_nonce": a.nonce().saturating_add(1),
        "quorum": {"weight": a.weight, "threshold": a.threshold},
        "hosts": a.hosts,
        "rejected": a.rejected,
    })
}

/// One warning and one count per rejected diff.
fn report_rejected(state: &AppState, rejected: &[RejectedDiff]) {
    for r in rejected {
        state
            .metrics
            .adopt_rejected
            .with_label_values(&[r.reason.as_str()])
            .inc();
        warn!(state.log, "diff served by a host rejected by the adoption";
            "stage" => "escrow_adopted", "host" => r.host.as_str(), "nonce" => r.nonce,
            "reason" => r.reason.as_str(), "detail" => &r.detail);
    }
}
