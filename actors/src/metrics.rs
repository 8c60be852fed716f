//! Prometheus metrics of the actors, registered once into a registry handed in from outside (no
//! globals; labels are small enums, never escrow or participant ids).

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Cheap-to-clone metric handles shared by every actor.
#[derive(Debug, Clone)]
pub struct ActorMetrics {
    /// Final attempt outcomes by class (docs/health.md §1).
    pub attempts: IntCounterVec,
    /// Nonces sequenced, by kind (`inference`, `withheld`, `control`).
    pub nonces: IntCounterVec,
    /// Entity actors that died and were respawned, or were disabled, by kind.
    pub restarts: IntCounterVec,
    /// Time from a diff's composition to its durability ack.
    pub diff_durable_seconds: Histogram,
    /// Attempt phases (receipt, first content, total) in seconds.
    pub attempt_seconds: HistogramVec,
    /// Timeout votes by result (`confirmed`, `insufficient`).
    pub timeouts: IntCounterVec,
    /// Late finish markers by resolution (`arrived_late`, `timed_out`).
    pub late_finishes: IntCounterVec,
    /// Participants by health state.
    pub participants: IntGaugeVec,
    /// Ejections.
    pub ejections: IntCounter,
    /// Strikes charged, by outcome reason.
    pub strikes: IntCounterVec,
    /// Escrows this replica stopped because another replica took their lease over (fenced).
    pub escrow_leases_lost: IntCounter,
    /// Diffs not composed because they would pass the last active nonce, which is kept for the
    /// finalize round (their txs ride the finalize round's diff; `escrow/nonce_room.rs`).
    pub diffs_deferred_at_nonce_limit: IntCounter,
    /// Escrow sessions restored at a (re)spawn, by source (`checkpoint`, `log`).
    pub escrow_restores: IntCounterVec,
    /// State checkpoints written.
    pub escrow_checkpoints: IntCounter,
    /// Ejections not done because of the floor or missing peer evidence, by reason.
    pub ejections_suppressed: IntCounterVec,
    /// Time from ejection to Healthy again.
    pub recovery_seconds: Histogram,
    /// Hedges started, by reason.
    pub hedges: IntCounterVec,
    /// Hedges not started, by reason (`budget`, `no_faster_host`, `max_attempts`).
    pub hedges_skipped: IntCounterVec,
    /// Hedge budget tokens left (last escrow to spend or earn).
    pub hedge_tokens: Gauge,
    /// Faults several hosts shared (no strikes), by cause.
    pub shared_faults: IntCounterVec,
    /// Requests raced in panic mode (no routable host; least-bad hosts used).
    pub panic_mode: IntCounter,
    /// Suspect or probation winners crowned by the liveness rule.
    pub suspect_winners: IntCounter,
    /// Losers left to drain to their finish after a winner was crowned, by why (`receipt`:
    /// its host had confirmed the start; `doubtful`: a Suspect/Probation host's credit run).
    pub losers_drained: IntCounterVec,
    /// Attempts ended at the protocol's execution deadline (receipt + `execution_timeout`), by
    /// role (`crowned`: the winner; `uncrowned`: a loser left to drain, or a contender).
    pub execution_deadlines: IntCounterVec,
    /// Txs dropped from host mempools because hosts may not propose them, by kind.
    pub mempool_foreign_txs: IntCounterVec,
    /// Participants under repair (docs/health.md §6).
    pub repairs_active: IntGauge,
    /// Repair ticks by result (`unblocked`, `not_yet`, `gave_up`).
    pub repair_attempts: IntCounterVec,
    /// Divergence to unblock.
    pub repair_unblock_seconds: Histogram,
    /// Catch-up chunks sent to hosts, each signed as it left, by path (`attempt`, `sync`,
    /// `repair`) and result (`ok`, `auth_rejected`: the host answered 401, `failed`).
    pub catch_up_chunks: IntCounterVec,
    /// Diffs below the in-memory window read back from the store for a host far behind, by path
    /// (`attempt`, `resend`, `sync`, `vote`, `repair`; `root`: one diff whose root a host's late
    /// report needs: `escrow/diff_log.rs`).
    pub diffs_from_store: IntCounterVec,
    /// Escrows found idle (no new nonce for 5 s) whose in-memory diffs and encoded diffs were
    /// compacted (`escrow/durable.rs`).
    pub idle_compactions: IntCounter,
    /// Host sync points moved back, by cause (`nonce_gap`: to what the host says it holds;
    /// `session_lost`: to 0).
    pub host_sync_rewinds: IntCounterVec,
    /// Diffs one attempt's bodies carry (prelude chunks and the inference request together), by
    /// send (`first`: the grant's optimistic catch-up; `resend`: the same nonce again after the
    /// host's nonce gap).
    pub catch_up_diffs: HistogramVec,
    /// Attempts sent again after the host's nonce gap, by result (`ok`, `failed`).
    pub gap_resends: IntCounterVec,
    /// How long an inference body waited for its turn on its host's link (`escrow/links.rs`), by
    /// result (`go`: at once, `paced`: after a wait, `expired`: after `link_max_wait_ms`).
    pub link_wait_seconds: HistogramVec,
    /// Nonce gaps that showed a body overtaking one it depended on (each may raise its link's
    /// reorder horizon).
    pub link_overtaken: IntCounter,
    /// Timeout votes collecting now (parallel across nonces, bounded by
    /// `timeout_votes_parallel`).
    pub timeout_votes_running: IntGauge,
    /// Timeout votes short of quorum asked again after a back-off, by reason.
    pub timeout_vote_retries: IntCounterVec,
    /// Timeout votes waiting for a back-off asked again early, by why (`draining`,
    /// `host_reachable`, `host_caught_up`).
    pub timeout_votes_hastened: IntCounterVec,
    /// Confirmed timeouts that one diff of their own sequenced after `timeout_tx_batch_ms`
    /// (those a request's diff carried first are not observed).
    pub timeout_txs_batched: Histogram,
    /// Verifiers below the diff window left out of a first vote round that the others could
    /// pass (`escrow/timeouts.rs`).
    pub timeout_voters_behind: IntCounter,
    /// Host reachability (`escrow/reach/mod.rs`), by event (`host_unreachable`, `host_reachable`,
    /// `gate_closed`, `gate_opened`, `probe`, `withheld`: a nonce passed over, `refused`: a
    /// request answered without a nonce).
    pub reach: IntCounterVec,
    /// Escrows this replica owns (a running actor, not being handed over; shared stores).
    pub escrows_owned: IntGauge,
    /// Escrows that changed hands on this replica, by reason (`claimed_free`, `taken_over`,
    /// `resumed`, `released`, `lost`).
    pub escrow_handoffs: IntCounterVec,
}

/// Every `reason` of `escrow_handoffs_total`.
pub const HANDOFF_REASONS: [&str; 5] =
    ["claimed_free", "taken_over", "resumed", "released", "lost"];

impl ActorMetrics {
    /// Registers every metric; call once per registry.
    pub fn register(registry: &Registry) -> Result<ActorMetrics, prometheus::Error> {
        let m = ActorMetrics {
            attempts: IntCounterVec::new(
                Opts::new("attempts_total", "Final attempt outcomes by class"),
                &["class"],
            )?,
            nonces: IntCounterVec::new(
                Opts::new("nonces_total", "Nonces sequenced by kind"),
                &["kind"],
            )?,
            restarts: IntCounterVec::new(
                Opts::new(
                    "actor_restarts_total",
                    "Entity actors respawned or disabled",
                ),
                &["kind", "result"],
            )?,
            diff_durable_seconds: Histogram::with_opts(
                HistogramOpts::new("diff_durable_seconds", "Diff composition to fsync ack")
                    .buckets(vec![
                        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5,
                    ]),
            )?,
            attempt_seconds: HistogramVec::new(
                HistogramOpts::new("attempt_phase_seconds", "Attempt phases from send").buckets(
                    vec![
                        0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                        30.0, 120.0,
                    ],
                ),
                &["phase"],
            )?,
            timeouts: IntCounterVec::new(
                Opts::new("timeout_votes_total", "Timeout vote rounds by result"),
                &["result"],
            )?,
            late_finishes: IntCounterVec::new(
                Opts::new(
                    "late_finishes_total",
                    "Finish markers seen after the stream ended",
                ),
                &["resolution"],
            )?,
            participants: IntGaugeVec::new(
                Opts::new("participants", "Participants by health state"),
                &["state"],
            )?,
            ejections: IntCounter::new("participant_ejections_total", "Participants ejected")?,
            strikes: IntCounterVec::new(
                Opts::new("participant_strikes_total", "Strikes charged, by reason"),
                &["reason"],
            )?,
            diffs_deferred_at_nonce_limit: IntCounter::new(
                "escrow_diffs_deferred_at_nonce_limit_total",
                "Diffs not composed because only the finalize round may take the last active nonce",
            )?,
            escrow_restores: IntCounterVec::new(
                Opts::new(
                    "escrow_restores_total",
                    "Escrow sessions restored at a spawn, by source",
                ),
                &["from"],
            )?,
            escrow_checkpoints: IntCounter::new(
                "escrow_checkpoints_total",
                "Escrow state checkpoints written",
            )?,
            escrow_leases_lost: IntCounter::new(
                "escrow_leases_lost_total",
                "Escrows stopped because another replica took their lease over",
            )?,
            ejections_suppressed: IntCounterVec::new(
                Opts::new(
                    "participant_ejections_suppressed_total",
                    "Ejections not done, by reason",
                ),
                &["reason"],
            )?,
            recovery_seconds: Histogram::with_opts(
                HistogramOpts::new("participant_recovery_seconds", "Ejection to Healthy again")
                    .buckets(vec![30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0]),
            )?,
            hedges: IntCounterVec::new(
                Opts::new("hedges_total", "Hedges started, by reason"),
                &["reason"],
            )?,
            hedges_skipped: IntCounterVec::new(
                Opts::new("hedges_skipped_total", "Hedges not started, by reason"),
                &["reason"],
            )?,
            hedge_tokens: Gauge::new("hedge_budget_tokens", "Hedge budget tokens left")?,
            shared_faults: IntCounterVec::new(
                Opts::new(
                    "shared_faults_total",
                    "Faults shared by several hosts, by cause",
                ),
                &["cause"],
            )?,
            panic_mode: IntCounter::new(
                "panic_mode_total",
                "Requests raced with no routable host",
            )?,
            suspect_winners: IntCounter::new("suspect_winners_total", "Doubtful winners crowned")?,
            losers_drained: IntCounterVec::new(
                Opts::new(
                    "losers_drained_total",
                    "Losing attempts drained to their finish instead of cancelled",
                ),
                &["why"],
            )?,
            execution_deadlines: IntCounterVec::new(
                Opts::new(
                    "attempt_execution_deadlines_total",
                    "Attempts ended at the protocol's execution deadline, by role",
                ),
                &["role"],
            )?,
            mempool_foreign_txs: IntCounterVec::new(
                Opts::new(
                    "mempool_foreign_txs_total",
                    "Txs a host proposed that only the escrow's creator may sequence (dropped)",
                ),
                &["kind"],
            )?,
            repairs_active: IntGauge::new("repairs_active", "Participants under repair")?,
            repair_attempts: IntCounterVec::new(
                Opts::new("repair_attempts_total", "Repair ticks by result"),
                &["result"],
            )?,
            repair_unblock_seconds: Histogram::with_opts(
                HistogramOpts::new("repair_unblock_seconds", "Divergence to unblock").buckets(
                    vec![2.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0],
                ),
            )?,
            catch_up_chunks: IntCounterVec::new(
                Opts::new(
                    "catch_up_chunks_total",
                    "Catch-up chunks sent to hosts (signed at send time), by path and result",
                ),
                &["path", "result"],
            )?,
            diffs_from_store: IntCounterVec::new(
                Opts::new(
                    "diffs_from_store_total",
                    "Diffs below the in-memory window read back from the store, by path",
                ),
                &["path"],
            )?,
            idle_compactions: IntCounter::new(
                "escrow_idle_compactions_total",
                "Idle escrows whose in-memory and encoded diffs were compacted",
            )?,
            host_sync_rewinds: IntCounterVec::new(
                Opts::new(
                    "host_sync_rewinds_total",
                    "Host sync points moved back, by cause",
                ),
                &["cause"],
            )?,
            catch_up_diffs: HistogramVec::new(
                HistogramOpts::new(
                    "catch_up_diffs_per_request",
                    "Diffs carried by one attempt's request bodies, by send (first, resend)",
                )
                .buckets(vec![
                    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
                ]),
                &["send"],
            )?,
            gap_resends: IntCounterVec::new(
                Opts::new(
                    "gap_resends_total",
                    "Attempts sent again from what the host holds after its nonce gap, by result",
                ),
                &["result"],
            )?,
            link_wait_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "link_wait_seconds",
                    "Wait of an inference body for its turn on its host's link, by result",
                )
                .buckets(vec![
                    0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
                ]),
                &["result"],
            )?,
            link_overtaken: IntCounter::new(
                "link_overtaken_total",
                "Nonce gaps that showed a body overtaking one it depended on",
            )?,
            timeout_votes_running: IntGauge::new(
                "timeout_votes_running",
                "Timeout votes collecting now (all verifiers asked in parallel)",
            )?,
            timeout_txs_batched: Histogram::with_opts(
                HistogramOpts::new(
                    "timeout_txs_batched",
                    "Confirmed timeouts sequenced by one diff of their own after the batch wait",
                )
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]),
            )?,
            timeout_vote_retries: IntCounterVec::new(
                Opts::new(
                    "timeout_vote_retries_total",
                    "Timeout votes short of quorum asked again after a back-off, by reason",
                ),
                &["reason"],
            )?,
            timeout_votes_hastened: IntCounterVec::new(
                Opts::new(
                    "timeout_votes_hastened_total",
                    "Timeout votes waiting for a back-off asked again early: the escrow drains, or a verifier came back",
                ),
                &["why"],
            )?,
            reach: IntCounterVec::new(
                Opts::new(
                    "reach_total",
                    "Host reachability events: hosts unreachable and back, the gate, probes, nonces withheld, requests refused",
                ),
                &["event"],
            )?,
            timeout_voters_behind: IntCounter::new(
                "timeout_voters_behind_total",
                "Verifiers below the diff window left out of a first timeout vote round",
            )?,
            escrows_owned: IntGauge::new(
                "escrows_owned",
                "Escrows this replica owns (lease held, actor running) when replicas share a store",
            )?,
            escrow_handoffs: IntCounterVec::new(
                Opts::new(
                    "escrow_handoffs_total",
                    "Escrows that changed hands on this replica, by reason",
                ),
                &["reason"],
            )?,
        };
        for reason in HANDOFF_REASONS {
            m.escrow_handoffs.with_label_values(&[reason]);
        }
        for event in crate::escrow::reach::EVENTS {
            m.reach.with_label_values(&[event]);
        }
        registry.register(Box::new(m.reach.clone()))?;
        registry.register(Box::new(m.escrows_owned.clone()))?;
        registry.register(Box::new(m.escrow_handoffs.clone()))?;
        registry.register(Box::new(m.attempts.clone()))?;
        registry.register(Box::new(m.nonces.clone()))?;
        registry.register(Box::new(m.restarts.clone()))?;
        registry.register(Box::new(m.diff_durable_seconds.clone()))?;
        registry.register(Box::new(m.attempt_seconds.clone()))?;
        registry.register(Box::new(m.timeouts.clone()))?;
        registry.register(Box::new(m.late_finishes.clone()))?;
        registry.register(Box::new(m.participants.clone()))?;
        registry.register(Box::new(m.ejections.clone()))?;
        registry.register(Box::new(m.strikes.clone()))?;
        registry.register(Box::new(m.escrow_leases_lost.clone()))?;
        registry.register(Box::new(m.diffs_deferred_at_nonce_limit.clone()))?;
        registry.register(Box::new(m.escrow_restores.clone()))?;
        registry.register(Box::new(m.escrow_checkpoints.clone()))?;
        for from in crate::escrow::session::checkpoint::RestoredFrom::ALL {
            m.escrow_restores.with_label_values(&[from.as_str()]);
        }
        registry.register(Box::new(m.ejections_suppressed.clone()))?;
        registry.register(Box::new(m.recovery_seconds.clone()))?;
        registry.register(Box::new(m.hedges.clone()))?;
        registry.register(Box::new(m.hedges_skipped.clone()))?;
        registry.register(Box::new(m.hedge_tokens.clone()))?;
        registry.register(Box::new(m.shared_faults.clone()))?;
        registry.register(Box::new(m.panic_mode.clone()))?;
        registry.register(Box::new(m.suspect_winners.clone()))?;
        registry.register(Box::new(m.losers_drained.clone()))?;
        registry.register(Box::new(m.execution_deadlines.clone()))?;
        registry.register(Box::new(m.mempool_foreign_txs.clone()))?;
        registry.register(Box::new(m.repairs_active.clone()))?;
        registry.register(Box::new(m.repair_attempts.clone()))?;
        registry.register(Box::new(m.repair_unblock_seconds.clone()))?;
        registry.register(Box::new(m.catch_up_chunks.clone()))?;
        registry.register(Box::new(m.diffs_from_store.clone()))?;
        registry.register(Box::new(m.idle_compactions.clone()))?;
        registry.register(Box::new(m.host_sync_rewinds.clone()))?;
        registry.register(Box::new(m.catch_up_diffs.clone()))?;
        registry.register(Box::new(m.gap_resends.clone()))?;
        registry.register(Box::new(m.link_wait_seconds.clone()))?;
        registry.register(Box::new(m.link_overtaken.clone()))?;
        registry.register(Box::new(m.timeout_votes_running.clone()))?;
        registry.register(Box::new(m.timeout_vote_retries.clone()))?;
        registry.register(Box::new(m.timeout_txs_batched.clone()))?;
        registry.register(Box::new(m.timeout_votes_hastened.clone()))?;
        registry.register(Box::new(m.timeout_voters_behind.clone()))?;
        Ok(m)
    }

    /// Handles registered into a private registry (tests that do not read metrics).
    pub fn detached() -> Result<ActorMetrics, prometheus::Error> {
        ActorMetrics::register(&Registry::new())
    }
}
