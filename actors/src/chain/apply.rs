//! How the [`ChainPoller`] turns answers into snapshots: last-known-good replacement, change
//! detection (epoch, phase, participants, versions), the set of versions pollers, staleness
//! transitions and gauges, and the [`ChainView`].

use std::collections::{BTreeMap, BTreeSet};

use actix::prelude::*;
use slog::{info, warn, Logger};

use super::{
    messages::ChainChange,
    metrics::{ChainMetrics, MINER_HOST_LABEL},
    poller::ChainPoller,
    schedule::{authority, Endpoint, Target},
    settings::STALE_AFTER_INTERVALS,
    snapshot::{parse_epoch, parse_participants, parse_versions, EpochInfo, PhaseKind},
    view::{
        older_than, ChainView, EndpointStatus, EpochSnapshot, ParticipantsSnapshot,
        VersionsSnapshot, ENDPOINT_VERSIONS,
    },
};

/// Longest spread of the first versions polls of newly seen miners.
const FIRST_VERSIONS_SPREAD_MAX_MS: u64 = 30_000;

/// The phase as one name: the raw phase, plus an active confirmation PoC's phase.
fn phase_name(e: &EpochSnapshot) -> String {
    match e.info.confirmation_poc {
        Some((p, _)) if p.is_active() => {
            format!("{} (confirmation PoC {p:?})", e.info.phase.as_str())
        }
        _ => e.info.phase.as_str().to_owned(),
    }
}

fn kind_label(kind: PhaseKind) -> &'static str {
    match kind {
        PhaseKind::Inference => "inference",
        PhaseKind::PoC => "poc",
        PhaseKind::ConfirmationPoC => "confirmation_poc",
    }
}

/// Updates `ep.stale` at `now`; logs and counts a transition.
fn check_stale(
    ep: &mut Endpoint,
    interval_ms: u64,
    now: i64,
    log: &Logger,
    metrics: &ChainMetrics,
) -> Option<ChainChange> {
    let bound = interval_ms.saturating_mul(STALE_AFTER_INTERVALS);
    let stale = older_than(ep.last_ok_ms.unwrap_or(ep.created_ms), bound, now);
    if stale == ep.stale {
        return None;
    }
    ep.stale = stale;
    let endpoint = ep.target.label();
    let miner = match &ep.target {
        Target::Versions(a) => Some(a.clone()),
        _ => None,
    };
    let age_ms = ep.last_ok_ms.map(|t| now - t);
    if stale {
        warn!(log, "chain snapshot stale; routing stops trusting it";
            "stage" => "chain_snapshot_stale", "endpoint" => endpoint, "miner" => &miner,
            "age_ms" => age_ms, "stale_after_ms" => bound);
        metrics
            .stale_transitions
            .with_label_values(&[endpoint])
            .inc();
        Some(ChainChange::BecameStale { endpoint, miner })
    } else {
        info!(log, "chain snapshot fresh again";
            "stage" => "chain_snapshot_fresh", "endpoint" => endpoint, "miner" => &miner);
        Some(ChainChange::BecameFresh { endpoint, miner })
    }
}

fn age_seconds(ep: &Endpoint, now: i64) -> f64 {
    ep.last_ok_ms
        .map_or(f64::INFINITY, |t| (now - t).max(0) as f64 / 1_000.0)
}

impl ChainPoller {
    /// Parses a 200 body of `target` and stores it; `Err` leaves every snapshot as it was.
    pub(super) fn apply_body(
        &mut self,
        target: &Target,
        body: &[u8],
        now: i64,
        ctx: &mut Context<Self>,
    ) -> Result<Vec<ChainChange>, String> {
        match target {
            Target::Epochs => Ok(self.apply_epoch(parse_epoch(body)?, now, ctx)),
            Target::Participants => {
                let list = parse_participants(body)?;
                let changed = self
                    .participant_list
                    .as_ref()
                    .is_none_or(|p| p.participants != list);
                self.participant_list = Some(ParticipantsSnapshot {
                    participants: list,
                    observed_at_ms: now,
                    epoch_index: self.epoch.as_ref().map(|e| e.info.epoch_index),
                });
                self.sync_miners(ctx);
                Ok(if changed {
                    vec![ChainChange::ParticipantsChanged]
                } else {
                    Vec::new()
                })
            }
            Target::Versions(miner) => {
                let nodes = parse_versions(body)?;
                let changed = self.versions.get(miner).is_none_or(|v| v.nodes != nodes);
                let snap = VersionsSnapshot {
                    nodes,
                    observed_at_ms: now,
                };
                self.versions.insert(miner.clone(), snap);
                Ok(if changed {
                    vec![ChainChange::VersionsChanged {
                        miner: miner.clone(),
                    }]
                } else {
                    Vec::new()
                })
            }
        }
    }

    fn apply_epoch(
        &mut self,
        info: EpochInfo,
        now: i64,
        ctx: &mut Context<Self>,
    ) -> Vec<ChainChange> {
        self.block_clock.observe(now, info.block_height);
        let snap = EpochSnapshot::new(info, now, self.block_clock.block_time_ms());
        let prev = self.epoch.take();
        let mut changes = Vec::new();
        let from = prev.as_ref().map(|p| p.info.epoch_index);
        if from != Some(snap.info.epoch_index) {
            changes.push(ChainChange::EpochChanged {
                from,
                to: snap.info.epoch_index,
            });
            if prev.is_some() {
                info!(self.log, "chain epoch changed; refreshing participants";
                    "stage" => "chain_epoch_changed", "from" => from,
                    "to" => snap.info.epoch_index, "block_height" => snap.info.block_height);
                self.refresh_participants_now(ctx);
            }
        }
        let (old, new) = (prev.as_ref().map(phase_name), phase_name(&snap));
        if old.as_ref() != Some(&new) {
            info!(self.log, "chain phase changed";
                "stage" => "chain_phase_changed", "from" => &old, "to" => &new,
                "kind" => kind_label(snap.phase_kind), "epoch" => snap.info.epoch_index,
                "block_height" => snap.info.block_height,
                "block_time_ms" => snap.block_time_ms, "poc_end_ms" => snap.poc_end_ms);
            self.metrics
                .phase_changes
                .with_label_values(&[kind_label(snap.phase_kind)])
                .inc();
            changes.push(ChainChange::PhaseChanged {
                from: old,
                to: new,
                kind: snap.phase_kind,
                block_height: snap.info.block_height,
            });
        }
        self.epoch = Some(snap);
        changes
    }

    /// Participants on epoch change: now (through the gate), or right after the one in flight.
    fn refresh_participants_now(&mut self, ctx: &mut Context<Self>) {
        if self.participants.in_flight {
            self.participants.again = true;
        } else {
            let now = self.now();
            self.arm(Target::Participants, now, ctx);
        }
    }

    /// Makes the versions pollers match the participants list and the scope.
    pub(super) fn sync_miners(&mut self, ctx: &mut Context<Self>) {
        let mut wanted: BTreeMap<String, String> = BTreeMap::new();
        if let Some(list) = &self.participant_list {
            for p in list.participants.values() {
                let in_scope = self.scope.as_ref().is_none_or(|s| s.contains(&p.address));
                let base = p.inference_url.trim().trim_end_matches('/');
                if in_scope && !base.is_empty() {
                    wanted.insert(p.address.clone(), format!("{base}/v1/versions"));
                }
            }
        }
        let gone: Vec<String> = self
            .miners
            .iter()
            .filter(|(a, ep)| wanted.get(*a) != Some(&ep.url))
            .map(|(a, _)| a.clone())
            .collect();
        for addr in gone {
            if let Some(t) = self.miners.remove(&addr).and_then(|ep| ep.timer) {
                t.cancel(&self.stats, ctx);
            }
            self.versions.remove(&addr);
        }
        let now = self.now();
        let spread_max =
            (self.settings.versions_poll_interval_ms / 10).min(FIRST_VERSIONS_SPREAD_MAX_MS);
        for (addr, url) in wanted {
            if self.miners.contains_key(&addr) {
                continue;
            }
            let Some(host) = authority(&url) else {
                warn!(self.log, "miner inference_url has no host; not polling its versions";
                    "stage" => "chain_versions_skipped", "miner" => &addr, "url" => &url);
                continue;
            };
            let target = Target::Versions(addr.clone());
            self.miners
                .insert(addr, Endpoint::new(target.clone(), url, &host, now));
            let at = now + self.spread(spread_max);
            self.arm(target, at, ctx);
        }
    }

    /// Staleness transitions and gauges at `now`.
    pub(super) fn refresh_health(&mut self, now: i64) -> Vec<ChainChange> {
        let s = &self.settings;
        let (log, m) = (&self.log, &self.metrics);
        let mut changes = Vec::new();
        changes.extend(check_stale(
            &mut self.epochs,
            s.chain_phase_poll_interval_ms,
            now,
            log,
            m,
        ));
        changes.extend(check_stale(
            &mut self.participants,
            s.participants_poll_interval_ms,
            now,
            log,
            m,
        ));
        for ep in self.miners.values_mut() {
            changes.extend(check_stale(ep, s.versions_poll_interval_ms, now, log, m));
        }
        for ep in [&self.epochs, &self.participants] {
            let label = ep.target.label();
            m.snapshot_age
                .with_label_values(&[label])
                .set(age_seconds(ep, now));
            m.snapshot_stale
                .with_label_values(&[label])
                .set(i64::from(ep.stale));
        }
        let oldest = self
            .miners
            .values()
            .map(|ep| age_seconds(ep, now))
            .fold(0.0, f64::max);
        let any_stale = self.miners.values().any(|ep| ep.stale);
        m.snapshot_age
            .with_label_values(&[ENDPOINT_VERSIONS])
            .set(oldest);
        m.snapshot_stale
            .with_label_values(&[ENDPOINT_VERSIONS])
            .set(i64::from(any_stale));
        let api_backoff = self.gates.backoff_remaining_ms(&self.api_host, now);
        m.backoff
            .with_label_values(&[&self.api_host])
            .set(api_backoff as f64 / 1_000.0);
        let miner_backoff = self
            .miners
            .values()
            .filter(|ep| ep.host != self.api_host)
            .map(|ep| self.gates.backoff_remaining_ms(&ep.host, now))
            .max()
            .unwrap_or(0);
        m.backoff
            .with_label_values(&[MINER_HOST_LABEL])
            .set(miner_backoff as f64 / 1_000.0);
        changes
    }

    fn status(&self, ep: &Endpoint, now: i64) -> EndpointStatus {
        let interval_ms = self.interval_ms(&ep.target);
        let stale_after_ms = interval_ms.saturating_mul(STALE_AFTER_INTERVALS);
        EndpointStatus {
            endpoint: ep.target.label(),
            miner: match &ep.target {
                Target::Versions(a) => Some(a.clone()),
                _ => None,
            },
            url: ep.url.clone(),
            host: ep.host.clone(),
            interval_ms,
            stale_after_ms,
            last_ok_ms: ep.last_ok_ms,
            age_ms: ep.last_ok_ms.map(|t| now - t),
            stale: older_than(ep.last_ok_ms.unwrap_or(ep.created_ms), stale_after_ms, now),
            last_attempt_ms: ep.last_attempt_ms,
            last_status: ep.last_status.clone(),
            last_error: ep.last_error.clone(),
            consecutive_failures: ep.consecutive_failures,
            requests: ep.requests,
            in_flight: ep.in_flight,
            next_poll_ms: ep.next_due_ms,
            waiting_for: ep.waiting_for,
        }
    }

    /// The view at `now`.
    pub(super) fn view(&self, now: i64) -> ChainView {
        let mut endpoints = vec![
            self.status(&self.epochs, now),
            self.status(&self.participants, now),
        ];
        endpoints.extend(self.miners.values().map(|ep| self.status(ep, now)));
        let hosts: BTreeSet<&str> = std::iter::once(self.api_host.as_str())
            .chain(self.miners.values().map(|ep| ep.host.as_str()))
            .collect();
        let mut view = ChainView::empty(&self.api, self.settings.clone(), now);
        view.epoch = self.epoch.clone();
        view.participants = self.participant_list.clone();
        view.versions = self.versions.clone();
        view.endpoints = endpoints;
        view.hosts = self.gates.view(hosts, now);
        view
    }
}
