//! Escrow registration and the admin view of registered escrows, shared by the admin routes and
//! start-up registration of the escrows listed in the configuration.
//!
//! Registration reads the escrow from the chain ([`ChainClient::lookup_escrow`], which checks
//! that this gateway's key created it) and hands the record to the directory (`AddEscrow`),
//! which persists it before starting the escrow's actor. Registering an escrow that is already
//! registered is a no-op that returns the existing record. The participants (for the escrow's
//! model) come from the chain poller's snapshot, waiting up to [`PARTICIPANTS_WAIT`] for the
//! first one: registering any number of escrows makes no public-API request of its own.
//!
//! The escrow's protocol version (`v2` or `v4.1`) comes from the registration call, else the
//! configuration (`protocol`, or the version `route_prefix` names). A version this gateway does
//! not implement (v5 height sync, v6, the Ristretto line…) is refused at once, before any chain
//! call, with a message naming it and the supported ones: never a silently diverging escrow.

use std::time::Duration;

use devshard_actors::{
    chain::ChainView,
    directory::{AddEscrow, Directory, EntityStatus, GetEscrow, GetEscrowStatuses},
    escrow::{key::KeySource, messages::GetSnapshot, EscrowInfo},
    protocol::{crypto::Address, version::ProtocolVersion},
    stats::TrackedAddr,
    store::{ns, SharedStore, StoreError},
};
use serde_json::{json, Value};
use slog::{error, info, Logger};

use crate::{
    chain::{types::PublicParticipant, ChainClient},
    http::error::ApiError,
    state::{ChainPolling, ACTOR_TIMEOUT, SNAPSHOT_TIMEOUT},
};

/// How long a registration waits for the chain poller's first participants snapshot.
pub const PARTICIPANTS_WAIT: Duration = Duration::from_secs(30);

/// The participants of a chain view, as model discovery reads them.
pub fn listed(view: &ChainView) -> Option<Vec<PublicParticipant>> {
    let snapshot = view.participants.as_ref()?;
    Some(
        snapshot
            .participants
            .values()
            .map(|p| PublicParticipant {
                index: p.address.clone(),
                models: p.models.iter().map(|m| m.model.clone()).collect(),
            })
            .collect(),
    )
}

/// The outcome of a registration.
#[derive(Debug, Clone)]
pub struct Registered {
    pub info: EscrowInfo,
    /// False when the escrow was registered already.
    pub created: bool,
}

/// Status of every registered escrow, from the directory.
pub async fn statuses(directory: &TrackedAddr<Directory>) -> Result<Vec<EntityStatus>, ApiError> {
    Ok(directory
        .send(GetEscrowStatuses)
        .timeout(ACTOR_TIMEOUT)
        .await?)
}

/// A stored escrow record (its registration, or its archive row) that cannot be read; the HTTP
/// edge answers 503 `database_unavailable` while the store reconnects, else 500.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("reading escrow {escrow_id}'s {record}: {source}")]
    Store {
        escrow_id: String,
        record: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("escrow {escrow_id}'s {record} is unreadable: {source}")]
    Unreadable {
        escrow_id: String,
        record: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads and decodes the record `key` of `namespace` (`record` names it in errors).
pub fn read_record<T: serde::de::DeserializeOwned>(
    store: &SharedStore,
    (namespace, record): (&str, &'static str),
    escrow_id: &str,
) -> Result<Option<T>, RecordError> {
    let value = store
        .get(namespace, escrow_id)
        .map_err(|source| RecordError::Store {
            escrow_id: escrow_id.to_owned(),
            record,
            source,
        })?;
    value
        .map(serde_json::from_value)
        .transpose()
        .map_err(|source| RecordError::Unreadable {
            escrow_id: escrow_id.to_owned(),
            record,
            source,
        })
}

/// The stored registration record of an escrow.
pub fn stored_info(
    store: &SharedStore,
    escrow_id: &str,
) -> Result<Option<EscrowInfo>, RecordError> {
    read_record(store, (ns::ESCROWS, "registration"), escrow_id)
}

/// Registers `escrow_id` (see the module docs).
#[allow(clippy::too_many_arguments)] // the gateway's parts plus the call's three fields
pub async fn register(
    chain: &ChainClient,
    directory: &TrackedAddr<Directory>,
    store: &SharedStore,
    signer: &Address,
    polling: &ChainPolling,
    escrow_id: &str,
    model: Option<&str>,
    protocol: Option<&str>,
    key: Option<KeySource>,
) -> Result<Registered, ApiError> {
    let id = escrow_id.trim();
    let protocol = requested_protocol(id, protocol)?;
    if statuses(directory).await?.iter().any(|e| e.id == id) {
        if let Some(info) = stored_info(store, id)? {
            return Ok(Registered {
                info,
                created: false,
            });
        }
    }
    let info = lookup(chain, signer, polling, id, model, protocol, key.as_ref()).await?;
    directory
        .send(AddEscrow {
            info: info.clone(),
            key,
        })
        .timeout(ACTOR_TIMEOUT)
        .await??;
    Ok(Registered {
        info,
        created: true,
    })
}

/// Reads `id` from the chain and checks that `key` (absent: the gateway key, `signer`) created
/// it, before any host hears of the escrow. The participants (for the escrow's model) come from
/// the chain poller's snapshot when no `model` is given.
pub async fn lookup(
    chain: &ChainClient,
    signer: &Address,
    polling: &ChainPolling,
    id: &str,
    model: Option<&str>,
    protocol: Option<ProtocolVersion>,
    key: Option<&KeySource>,
) -> Result<EscrowInfo, ApiError> {
    let listed = match model {
        Some(_) => None,
        None => polling
            .participants(PARTICIPANTS_WAIT)
            .await
            .and_then(|v| listed(&v)),
    };
    let own = match key {
        Some(k) => Some(k.load().map_err(ApiError::EscrowKey)?),
        None => None,
    };
    let signer = own.as_ref().map_or(signer, |k| k.address());
    Ok(chain
        .lookup_escrow_listed(id, signer, model, listed.as_deref(), protocol)
        .await?)
}

/// The version a registration call asks for; an unsupported one is a 400 naming it.
pub fn requested_protocol(
    escrow_id: &str,
    protocol: Option<&str>,
) -> Result<Option<ProtocolVersion>, ApiError> {
    let Some(name) = protocol.map(str::trim).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    ProtocolVersion::parse(name)
        .map(Some)
        .map_err(|e| ApiError::BadRequest {
            message: format!("escrow {escrow_id} cannot be registered: {e}"),
            param: Some("protocol"),
            code: "unsupported_protocol_version",
        })
}

/// Registers every configured escrow that is not registered yet. Failures are logged and
/// skipped: the gateway keeps serving the others. Returns how many were added.
pub async fn register_configured(
    chain: &ChainClient,
    directory: &TrackedAddr<Directory>,
    store: &SharedStore,
    signer: &Address,
    polling: &ChainPolling,
    ids: &[String],
    log: &Logger,
) -> usize {
    let mut added = 0;
    for id in ids {
        match register(
            chain, directory, store, signer, polling, id, None, None, None,
        )
        .await
        {
            Ok(r) if r.created => {
                added += 1;
                info!(log, "escrow registered from the configuration";
                    "stage" => "escrow_registration", "escrow" => id, "model" => &r.info.model,
                    "hosts" => r.info.hosts.len());
            }
            Ok(_) => info!(log, "escrow already registered";
                "stage" => "escrow_registration", "escrow" => id),
            Err(e) => error!(log, "escrow NOT registered; serving the others";
                "stage" => "escrow_registration", "escrow" => id, "error" => %e),
        }
    }
    added
}

/// The admin view of one escrow: registration, actor status and (when alive) a live snapshot.
pub async fn summary(
    directory: &TrackedAddr<Directory>,
    info: &EscrowInfo,
    status: Option<&EntityStatus>,
) -> Value {
    let snapshot = match directory
        .send(GetEscrow {
            escrow_id: info.escrow_id.clone(),
        })
        .timeout(SNAPSHOT_TIMEOUT)
        .await
    {
        Ok(Some(addr)) => addr
            .send(GetSnapshot)
            .timeout(SNAPSHOT_TIMEOUT)
            .await
            .ok()
            .and_then(|s| serde_json::to_value(s).ok()),
        _ => None,
    };
    let hosts: Vec<Value> = info
        .hosts
        .iter()
        .map(|h| {
            json!({"address": h.address, "base_url": h.base_url, "slots": h.slots,
                "weight": h.weight})
        })
        .collect();
    json!({
        "escrow_id": info.escrow_id,
        "model": info.model,
        "creator": info.creator,
        "amount": info.amount,
        "group_size": info.group_size(),
        "max_nonce": info.max_nonce,
        "route_prefix": info.route_prefix,
        "protocol": info.config.protocol,
        "config": info.config,
        "hosts": hosts,
        "actor": status.map(|s| json!({"alive": s.alive, "failed": s.failed,
            "restarts": s.restarts, "in_flight": s.in_flight})),
        "snapshot": snapshot,
    })
}
