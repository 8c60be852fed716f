//! What the gateway knows about an escrow from the chain: creator, group, hosts, config.
//! Immutable for the escrow's lifetime; persisted as the escrow's registration record.

use serde::{Deserialize, Serialize};

use crate::protocol::{
    crypto::Address,
    state::{SessionConfig, Slot},
};

/// Default devshard route prefix (`/v1/devshard`, protocol version "1").
pub const DEFAULT_ROUTE_PREFIX: &str = "/v1/devshard";

/// One distinct host (participant address) of an escrow's group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEndpoint {
    pub address: Address,
    /// The participant's `inference_url` (scheme, host, port; no trailing slash).
    pub base_url: String,
    /// Slots this address holds in the group (multi-slot validators hold several).
    pub slots: Vec<u32>,
    /// Chain weight of the participant (escrow choice weighs spare capacity by it).
    #[serde(default)]
    pub weight: u64,
}

/// The escrow as registered with the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EscrowInfo {
    pub escrow_id: String,
    pub creator: Address,
    pub model: String,
    pub amount: u64,
    pub config: SessionConfig,
    pub group: Vec<Slot>,
    pub hosts: Vec<HostEndpoint>,
    /// Chain limit on nonces; the last `N + 1` are reserved for finalization.
    pub max_nonce: u64,
    pub route_prefix: String,
}

impl EscrowInfo {
    /// Number of slots (`N`).
    pub fn group_size(&self) -> usize {
        self.group.len()
    }

    /// The slot that executes `nonce` (`group[nonce % N]`).
    pub fn slot_for_nonce(&self, nonce: u64) -> Option<&Slot> {
        let n = u64::try_from(self.group.len()).ok().filter(|n| *n > 0)?;
        let idx = usize::try_from(nonce % n).ok()?;
        self.group.get(idx)
    }

    /// The host that executes `nonce`.
    pub fn host_for_nonce(&self, nonce: u64) -> Option<&HostEndpoint> {
        let slot = self.slot_for_nonce(nonce)?;
        self.host(&slot.validator)
    }

    /// A host by address.
    pub fn host(&self, address: &Address) -> Option<&HostEndpoint> {
        self.hosts.iter().find(|h| &h.address == address)
    }

    /// `{base}{prefix}/sessions/{escrow}/{path}` for a host.
    pub fn session_url(&self, host: &HostEndpoint, path: &str) -> String {
        format!(
            "{}{}/sessions/{}/{}",
            host.base_url, self.route_prefix, self.escrow_id, path
        )
    }

    /// Highest nonce usable for inference while Active (`max_nonce − (N + 1)`).
    pub fn last_active_nonce(&self) -> u64 {
        let reserve = u64::try_from(self.group.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        self.max_nonce.saturating_sub(reserve)
    }
}
