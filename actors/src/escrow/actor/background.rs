//! Background catch-up, one concern of the escrow actor: a host that lacks more than
//! `reach_background_catch_up_diffs` diffs (restarted empty far behind, or back after an
//! ejection) is sent payload-less chunks by the escrow itself (`sync::catch_up_hosts` with that
//! one target), in rounds of 10 chunks whose answers are taken in as each ends, until it lacks
//! at most that many. Meanwhile its nonces pass
//! over it, and no client's attempt carries its catch-up (`escrow/reach/mod.rs` decides; the
//! hour-long chaos run's clients waited 46 s and more behind catch-ups of ≈ 120 000 diffs that
//! their attempts carried).
//!
//! **Keep-warm** (the 1 s `sync_persist` tick, [`EscrowActor::keep_hosts_warm`]): a host that
//! gets no nonces (ejected, passed over) falls behind by every nonce the others serve, so when
//! they fail it cannot take over before a catch-up of thousands of diffs. Run J (seed `long-1`,
//! 576 s): one host served escrow 69 alone at nonce 7 314 while the four others held 93 to
//! 1 801; that host and three others restarted empty, every host needed a background catch-up
//! (2.6–3.7 s on the loaded machine), the 99 races of the concurrency limit waited for them
//! and the recovery probe timed out. Now, once a second, the reachable host that lacks the most
//! diffs beyond `reach_keep_warm_diffs` (and is neither catching up nor diverged) gets a
//! background catch-up round, so every host stays within about that many diffs of the escrow.
//!
//! Owns nothing but the host's reachability mark (`Reachability::syncing`), which its last round
//! clears. Nothing survives a restart: a respawned escrow finds the far host again at its next
//! nonce or nonce gap. Timers: `background_catch_up_retry` (a round that failed is run again
//! `reach_probe_interval_ms` later; one whose answers moved the host nowhere, later each time
//! up to 32 times that, [`retry_wait`]).

use std::{collections::BTreeSet, time::Duration};

use actix::prelude::*;
use slog::{info, warn};

use super::{super::sync, EscrowActor};
use crate::{protocol::crypto::Address, protocol::state::Phase, stats::timers};

/// Catch-up chunks in one background round (2 000 diffs at the default chunk of 200).
const ROUND_CHUNKS: u64 = 10;

impl EscrowActor {
    /// Starts `host`'s background catch-up, unless something already carries it.
    pub(super) fn start_background_catch_up(&mut self, host: &Address, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        if !self.reach.syncing(host, now) {
            return;
        }
        self.routing.set_catching(host, true);
        info!(self.deps.log, "a host lacks more diffs than a request may carry: it is caught up in the background and its nonces pass over it";
            "stage" => "background_catch_up_started", "host" => host.short(),
            "lacks" => self.session.lacks(host), "sync" => self.session.host_sync(host));
        self.count_reach("background_started");
        self.background_round(host.clone(), 0, ctx);
    }

    /// Keep-warm (module docs): one background round for the reachable host that lacks the
    /// most diffs beyond `reach_keep_warm_diffs`, unless it is catching up, diverged or the
    /// escrow no longer serves.
    pub(super) fn keep_hosts_warm(&mut self, ctx: &mut Context<Self>) {
        let above = self.deps.cfg.reach_keep_warm_diffs;
        if above == 0 || self.session.state().phase() != Phase::Active {
            return;
        }
        let hosts: BTreeSet<&Address> = self
            .session
            .info()
            .hosts
            .iter()
            .map(|h| &h.address)
            .collect();
        let lags = hosts.into_iter().filter_map(|h| {
            let eligible = !self.reach.is_unreachable(h)
                && !self.reach.is_catching_up(h)
                && !self.routing.is_repairing(h)
                && !self.routing.has_given_up(h);
            eligible.then(|| (h.clone(), self.session.lacks(h)))
        });
        let Some(host) = coldest(lags, above) else {
            return;
        };
        info!(self.deps.log, "a host fell behind while it got no nonces: a background round keeps it warm";
            "stage" => "keep_warm_started", "host" => host.short(),
            "lacks" => self.session.lacks(&host));
        self.count_reach("keep_warm");
        self.start_background_catch_up(&host, ctx);
    }

    /// One round: the next [`ROUND_CHUNKS`] chunks of diffs the host lacks, once durable (the
    /// store's flush covers every diff composed so far). Its answers are taken in at its end, so
    /// the host's sync point (what votes judge a verifier's distance by, and what a restart
    /// resumes from) moves every round, not once at the end of a catch-up of a minute or more.
    /// `stuck`: the rounds before it in a row that moved the host nowhere.
    fn background_round(&mut self, host: Address, stuck: u32, ctx: &mut Context<Self>) {
        let ready = Some(self.deps.store.flush());
        let chunk = u64::try_from(self.deps.cfg.catch_up_chunk.max(1)).unwrap_or(u64::MAX);
        let round = chunk.saturating_mul(ROUND_CHUNKS);
        let sends = sync::catch_up_hosts(
            &self.session,
            sync::Targets::One { host: &host, round },
            &self.deps,
            ready,
            false,
        );
        let from = self.session.host_sync(&host);
        ctx.spawn(sends.into_actor(self).map(move |res, act, ctx| {
            let failed = match res {
                Ok(answers) => act.absorb_sync_answers(answers, ctx).map(|e| e.to_string()),
                Err(e) => Some(format!("the store did not flush: {e}")),
            };
            act.background_round_done(host, (from, stuck), failed, ctx);
        }));
    }

    /// After a round: another while the host still lacks too many (and the last one moved it),
    /// a retry after the probe interval when it failed or moved the host nowhere, else the
    /// catch-up is over and the host takes nonces again.
    fn background_round_done(
        &mut self,
        host: Address,
        (from, stuck): (u64, u32),
        failed: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        if !self.reach.is_syncing(&host) {
            return;
        }
        if failed.is_none() {
            self.reach_answered(&host, ctx);
        }
        let lacks = self.session.lacks(&host);
        let sync = self.session.host_sync(&host);
        let active = self.session.state().phase() == Phase::Active;
        let routable = !self.routing.is_withheld(&host);
        let far = self.reach.is_far(lacks);
        if active && routable && failed.is_none() && far && sync > from {
            return self.background_round(host, 0, ctx);
        }
        // A round whose answers were all refused (a wrong state hash) moved the host nowhere:
        // it is retried like a failed one, later each time. It used to end the catch-up, and the
        // host's next nonce started another at once: ≈ 100 rounds a second of 2 000 diffs each
        // while the host lied (chaos, the seed of `e9cc4bc`'s hash).
        let nowhere = failed.is_none() && far && sync <= from;
        let failed = failed
            .or_else(|| nowhere.then(|| format!("no answer moved the host past nonce {sync}")));
        if let Some(error) = failed.filter(|_| active && routable) {
            warn!(self.deps.log, "a background catch-up round failed: it runs again after the probe interval";
                "stage" => "background_catch_up_failed", "host" => host.short(),
                "lacks" => lacks, "sync" => sync, "error" => error);
            self.count_reach("background_failed");
            let stuck = if nowhere {
                stuck.saturating_add(1)
            } else {
                stuck
            };
            let wait = retry_wait(self.deps.cfg.reach_probe_interval_ms, stuck);
            let name = "background_catch_up_retry";
            timers::run_later(&self.stats, ctx, name, wait, move |act, ctx| {
                act.background_round(host, stuck, ctx);
            });
            return;
        }
        self.reach.sync_over(&host);
        self.routing.set_catching(&host, false);
        info!(self.deps.log, "a host's background catch-up is over: it takes nonces again";
            "stage" => "background_catch_up_done", "host" => host.short(), "lacks" => lacks,
            "sync" => sync, "waiting" => self.picker.len());
        self.count_reach("background_done");
        self.release_resends(&host);
        self.pump(ctx);
    }
}

/// Doublings of the retry wait after rounds that moved the host nowhere (250 ms → 8 s).
const MAX_STUCK_DOUBLINGS: u32 = 5;

/// The wait before a background round is run again: the probe interval, doubled for each round
/// in a row that moved the host nowhere (at most [`MAX_STUCK_DOUBLINGS`] times). A round that
/// failed to send keeps the probe interval: the host is back as soon as it answers.
fn retry_wait(probe_ms: u64, stuck: u32) -> Duration {
    let probe_ms = probe_ms.max(1);
    let most = Duration::from_millis(probe_ms.saturating_mul(1 << MAX_STUCK_DOUBLINGS));
    crate::policy::backoff::doubled(Duration::from_millis(probe_ms), stuck, most)
}

/// The host lacking the most diffs beyond `above` (ties: the first), if any.
fn coldest(lags: impl Iterator<Item = (Address, u64)>, above: u64) -> Option<Address> {
    lags.filter(|(_, lacks)| *lacks > above)
        .min_by_key(|(_, lacks)| std::cmp::Reverse(*lacks))
        .map(|(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_that_moved_the_host_nowhere_is_retried_later_each_time() {
        let waits: Vec<u64> = (0..8)
            .map(|s| retry_wait(250, s).as_millis() as u64)
            .collect();
        assert_eq!(waits, [250, 500, 1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
        assert_eq!(retry_wait(0, 0), Duration::from_millis(1));
        assert_eq!(retry_wait(u64::MAX, 9), Duration::from_millis(u64::MAX));
    }

    #[test]
    fn the_host_lacking_the_most_beyond_the_bound_is_kept_warm_first() {
        let a = |s: &str| Address::unchecked(s);
        let lags = || {
            vec![
                (a("h1"), 40),
                (a("h2"), 900),
                (a("h3"), 1_500),
                (a("h4"), 1_500),
            ]
        };
        assert_eq!(coldest(lags().into_iter(), 1_000), Some(a("h3")));
        assert_eq!(coldest(lags().into_iter(), 1_500), None);
        assert_eq!(coldest(lags().into_iter(), 0), Some(a("h3")));
        assert_eq!(coldest(std::iter::empty(), 0), None);
    }
}
