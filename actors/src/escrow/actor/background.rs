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
//! `reach_probe_interval_ms` later).

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
        self.background_round(host.clone(), ctx);
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
    fn background_round(&mut self, host: Address, ctx: &mut Context<Self>) {
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
            act.background_round_done(host, from, failed, ctx);
        }));
    }

    /// After a round: another while the host still lacks too many (and the last one moved it),
    /// a retry after the probe interval when it failed, else the catch-up is over and the host
    /// takes nonces again.
    fn background_round_done(
        &mut self,
        host: Address,
        from: u64,
        failed: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        if !self.reach.is_syncing(&host) {
            return;
        }
        let ok = failed.is_none();
        if ok {
            self.reach_answered(&host, ctx);
        }
        let lacks = self.session.lacks(&host);
        let sync = self.session.host_sync(&host);
        let active = self.session.state().phase() == Phase::Active;
        let routable = !self.routing.is_withheld(&host);
        if active && routable && ok && self.reach.is_far(lacks) && sync > from {
            return self.background_round(host, ctx);
        }
        if let Some(error) = failed.filter(|_| active && routable) {
            warn!(self.deps.log, "a background catch-up round failed: it runs again after the probe interval";
                "stage" => "background_catch_up_failed", "host" => host.short(),
                "lacks" => lacks, "sync" => sync, "error" => error);
            self.count_reach("background_failed");
            let wait = Duration::from_millis(self.deps.cfg.reach_probe_interval_ms.max(1));
            let name = "background_catch_up_retry";
            timers::run_later(&self.stats, ctx, name, wait, move |act, ctx| {
                act.background_round(host, ctx);
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
