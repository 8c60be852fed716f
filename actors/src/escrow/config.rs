//! Tunables of an escrow actor (defaults follow docs/protocol.md §5–§6 and docs/health.md).

use serde::{Deserialize, Serialize};

use crate::host::client::HostTimeouts;

/// Escrow actor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EscrowConfig {
    /// How long a nonce nobody may take waits for a taker before it is withheld.
    pub picker_hold_ms: u64,
    /// Diffs per catch-up request.
    pub catch_up_chunk: usize,
    /// An inference request carries at least the newest this many diffs (or every diff above
    /// the host's sync point, when fewer), so it survives overtaking earlier bodies; beyond, only
    /// what no request carried to the host yet (`session/sync_points.rs`).
    pub catch_up_window: usize,
    /// Diffs kept in memory (and encoded) per escrow, the newest; a host further behind is
    /// served from the store (`escrow/diff_log.rs`). At least `catch_up_window` is sensible.
    pub diff_window: usize,
    /// Pace inference bodies per host so they cannot overtake the ones they depend on
    /// (`escrow/links.rs`); false (the default): every body leaves at once (optimistic catch-up
    /// alone). Opt-in, with `[overload] release_at_dispatch`.
    pub link_pacing: bool,
    /// A link's reorder horizon at start, and its floor (ms; 0: optimistic until a gap shows
    /// overtaking).
    pub link_reorder_min_ms: u64,
    /// The most a link's reorder horizon rises to (ms).
    pub link_reorder_max_ms: u64,
    /// A raised horizon halves every this long (ms).
    pub link_reorder_half_life_ms: u64,
    /// A body waits for its turn at most this long, then leaves anyway (ms).
    pub link_max_wait_ms: u64,
    /// Races that may wait for a nonce at once (beyond: 503 + Retry-After).
    pub max_waiting: usize,
    /// Added to protocol deadlines before a timeout vote (`TimeoutBuffer`).
    pub timeout_buffer_ms: i64,
    /// First and largest interval of finish reconciliation polls (docs/health.md §5).
    pub finish_poll_initial_ms: u64,
    pub finish_poll_max_ms: u64,
    /// Timeout votes that collect at once (each asks all its verifiers in parallel).
    pub timeout_votes_parallel: usize,
    /// Timeout votes that collect at once while more than 4 × `timeout_votes_parallel` wait.
    pub timeout_votes_parallel_backlog: usize,
    /// A confirmed timeout waits this long (ms) for a request's diff to carry it; then one diff
    /// carries every timeout confirmed meanwhile. 0: a diff of its own at once.
    pub timeout_tx_batch_ms: u64,
    /// First back-off before a timeout vote short of quorum is asked again (doubles per round,
    /// capped at [`EscrowConfig::timeout_vote_retry_max_ms`]).
    pub timeout_vote_retry_ms: u64,
    pub timeout_vote_retry_max_ms: u64,
    /// Vote rounds of one nonce before it is given up (`timeout_unconfirmed`).
    pub timeout_vote_rounds: u32,
    /// Nonces between two state checkpoints; a restart replays only the diffs after the newest
    /// (`session/checkpoint.rs`). At least 1.
    pub checkpoint_every: u64,
    /// Host reachability (`escrow/reach/mod.rs`): a host that refused a connection gets no nonce
    /// until it answers, but for one probe per `reach_probe_interval_ms`, and while every host
    /// refuses, new requests get 503 + `Retry-After` without a nonce. `false`: every nonce is
    /// granted as if every host were reachable.
    pub reach_tracking: bool,
    /// One probe per unreachable host (and one for the escrow while every host is) per this
    /// interval (ms).
    pub reach_probe_interval_ms: u64,
    /// How long races wait for a host's catch-up when every other host is catching up or
    /// unreachable, before they are granted nonces to it anyway (`escrow/reach/mod.rs`).
    pub reach_catch_up_wait_ms: u64,
    /// A host lacking more diffs than this is caught up by a background sync, never by a
    /// client's attempt; its nonces pass over it meanwhile, and when no other host can serve,
    /// requests are answered 503 `hosts_catching_up` after `reach_catch_up_wait_ms`
    /// (`escrow/reach/mod.rs`, `actor/background.rs`). 0: every catch-up rides an attempt.
    pub reach_background_catch_up_diffs: u64,
    /// Keep-warm: once a second the reachable host that lacks the most diffs beyond this (it
    /// got no nonces: ejected or passed over) gets a background catch-up round, so it can take
    /// over at once when the others fail (`actor/background.rs`). 0: hosts are caught up only
    /// when a nonce comes to them.
    pub reach_keep_warm_diffs: u64,
    #[serde(skip)]
    pub host_timeouts: HostTimeouts,
}

impl Default for EscrowConfig {
    fn default() -> Self {
        EscrowConfig {
            picker_hold_ms: 200,
            catch_up_chunk: 200,
            catch_up_window: 64,
            diff_window: crate::escrow::session::DEFAULT_DIFF_WINDOW,
            link_pacing: false,
            link_reorder_min_ms: 20,
            link_reorder_max_ms: 1_000,
            link_reorder_half_life_ms: 30_000,
            link_max_wait_ms: 2_000,
            max_waiting: 512,
            timeout_buffer_ms: 5_000,
            finish_poll_initial_ms: 1_000,
            finish_poll_max_ms: 60_000,
            timeout_votes_parallel: 8,
            timeout_votes_parallel_backlog: 32,
            timeout_tx_batch_ms: 50,
            timeout_vote_retry_ms: 10_000,
            timeout_vote_retry_max_ms: 300_000,
            timeout_vote_rounds: 8,
            checkpoint_every: crate::escrow::session::checkpoint::CHECKPOINT_EVERY,
            reach_tracking: true,
            reach_probe_interval_ms: 250,
            reach_catch_up_wait_ms: 5_000,
            reach_background_catch_up_diffs: 2_000,
            reach_keep_warm_diffs: 1_000,
            host_timeouts: HostTimeouts::default(),
        }
    }
}

impl EscrowConfig {
    /// The reachability settings (`escrow/reach/mod.rs`).
    pub fn reach(&self) -> crate::escrow::reach::ReachSettings {
        crate::escrow::reach::ReachSettings {
            enabled: self.reach_tracking,
            probe_interval_ms: i64::try_from(self.reach_probe_interval_ms).unwrap_or(i64::MAX),
            catch_up_wait_ms: i64::try_from(self.reach_catch_up_wait_ms).unwrap_or(i64::MAX),
            background_above: self.reach_background_catch_up_diffs,
        }
    }

    /// The link pacing settings (`escrow/links.rs`).
    pub fn links(&self) -> crate::escrow::links::LinkSettings {
        use std::time::Duration;
        crate::escrow::links::LinkSettings {
            enabled: self.link_pacing,
            min: Duration::from_millis(self.link_reorder_min_ms),
            max: Duration::from_millis(self.link_reorder_max_ms),
            half_life: Duration::from_millis(self.link_reorder_half_life_ms.max(1)),
            max_wait: Duration::from_millis(self.link_max_wait_ms),
        }
    }
}
