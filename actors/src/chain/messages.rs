//! Messages of the [`ChainPoller`](super::ChainPoller).

use std::{collections::BTreeSet, sync::Arc};

use actix::prelude::*;
use serde::Serialize;

use super::{
    settings::{ChainPollSettings, SettingsError},
    snapshot::PhaseKind,
    view::ChainView,
};

/// The current view, with ages and staleness as of now. Never triggers a request.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Arc<ChainView>")]
pub struct GetSnapshot;

/// Sends `ChainChanged` to the recipient after every successful poll and on every change (and
/// once right away with the current view). Closed recipients are dropped. A subscriber may cache
/// the latest view and call [`admission`](super::admission()) on it with the current time.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub Recipient<ChainChanged>);

/// Applies new settings live: validated first (the error says why), then every timer is re-armed
/// from its last request (never earlier than the new interval allows, so no extra burst).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), SettingsError>")]
pub struct ApplyPollSettings(pub ChainPollSettings);

/// Restricts `/v1/versions` polling to these participant addresses (for example the members of
/// the gateway's escrows); `None` polls every active participant (the default).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SetVersionsScope(pub Option<BTreeSet<String>>);

/// Stops the poller (its timers and in-flight requests are dropped).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StopPoller;

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ChainChange {
    /// Sent once to a new subscriber.
    Subscribed,
    EpochChanged {
        from: Option<u64>,
        to: u64,
    },
    /// The raw phase or the confirmation-PoC phase changed.
    PhaseChanged {
        from: Option<String>,
        to: String,
        kind: PhaseKind,
        block_height: u64,
    },
    ParticipantsChanged,
    VersionsChanged {
        miner: String,
    },
    /// A snapshot became older than its bound: routing stops trusting it.
    BecameStale {
        endpoint: &'static str,
        miner: Option<String>,
    },
    /// A stale snapshot was refreshed.
    BecameFresh {
        endpoint: &'static str,
        miner: Option<String>,
    },
    SettingsApplied,
    /// A poll succeeded (sent after every one, so a subscriber's copy of the view is never older
    /// than the last good poll; ages and staleness are then computed from its timestamps).
    Refreshed {
        endpoint: &'static str,
        miner: Option<String>,
    },
}

/// Pushed to subscribers.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ChainChanged {
    pub view: Arc<ChainView>,
    pub changes: Vec<ChainChange>,
}
