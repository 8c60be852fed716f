//! Pure construction of an [`EscrowInfo`] from what the chain answered: the session config
//! (defaults for the group size, overridden by non-zero escrow fields and chain params, or the
//! simulator's exact config when given), the group, the hosts and the creator check.

use devshard_actors::{
    escrow::{EscrowInfo, HostEndpoint},
    protocol::{
        crypto::Address,
        state::{SessionConfig, Slot},
        version::ProtocolVersion,
    },
};

use super::{
    types::{ChainEscrow, ChainParticipant, EscrowParams, PublicParticipant},
    ChainError,
};

/// Percent base of `vote_threshold_factor` (`vote_threshold = N * factor / 100`).
const VOTE_FACTOR_BASE: u64 = 100;

fn sat_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The frozen session config (docs/protocol.md §4.3).
pub fn session_config(e: &ChainEscrow, params: Option<&EscrowParams>, n: usize) -> SessionConfig {
    if let Some(exact) = &e.session_config {
        return exact.clone();
    }
    let mut c = SessionConfig::default_for_group(n);
    let set = |v: u64| (v != 0).then_some(v);
    if let Some(v) = set(e.token_price) {
        c.token_price = v;
    }
    if let Some(v) = set(e.create_devshard_fee) {
        c.create_devshard_fee = v;
    }
    if let Some(v) = set(e.fee_per_nonce) {
        c.fee_per_nonce = v;
    }
    if let Some(v) = set(e.inference_seal_grace_nonces) {
        c.inference_seal_grace_nonces = sat_u32(v);
    }
    if let Some(v) = set(e.inference_seal_grace_seconds) {
        c.inference_seal_grace_seconds = sat_u32(v);
    }
    if let Some(v) = set(e.auto_seal_every_n_nonces) {
        c.auto_seal_every_n_nonces = sat_u32(v);
    }
    if let Some(p) = params {
        if let Some(v) = set(p.refusal_timeout) {
            c.refusal_timeout = sat_i64(v);
        }
        if let Some(v) = set(p.execution_timeout) {
            c.execution_timeout = sat_i64(v);
        }
        if let Some(v) = set(p.validation_rate) {
            c.validation_rate = sat_u32(v);
        }
        if let Some(f) = set(p.vote_threshold_factor) {
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            c.vote_threshold = sat_u32(n.saturating_mul(f) / VOTE_FACTOR_BASE);
        }
    }
    c
}

/// Parses a chain address field.
pub fn address(escrow: &str, field: &str, value: &str) -> Result<Address, ChainError> {
    Address::parse(value.trim()).map_err(|e| ChainError::InvalidAddress {
        escrow: escrow.to_string(),
        field: field.to_string(),
        reason: e.to_string(),
    })
}

/// The escrow must have been created by the key this gateway signs with, or every diff would
/// be refused by the hosts (`403 restricted to escrow owner`).
pub fn check_creator(escrow: &str, creator: &Address, signer: &Address) -> Result<(), ChainError> {
    if creator == signer {
        return Ok(());
    }
    Err(ChainError::CreatorMismatch {
        escrow: escrow.to_string(),
        creator: creator.to_string(),
        signer: signer.to_string(),
    })
}

/// The group in slot order and the distinct addresses in order of first appearance.
pub fn group(escrow_id: &str, e: &ChainEscrow) -> Result<(Vec<Slot>, Vec<Address>), ChainError> {
    if e.slots.is_empty() {
        return Err(ChainError::EmptyGroup(escrow_id.to_string()));
    }
    let mut slots = Vec::with_capacity(e.slots.len());
    let mut distinct: Vec<Address> = Vec::new();
    for (i, s) in e.slots.iter().enumerate() {
        let validator = address(escrow_id, &format!("slots[{i}]"), s.address())?;
        if !distinct.contains(&validator) {
            distinct.push(validator.clone());
        }
        slots.push(Slot {
            slot_id: u32::try_from(i).unwrap_or(u32::MAX),
            validator,
        });
    }
    Ok((slots, distinct))
}

/// One host per distinct address, with the slots it holds.
pub fn hosts(
    escrow_id: &str,
    group: &[Slot],
    participants: &[(Address, ChainParticipant)],
) -> Result<Vec<HostEndpoint>, ChainError> {
    participants
        .iter()
        .map(|(addr, p)| {
            let url = p.inference_url.trim().trim_end_matches('/');
            if url.is_empty() {
                return Err(ChainError::MissingInferenceUrl {
                    escrow: escrow_id.to_string(),
                    address: addr.to_string(),
                });
            }
            Ok(HostEndpoint {
                address: addr.clone(),
                base_url: url.to_string(),
                slots: group
                    .iter()
                    .filter(|s| &s.validator == addr)
                    .map(|s| s.slot_id)
                    .collect(),
                weight: p.weight,
            })
        })
        .collect()
}

/// The model every group member serves, from the public API's participant list: the one model
/// common to all of them, or `preferred` when it is among several common ones.
pub fn common_model(
    members: &[Address],
    listed: &[PublicParticipant],
    preferred: Option<&str>,
) -> Option<String> {
    let mut common: Option<Vec<String>> = None;
    for m in members {
        let models = listed
            .iter()
            .find(|p| p.index == m.as_str())?
            .models
            .clone();
        common = Some(match common {
            None => models,
            Some(c) => c.into_iter().filter(|x| models.contains(x)).collect(),
        });
    }
    let common = common?;
    match common.as_slice() {
        [one] => Some(one.clone()),
        many => preferred
            .filter(|p| many.iter().any(|m| m == p))
            .map(str::to_string),
    }
}

/// Everything gathered from the chain for one escrow.
pub struct Gathered {
    pub escrow: ChainEscrow,
    pub params: Option<EscrowParams>,
    pub group: Vec<Slot>,
    pub participants: Vec<(Address, ChainParticipant)>,
    pub model: String,
}

/// The registration record of an escrow on protocol `version`, served under `route_prefix`.
/// The version is the gateway's (config or registration call), never what the chain's exact
/// config says: it sets the root's tag and the settlement rules.
pub fn escrow_info(
    escrow_id: &str,
    g: Gathered,
    default_max_nonce: u64,
    route_prefix: &str,
    version: ProtocolVersion,
) -> Result<EscrowInfo, ChainError> {
    let creator = address(escrow_id, "creator", &g.escrow.creator)?;
    let config = SessionConfig {
        protocol: version,
        ..session_config(&g.escrow, g.params.as_ref(), g.group.len())
    };
    let hosts = hosts(escrow_id, &g.group, &g.participants)?;
    let max_nonce = [
        g.escrow.max_nonce,
        g.params.as_ref().map_or(0, |p| p.max_nonce),
    ]
    .into_iter()
    .find(|v| *v != 0)
    .unwrap_or(default_max_nonce);
    Ok(EscrowInfo {
        escrow_id: escrow_id.to_string(),
        creator,
        model: g.model,
        amount: g.escrow.amount,
        config,
        group: g.group,
        hosts,
        max_nonce,
        route_prefix: route_prefix.to_string(),
    })
}
