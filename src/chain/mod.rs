//! The chain, as read when an escrow is registered: an awc client for the chain REST API
//! (`/productscience/inference/inference/{devshard_escrow/{id}, participant/{addr}, params}`)
//! and, for model discovery, the public API's participant list (docs/protocol.md §9.3).
//!
//! awc is `!Send`: calls run on the calling thread's arbiter with that thread's client. A chain
//! answer becomes an [`EscrowInfo`] in [`build`] (pure, unit-tested); errors are [`ChainError`].

pub mod build;
pub mod types;

use std::{cell::RefCell, time::Duration};

use devshard_actors::{
    escrow::EscrowInfo,
    protocol::{crypto::Address, version::ProtocolVersion},
};
use serde::de::DeserializeOwned;
use slog::{info, warn, Logger};

use self::{
    build::Gathered,
    types::{EscrowParams, EscrowResponse, ParamsResponse, ParticipantResponse, PublicParticipant},
};
use crate::config::ChainSettings;

/// REST path prefix of the inference module.
pub const REST_PREFIX: &str = "/productscience/inference/inference";
/// Public API path of the current epoch's participants.
pub const PUBLIC_PARTICIPANTS_PATH: &str = "/v1/epochs/current/participants";
/// Largest chain answer read (the participant list of a big epoch is the largest).
const MAX_CHAIN_BODY: usize = 8 * 1024 * 1024;
/// Characters of an unexpected answer kept in an error message.
const BODY_EXCERPT: usize = 200;

/// Why an escrow could not be read from the chain (or cannot be used by this gateway).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("{0:?} is not an escrow id (a decimal number such as \"42\")")]
    InvalidEscrowId(String),
    #[error("chain request {url} failed: {reason}")]
    Transport { url: String, reason: String },
    #[error("chain request {url} failed: {reason}")]
    Tls { url: String, reason: String },
    #[error("chain request {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("chain answer of {url} is not understood: {reason}")]
    Decode { url: String, reason: String },
    #[error("escrow {0} does not exist on the chain")]
    EscrowNotFound(String),
    #[error("escrow {0} is already settled on the chain")]
    EscrowSettled(String),
    #[error("escrow {0} has no slots")]
    EmptyGroup(String),
    #[error("escrow {escrow}: invalid address in {field}: {reason}")]
    InvalidAddress {
        escrow: String,
        field: String,
        reason: String,
    },
    #[error("escrow {escrow}: participant {address} is not registered on the chain")]
    ParticipantNotFound { escrow: String, address: String },
    #[error("escrow {escrow}: participant {address} has no inference_url")]
    MissingInferenceUrl { escrow: String, address: String },
    #[error("escrow {escrow} was created by {creator}, but this gateway signs as {signer}; requests would be rejected with 403 restricted to escrow owner")]
    CreatorMismatch {
        escrow: String,
        creator: String,
        signer: String,
    },
    #[error("cannot tell which model escrow {0} serves: the chain does not say; set `default_model` (DEVSHARD_MODEL), `public_api_url`, or pass \"model\" when registering")]
    UnknownModel(String),
}

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

/// This thread's awc client (created on first use; per-request timeouts are set by callers).
fn client() -> awc::Client {
    CLIENT.with(|c| {
        c.borrow_mut()
            .get_or_insert_with(|| devshard_actors::tls::awc_client(None, None))
            .clone()
    })
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(BODY_EXCERPT).collect()
}

/// Client of the chain REST and public APIs.
#[derive(Debug, Clone)]
pub struct ChainClient {
    settings: ChainSettings,
    log: Logger,
}

impl ChainClient {
    pub fn new(settings: ChainSettings, log: Logger) -> ChainClient {
        ChainClient { settings, log }
    }

    /// `GET url` → `Ok(None)` on 404, the decoded JSON on 2xx, an error otherwise.
    async fn get_json<T: DeserializeOwned>(&self, url: String) -> Result<Option<T>, ChainError> {
        let timeout: Duration = self.settings.timeout;
        let mut res = client()
            .get(&url)
            .timeout(timeout)
            .insert_header(("Accept", "application/json"))
            .send()
            .await
            .map_err(|e| match devshard_actors::tls::tls_failure(&e) {
                Some(reason) => ChainError::Tls {
                    url: url.clone(),
                    reason,
                },
                None => ChainError::Transport {
                    url: url.clone(),
                    reason: e.to_string(),
                },
            })?;
        let status = res.status();
        let body = res
            .body()
            .limit(MAX_CHAIN_BODY)
            .await
            .map_err(|e| ChainError::Transport {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        if status.as_u16() == 404 {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(ChainError::Status {
                url,
                status: status.as_u16(),
                body: excerpt(&body),
            });
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| ChainError::Decode {
                url,
                reason: e.to_string(),
            })
    }

    fn rest(&self, path: &str) -> String {
        format!("{}{REST_PREFIX}/{path}", self.settings.rest_url)
    }

    /// [`ChainClient::lookup_escrow_listed`] without a participants list.
    pub async fn lookup_escrow(
        &self,
        escrow_id: &str,
        signer: &Address,
        model: Option<&str>,
    ) -> Result<EscrowInfo, ChainError> {
        self.lookup_escrow_listed(escrow_id, signer, model, None, None)
            .await
    }

    /// Reads escrow `escrow_id` and everything needed to serve it, checks that `signer` created
    /// it, and returns the registration record. `model` overrides the model the chain reports;
    /// without either, the model common to the members in `listed` (the chain poller's
    /// participants snapshot — registration never reads the public API itself), else
    /// `default_model`. The escrow runs `protocol` (`None`: the configured default).
    pub async fn lookup_escrow_listed(
        &self,
        escrow_id: &str,
        signer: &Address,
        model: Option<&str>,
        listed: Option<&[PublicParticipant]>,
        protocol: Option<ProtocolVersion>,
    ) -> Result<EscrowInfo, ChainError> {
        let id = escrow_id.trim();
        if id.is_empty() || id.parse::<u64>().is_err() {
            return Err(ChainError::InvalidEscrowId(id.to_string()));
        }
        info!(self.log, "reading escrow from the chain"; "stage" => "chain_lookup", "escrow" => id);
        let resp: Option<EscrowResponse> = self
            .get_json(self.rest(&format!("devshard_escrow/{id}")))
            .await?;
        let escrow = match resp {
            Some(EscrowResponse {
                found: true,
                escrow: Some(e),
            }) => e,
            _ => return Err(ChainError::EscrowNotFound(id.to_string())),
        };
        if escrow.settled {
            return Err(ChainError::EscrowSettled(id.to_string()));
        }
        let creator = build::address(id, "creator", &escrow.creator)?;
        build::check_creator(id, &creator, signer)?;
        let (group, members) = build::group(id, &escrow)?;
        let params = self.params().await?;
        let mut participants = Vec::with_capacity(members.len());
        for m in &members {
            let url = self.rest(&format!("participant/{m}"));
            match self.get_json::<ParticipantResponse>(url).await? {
                Some(p) => participants.push((m.clone(), p.participant)),
                None => {
                    return Err(ChainError::ParticipantNotFound {
                        escrow: id.to_string(),
                        address: m.to_string(),
                    })
                }
            }
        }
        let model = match model.map(str::trim).filter(|m| !m.is_empty()) {
            Some(m) => m.to_string(),
            None => self.model_of(id, &escrow.model, &members, listed)?,
        };
        let gathered = Gathered {
            escrow,
            params,
            group,
            participants,
            model,
        };
        let version = self.settings.protocol_for(protocol);
        build::escrow_info(
            id,
            gathered,
            self.settings.max_nonce,
            &self.settings.route_for(version),
            version,
        )
    }

    /// The devshard escrow params (`None` when the chain has none: session defaults apply).
    async fn params(&self) -> Result<Option<EscrowParams>, ChainError> {
        let resp: Option<ParamsResponse> = self.get_json(self.rest("params")).await?;
        Ok(resp.and_then(|r| r.params.devshard_escrow_params))
    }

    /// The escrow's model: the chain's field, else the participants' common model, else
    /// `default_model`.
    fn model_of(
        &self,
        id: &str,
        chain_model: &Option<String>,
        members: &[Address],
        listed: Option<&[PublicParticipant]>,
    ) -> Result<String, ChainError> {
        if let Some(m) = chain_model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        {
            return Ok(m.to_string());
        }
        let preferred = self.settings.default_model.as_deref();
        match listed.and_then(|l| build::common_model(members, l, preferred)) {
            Some(m) => Ok(m),
            None => {
                if listed.is_none() && self.settings.public_api_url.is_some() {
                    warn!(self.log, "no participants snapshot yet; the model falls back";
                        "stage" => "chain_lookup", "escrow" => id);
                }
                preferred
                    .map(str::to_string)
                    .ok_or_else(|| ChainError::UnknownModel(id.to_string()))
            }
        }
    }
}
