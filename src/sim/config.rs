//! Configuration of a simulated network: hosts, escrows, keys, latency and the epoch schedule.

use std::net::{IpAddr, Ipv4Addr};

use devshard_actors::protocol::{
    crypto::SigningKey, state::SessionConfig, version::ProtocolVersion,
};

use super::{profile::Profile, warm::WarmMode};

/// Key index (see [`SigningKey::derive`]) of the default gateway key; hosts use `0..hosts`.
pub const GATEWAY_KEY_INDEX: u32 = u32::MAX;
/// Default model served by every host.
pub const DEFAULT_MODEL: &str = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8";
/// Default route prefix of the devshard host API (protocol version "1").
pub const DEFAULT_ROUTE_PREFIX: &str = "/v1/devshard";
/// Default seed of keys, jitter and validation sampling.
pub const DEFAULT_SEED: &str = "devshard-sim";

/// Everything a [`SimNetwork`](super::SimNetwork) is built from.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Number of hosts (each its own HTTP server and key).
    pub hosts: usize,
    /// Latency profile of every host (changeable per host at runtime).
    pub profile: Profile,
    /// Seed of host keys (`SigningKey::derive(seed, i)`), jitter and validation sampling.
    pub seed: String,
    /// Escrows created on the chain over the same group (default `["42"]`).
    pub escrow_ids: Vec<String>,
    /// Amount of every escrow.
    pub amount: u64,
    /// `max_nonce` of every escrow, reported by the chain and enforced by the hosts.
    pub max_nonce: u64,
    /// Per-escrow overrides of `max_nonce`.
    pub max_nonces: std::collections::BTreeMap<String, u64>,
    /// Spendable balance of the creator's account (pays tx fees).
    pub creator_balance: u64,
    /// Model name the hosts advertise and stamp into completions.
    pub model: String,
    /// Prefix of the devshard routes (`/v1/devshard` or `/devshard/<version>`).
    pub route_prefix: String,
    /// Protocol version the hosts run: the tag of every root they compute and their settlement
    /// rules. Set it with [`SimConfig::set_protocol`], which also moves the route.
    pub protocol: ProtocolVersion,
    /// The escrow creator (the key the gateway must sign with).
    pub gateway_key: SigningKey,
    /// Probability (0..1) that a host validates an inference it did not execute when the finish
    /// reaches it in a diff; the `MsgValidation{valid: true}` rides in its next meta event.
    pub validation_rate: f64,
    /// Length of every answer in tokens (capped by the request's `max_tokens`).
    pub output_tokens: u32,
    /// Block heights and PoC phases of the chain's public API.
    pub epochs: EpochSchedule,
    /// Session config of every escrow; `None` = `SessionConfig::default_for_group(slots)`.
    pub session_config: Option<SessionConfig>,
    /// Slot → host index; `None` = one slot per host in host order. A host listed several times
    /// is a multi-slot validator.
    pub slot_hosts: Option<Vec<usize>>,
    /// Which hosts sign with warm keys (granted on the chain at start).
    pub warm_keys: WarmMode,
    /// Address every server binds.
    pub bind_ip: IpAddr,
    /// `0` = ephemeral ports; otherwise the chain API binds `base_port` and host `i`
    /// `base_port + 1 + i`.
    pub base_port: u16,
}

impl SimConfig {
    /// Defaults with a given seed (the gateway key is derived from it).
    pub fn with_seed(seed: &str) -> Self {
        SimConfig {
            hosts: 7,
            profile: Profile::Default,
            seed: seed.to_owned(),
            escrow_ids: vec!["42".to_owned()],
            amount: 1_000_000_000,
            max_nonce: 20_000,
            max_nonces: Default::default(),
            creator_balance: 1_000_000_000_000,
            model: DEFAULT_MODEL.to_owned(),
            route_prefix: DEFAULT_ROUTE_PREFIX.to_owned(),
            protocol: ProtocolVersion::V2,
            gateway_key: SigningKey::derive(seed, GATEWAY_KEY_INDEX),
            validation_rate: 0.5,
            output_tokens: 24,
            epochs: EpochSchedule::default(),
            session_config: None,
            slot_hosts: None,
            warm_keys: WarmMode::None,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            base_port: 0,
        }
    }

    /// Checks the config; returns the slot → host map.
    pub fn validate(&self) -> Result<Vec<usize>, String> {
        if self.hosts == 0 {
            return Err("hosts must be at least 1".into());
        }
        if self.escrow_ids.is_empty() {
            return Err("at least one escrow id is needed".into());
        }
        if !(0.0..=1.0).contains(&self.validation_rate) {
            return Err("validation_rate must be within 0..=1".into());
        }
        if !self.route_prefix.starts_with('/') {
            return Err("route_prefix must start with '/'".into());
        }
        self.slot_map()
    }

    /// Slot → host index, validated against `hosts`.
    pub(crate) fn slot_map(&self) -> Result<Vec<usize>, String> {
        let map = self
            .slot_hosts
            .clone()
            .unwrap_or_else(|| (0..self.hosts).collect());
        if map.is_empty() || map.len() > 128 {
            return Err(format!("group size {} not in 1..=128", map.len()));
        }
        if let Some(bad) = map.iter().find(|&&h| h >= self.hosts) {
            return Err(format!(
                "slot_hosts names host {bad}, but there are {} hosts",
                self.hosts
            ));
        }
        Ok(map)
    }

    /// The session config every escrow uses (always on [`SimConfig::protocol`]).
    pub fn effective_session_config(&self, slots: usize) -> SessionConfig {
        SessionConfig {
            protocol: self.protocol,
            ..self
                .session_config
                .clone()
                .unwrap_or_else(|| SessionConfig::default_for_group(slots))
        }
    }

    /// Runs the hosts on `version`: its root tag, and its route (`/v1/devshard` for v2,
    /// `/devshard/v4.1` for v4.1).
    pub fn set_protocol(&mut self, version: ProtocolVersion) {
        self.protocol = version;
        self.route_prefix = version.route_prefix();
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig::with_seed(DEFAULT_SEED)
    }
}

/// Block production and the PoC schedule of the simulated chain. Heights advance with the
/// injected clock: `height = start_height + elapsed_ms / block_time_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochSchedule {
    pub block_time_ms: u64,
    /// Blocks per epoch; an epoch starts with its PoC stages.
    pub epoch_length: u64,
    pub poc_generate_blocks: u64,
    pub poc_generate_wind_down_blocks: u64,
    pub poc_validate_blocks: u64,
    pub poc_validate_wind_down_blocks: u64,
    /// Index of the epoch the network starts in.
    pub first_epoch: u64,
    /// Offset (blocks) into that epoch at start; `None` = the first block after PoC.
    pub start_offset_blocks: Option<u64>,
    /// Optional confirmation PoC inside each epoch's inference phase.
    pub confirmation_poc: Option<ConfirmationPocSchedule>,
    /// Hosts answer 503 `requests_disabled` to inference work (a payload, or a Start,
    /// Timeout, Validation or ValidationVote tx) during raw PoC phases, except "preserved"
    /// hosts (even indices; `timeslot_allocation[1]` and `poc_validation_inference` say so).
    pub hosts_disable_during_poc: bool,
}

impl Default for EpochSchedule {
    /// One-hour epochs of 6 s blocks with a 7-minute PoC; the network starts right after PoC.
    fn default() -> Self {
        EpochSchedule {
            block_time_ms: 6_000,
            epoch_length: 600,
            poc_generate_blocks: 40,
            poc_generate_wind_down_blocks: 5,
            poc_validate_blocks: 20,
            poc_validate_wind_down_blocks: 5,
            first_epoch: 100,
            start_offset_blocks: None,
            confirmation_poc: None,
            hosts_disable_during_poc: false,
        }
    }
}

impl EpochSchedule {
    /// Blocks of all four PoC stages.
    pub fn poc_blocks(&self) -> u64 {
        self.poc_generate_blocks
            + self.poc_generate_wind_down_blocks
            + self.poc_validate_blocks
            + self.poc_validate_wind_down_blocks
    }
}

/// A confirmation PoC event in every epoch, `trigger_offset_blocks` after the epoch start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfirmationPocSchedule {
    pub trigger_offset_blocks: u64,
    pub grace_blocks: u64,
    pub generation_blocks: u64,
    pub validation_blocks: u64,
}
