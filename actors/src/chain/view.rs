//! The chain as the gateway last saw it ([`ChainView`]): last-known-good snapshots with their
//! ages and staleness bounds, the poll schedule, and each host's budget and back-off. This is
//! what `GetSnapshot` returns, what subscribers receive, what [`admission`](mod@super::admission)
//! reads and what `/v1/debug/actors` shows.
//!
//! Block time is estimated from successive `block_height` observations ([`BlockClock`]); with it
//! the expected end of a PoC is `observed_at + (poc_end_height - block_height) × block_time`.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::{
    budget::{HostGateView, WaitReason},
    settings::ChainPollSettings,
    snapshot::{EpochInfo, ParticipantInfo, PhaseKind},
};

/// Block time assumed before two observations exist (Gonka mainnet's order of magnitude).
pub const DEFAULT_BLOCK_TIME_MS: u64 = 6_000;
/// Observations kept for the block-time estimate.
const BLOCK_SAMPLES: usize = 32;

/// Endpoint names (metric label `endpoint`).
pub const ENDPOINT_EPOCHS: &str = "epochs_latest";
pub const ENDPOINT_PARTICIPANTS: &str = "participants";
pub const ENDPOINT_VERSIONS: &str = "versions";

/// Block time estimated from `(observed_at_ms, block_height)` samples.
#[derive(Debug, Clone, Default)]
pub struct BlockClock {
    samples: VecDeque<(i64, u64)>,
}

impl BlockClock {
    /// Adds an observation; a height going backwards (another node, a reset) starts over.
    pub fn observe(&mut self, at_ms: i64, height: u64) {
        if self.samples.back().is_some_and(|&(_, h)| h > height) {
            self.samples.clear();
        }
        if self.samples.len() == BLOCK_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at_ms, height));
    }

    /// Milliseconds per block over the kept samples, or the default.
    pub fn block_time_ms(&self) -> u64 {
        match (self.samples.front(), self.samples.back()) {
            (Some(&(t0, h0)), Some(&(t1, h1))) if h1 > h0 && t1 > t0 => {
                let ms = u64::try_from(t1 - t0).unwrap_or(0) / (h1 - h0);
                ms.clamp(100, 60_000)
            }
            _ => DEFAULT_BLOCK_TIME_MS,
        }
    }
}

/// The last good `epochs/latest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EpochSnapshot {
    pub info: EpochInfo,
    pub phase_kind: PhaseKind,
    pub observed_at_ms: i64,
    /// Estimated ms per block when this was observed.
    pub block_time_ms: u64,
    /// Expected unix ms at which the raw PoC stages end (PoC only, when the chain gives heights).
    pub poc_end_ms: Option<i64>,
}

impl EpochSnapshot {
    pub fn new(info: EpochInfo, observed_at_ms: i64, block_time_ms: u64) -> EpochSnapshot {
        let phase_kind = info.phase_kind();
        let poc_end_ms = match phase_kind {
            PhaseKind::PoC => info
                .poc_end_height()
                .filter(|&end| end >= info.block_height)
                .map(|end| {
                    let blocks = i64::try_from(end - info.block_height).unwrap_or(i64::MAX);
                    let bt = i64::try_from(block_time_ms).unwrap_or(i64::MAX);
                    observed_at_ms.saturating_add(blocks.saturating_mul(bt))
                }),
            _ => None,
        };
        EpochSnapshot {
            info,
            phase_kind,
            observed_at_ms,
            block_time_ms,
            poc_end_ms,
        }
    }
}

/// The last good participants list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParticipantsSnapshot {
    /// Address → participant.
    pub participants: BTreeMap<String, ParticipantInfo>,
    pub observed_at_ms: i64,
    /// Epoch index of the epoch snapshot when this list arrived.
    pub epoch_index: Option<u64>,
}

/// A miner's last good `/v1/versions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionsSnapshot {
    /// Node id → `poc_validation_inference`.
    pub nodes: BTreeMap<String, bool>,
    pub observed_at_ms: i64,
}

/// Poll state of one endpoint (one per miner for versions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointStatus {
    /// `epochs_latest`, `participants` or `versions`.
    pub endpoint: &'static str,
    /// The miner's address (versions only).
    pub miner: Option<String>,
    pub url: String,
    /// URL authority: the key of the host's budget and back-off.
    pub host: String,
    pub interval_ms: u64,
    pub stale_after_ms: u64,
    pub last_ok_ms: Option<i64>,
    /// Age of the last good snapshot when the view was made.
    pub age_ms: Option<i64>,
    /// Older than `stale_after_ms` (or never fetched once the first poll is over).
    pub stale: bool,
    pub last_attempt_ms: Option<i64>,
    /// `200`, `503`, `transport`, `timeout`, `decode_error`, …
    pub last_status: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    pub requests: u64,
    pub in_flight: bool,
    /// When the next request is due (unix ms).
    pub next_poll_ms: Option<i64>,
    /// Why the next request waits past its interval, if it does.
    pub waiting_for: Option<WaitReason>,
}

/// Everything the poller knows (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainView {
    /// Base URL of the public API this poller polls.
    pub api: String,
    /// When this view was made (unix ms); ages and `stale` flags are as of then.
    pub generated_at_ms: i64,
    pub epoch: Option<EpochSnapshot>,
    pub participants: Option<ParticipantsSnapshot>,
    /// Miner address → its versions.
    pub versions: BTreeMap<String, VersionsSnapshot>,
    /// `epochs_latest`, `participants`, then one `versions` entry per miner.
    pub endpoints: Vec<EndpointStatus>,
    pub hosts: Vec<HostGateView>,
    pub settings: ChainPollSettings,
}

impl ChainView {
    /// An empty view (nothing fetched yet).
    pub fn empty(api: &str, settings: ChainPollSettings, now_ms: i64) -> ChainView {
        ChainView {
            api: api.to_owned(),
            generated_at_ms: now_ms,
            epoch: None,
            participants: None,
            versions: BTreeMap::new(),
            endpoints: Vec::new(),
            hosts: Vec::new(),
            settings,
        }
    }

    pub fn epoch_index(&self) -> Option<u64> {
        self.epoch.as_ref().map(|e| e.info.epoch_index)
    }

    /// The phase kind of the last good snapshot (stale or not).
    pub fn phase_kind(&self) -> Option<PhaseKind> {
        self.epoch.as_ref().map(|e| e.phase_kind)
    }

    /// The status of `epochs_latest` / `participants` (`None` for versions, see `miner_status`).
    pub fn endpoint(&self, endpoint: &str) -> Option<&EndpointStatus> {
        self.endpoints
            .iter()
            .find(|e| e.endpoint == endpoint && e.miner.is_none())
    }

    /// The versions status of one miner.
    pub fn miner_status(&self, address: &str) -> Option<&EndpointStatus> {
        self.endpoints
            .iter()
            .find(|e| e.miner.as_deref() == Some(address))
    }

    /// Whether the epoch snapshot is missing or older than its bound at `now_ms`.
    pub fn epoch_stale(&self, now_ms: i64) -> bool {
        self.epoch.as_ref().is_none_or(|e| {
            older_than(
                e.observed_at_ms,
                self.settings.phase_stale_after_ms(),
                now_ms,
            )
        })
    }

    /// Whether the participants snapshot is missing or older than its bound at `now_ms`.
    pub fn participants_stale(&self, now_ms: i64) -> bool {
        self.participants.as_ref().is_none_or(|p| {
            older_than(
                p.observed_at_ms,
                self.settings.participants_stale_after_ms(),
                now_ms,
            )
        })
    }

    /// A miner's versions, if fresh at `now_ms`.
    pub fn fresh_versions(&self, address: &str, now_ms: i64) -> Option<&VersionsSnapshot> {
        self.versions.get(address).filter(|v| {
            !older_than(
                v.observed_at_ms,
                self.settings.versions_stale_after_ms(),
                now_ms,
            )
        })
    }
}

/// `now - observed > bound`.
pub fn older_than(observed_at_ms: i64, bound_ms: u64, now_ms: i64) -> bool {
    now_ms.saturating_sub(observed_at_ms) > i64::try_from(bound_ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_time_from_observations() {
        let mut c = BlockClock::default();
        assert_eq!(c.block_time_ms(), DEFAULT_BLOCK_TIME_MS);
        c.observe(0, 100);
        assert_eq!(c.block_time_ms(), DEFAULT_BLOCK_TIME_MS);
        for i in 1..100 {
            c.observe(i * 20_000, 100 + (i as u64 * 20) / 6);
        }
        assert!(
            (5_900..=6_100).contains(&c.block_time_ms()),
            "{}",
            c.block_time_ms()
        );
        c.observe(3_000_000, 5);
        assert_eq!(c.block_time_ms(), DEFAULT_BLOCK_TIME_MS, "height went back");
    }
}
