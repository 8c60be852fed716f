//! Host routing, one part of the escrow actor (docs/health.md §2, §4, §6): the latest health of each
//! participant, the hosts withheld in this escrow (ejected, under repair, repair given up), panic
//! mode, the hedge token bucket and the repair actors of diverged participants.
//!
//! Ejected participants are withheld (their nonces become diffs without inference); when that,
//! together with the diverged ones, would leave no routable host the escrow enters panic mode and
//! races its ejected hosts anyway (docs/health.md §2 floor, invariant 3). Diverged participants are
//! withheld even in panic mode; when they are all that is left, their repairs tick at once. The
//! withheld set is recomputed from its inputs and committed by swap. Hedge and pair decisions
//! over this view are in `hedging.rs`.

use std::collections::{BTreeMap, BTreeSet};

use slog::{info, warn, Logger};

use crate::{
    metrics::ActorMetrics,
    policy::{
        health::{self, HealthState, Preference},
        hedge::HedgeBudget,
        perf::PerfEstimates,
        settings::HealthSettings,
    },
    protocol::crypto::Address,
    repair::{
        messages::{RepairUrgently, StopRepair},
        RepairActor,
    },
    stats::TrackedAddr,
};

/// Least time between two urgent repair rounds of an escrow with no routable host.
const URGENT_REPAIR_GAP_MS: i64 = 500;

/// Panic mode (docs/health.md §2): every host is withheld, by ejection or divergence, or is
/// catching up from far behind (it serves nothing until its catch-up of thousands of diffs is
/// through), and at least one of them is ejected and not diverged (so there is someone to race
/// anyway). Seed long-1: four hosts ejected, the fifth restarted empty 122 000 nonces behind,
/// and every request of the escrow waited for its catch-up (≈ 47 s at 2 600 diffs a second)
/// until the limiter shed them and the recovery probe with them.
fn panic_mode(
    hosts: &[Address],
    (ejected, diverged): (&BTreeSet<Address>, &BTreeSet<Address>),
    catching: &BTreeSet<Address>,
) -> bool {
    !hosts.is_empty()
        && hosts
            .iter()
            .all(|h| ejected.contains(h) || diverged.contains(h) || catching.contains(h))
        && hosts
            .iter()
            .any(|h| ejected.contains(h) && !diverged.contains(h))
}

/// What the escrow knows about one participant's health.
#[derive(Debug, Clone, Default)]
pub struct HostHealth {
    pub health: HealthState,
    pub perf: PerfEstimates,
    pub routable: bool,
}

/// See the module docs.
pub(super) struct Routing {
    /// The escrow's distinct participants (immutable for its lifetime).
    hosts: Vec<Address>,
    /// Latest health and perf of each participant of this escrow.
    health: BTreeMap<Address, HostHealth>,
    /// Participants we must not send inference to in this escrow.
    withheld: BTreeSet<Address>,
    /// No participant is routable: the least-bad hosts are raced anyway.
    panic_mode: bool,
    /// Participants catching up from far behind (`reach/mod.rs`): routable, but counted as unable
    /// to serve when panic mode is decided.
    catching: BTreeSet<Address>,
    /// Hedge token bucket (docs/health.md §4).
    budget: HedgeBudget,
    /// One repair actor per diverged participant (docs/health.md §6).
    repairs: BTreeMap<Address, TrackedAddr<RepairActor>>,
    /// Diverged participants whose repair gave up (still withheld).
    gave_up: BTreeSet<Address>,
    /// When the repairs were last asked to tick at once (`kick_repairs`).
    last_kick_ms: Option<i64>,
    log: Logger,
    metrics: ActorMetrics,
}

impl Routing {
    pub(super) fn new(
        hosts: Vec<Address>,
        settings: &HealthSettings,
        log: Logger,
        metrics: ActorMetrics,
    ) -> Routing {
        Routing {
            hosts,
            health: BTreeMap::new(),
            withheld: BTreeSet::new(),
            panic_mode: false,
            catching: BTreeSet::new(),
            budget: HedgeBudget::new(settings),
            repairs: BTreeMap::new(),
            gave_up: BTreeSet::new(),
            last_kick_ms: None,
            log,
            metrics,
        }
    }

    /// A participant's health changed (ignored for addresses outside this escrow).
    pub(super) fn set_health(&mut self, address: Address, health: HostHealth) -> bool {
        if !self.hosts.contains(&address) {
            return false;
        }
        self.health.insert(address, health);
        self.recompute_withheld();
        true
    }

    /// Withheld = participants not routable by health, plus diverged ones. When that would leave
    /// no participant, panic mode races the ejected ones anyway (docs/health.md §2); the diverged
    /// stay withheld even then (§6.1), so an escrow whose every host is diverged has no routable
    /// host until a repair verifies our root (`kick_repairs`).
    fn recompute_withheld(&mut self) {
        let diverged: BTreeSet<Address> = self
            .repairs
            .keys()
            .chain(self.gave_up.iter())
            .cloned()
            .collect();
        let ejected: BTreeSet<Address> = self
            .hosts
            .iter()
            .filter(|a| self.health.get(*a).is_some_and(|h| !h.routable))
            .cloned()
            .collect();
        let panic = panic_mode(&self.hosts, (&ejected, &diverged), &self.catching);
        if panic && !self.panic_mode {
            warn!(self.log, "no routable host; racing the least-bad hosts anyway";
                "stage" => "panic_mode_entered", "hosts" => self.hosts.len(),
                "diverged" => diverged.len(), "catching_up" => self.catching.len());
            self.metrics.panic_mode.inc();
        } else if !panic && self.panic_mode {
            info!(self.log, "a host is routable again"; "stage" => "panic_mode_left");
        }
        self.panic_mode = panic;
        let mut withheld = diverged;
        if !panic {
            withheld.extend(ejected);
        }
        self.withheld = withheld;
    }

    /// No host can serve now (each one diverged, diverged and given up, or catching up from far
    /// behind): asks every repair to tick now, at most once per [`URGENT_REPAIR_GAP_MS`]. A host
    /// that only lied in a receipt, or that caught up, is unblocked by its verified signature
    /// instead of after its back-off. Chaos (the seed of `e9cc4bc`'s hash, invariant 3): four
    /// hosts lied about their state hash and were withheld for repair, the fifth was catching
    /// up 5 600 diffs behind; after the clear the recovery probe waited for that catch-up,
    /// while the four repairs waited for their 15 s back-off.
    pub(super) fn kick_repairs(&mut self, now_ms: i64) {
        if !self.none_serving() || self.repairs.is_empty() {
            return;
        }
        if self
            .last_kick_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < URGENT_REPAIR_GAP_MS)
        {
            return;
        }
        self.last_kick_ms = Some(now_ms);
        for (host, repair) in &self.repairs {
            if !self.gave_up.contains(host) {
                repair.do_send(RepairUrgently);
            }
        }
    }

    /// `host` began (`true`) or ended a catch-up from far behind: panic mode follows.
    pub(super) fn set_catching(&mut self, host: &Address, catching: bool) {
        let changed = if catching {
            self.catching.insert(host.clone())
        } else {
            self.catching.remove(host)
        };
        if changed {
            self.recompute_withheld();
        }
    }

    pub(super) fn is_withheld(&self, host: &Address) -> bool {
        self.withheld.contains(host)
    }

    /// Whether every distinct host is withheld.
    pub(super) fn none_routable(&self) -> bool {
        !self.hosts.is_empty() && self.withheld.len() >= self.hosts.len()
    }

    /// Whether every distinct host is withheld or catching up from far behind.
    fn none_serving(&self) -> bool {
        !self.hosts.is_empty()
            && self
                .hosts
                .iter()
                .all(|h| self.withheld.contains(h) || self.catching.contains(h))
    }

    /// Distinct and routable participants (for the escrow view of an outcome).
    pub(super) fn counts(&self) -> (u32, u32) {
        let routable = self
            .hosts
            .iter()
            .filter(|h| !self.withheld.contains(*h))
            .count();
        (
            u32::try_from(self.hosts.len()).unwrap_or(u32::MAX),
            u32::try_from(routable).unwrap_or(u32::MAX),
        )
    }

    /// Hosts not withheld, in group order.
    pub(super) fn routable_hosts(&self) -> Vec<Address> {
        self.hosts
            .iter()
            .filter(|h| !self.withheld.contains(*h))
            .cloned()
            .collect()
    }

    /// Latest health and perf of a participant (defaults when unknown).
    pub(super) fn health_of(&self, host: &Address) -> (HealthState, PerfEstimates) {
        self.health
            .get(host)
            .map_or((HealthState::default(), PerfEstimates::default()), |h| {
                (h.health.clone(), h.perf.clone())
            })
    }

    /// Routing preference of a participant (Healthy unless known otherwise).
    pub(super) fn preference(&self, host: &Address) -> Preference {
        self.health
            .get(host)
            .map_or(Preference::Healthy, |h| health::preference(&h.health))
    }

    /// Whether any routable participant is Healthy.
    pub(super) fn healthy_available(&self) -> bool {
        self.hosts
            .iter()
            .any(|h| !self.withheld.contains(h) && self.preference(h) == Preference::Healthy)
    }

    /// A primary request arrived: the hedge bucket earns its share.
    pub(super) fn on_primary(&mut self, settings: &HealthSettings) {
        self.budget.on_request(settings);
        self.metrics.hedge_tokens.set(self.budget.tokens());
    }

    pub(super) fn hedge_budget_available(&self) -> bool {
        self.budget.available()
    }

    /// Spends one hedge token; `false` when the bucket is empty.
    pub(super) fn spend_hedge_token(&mut self) -> bool {
        let spent = self.budget.try_spend();
        if spent {
            self.metrics.hedge_tokens.set(self.budget.tokens());
        }
        spent
    }

    pub(super) fn is_repairing(&self, host: &Address) -> bool {
        self.repairs.contains_key(host)
    }

    pub(super) fn has_given_up(&self, host: &Address) -> bool {
        self.gave_up.contains(host)
    }

    /// A diverged participant got its repair actor: it is withheld here until unblocked.
    pub(super) fn add_repair(&mut self, host: Address, repair: TrackedAddr<RepairActor>) {
        self.repairs.insert(host, repair);
        self.recompute_withheld();
    }

    /// The repair of `host`, if it is under repair.
    pub(super) fn repair(&self, host: &Address) -> Option<&TrackedAddr<RepairActor>> {
        self.repairs.get(host)
    }

    /// Every running repair (debug listing).
    pub(super) fn repairs(&self) -> Vec<TrackedAddr<RepairActor>> {
        self.repairs.values().cloned().collect()
    }

    /// A repair gave up: its participant stays withheld (its nonces become ghosts).
    pub(super) fn repair_gave_up(&mut self, host: Address) {
        self.gave_up.insert(host);
        self.recompute_withheld();
    }

    /// Our root was signed by `host`: its block is lifted.
    pub(super) fn unblock(&mut self, host: &Address) {
        if self.repairs.remove(host).is_some() {
            self.gave_up.remove(host);
            self.recompute_withheld();
        }
    }

    /// An admin `forget` of a participant lifts its divergence block here.
    pub(super) fn forget_divergence(&mut self, host: &Address) {
        if let Some(addr) = self.repairs.remove(host) {
            addr.do_send(StopRepair);
        }
        self.gave_up.remove(host);
        self.recompute_withheld();
    }

    /// Stops every repair (escrow stopping or retired).
    pub(super) fn stop_repairs(&mut self) {
        for (_, addr) in std::mem::take(&mut self.repairs) {
            addr.do_send(StopRepair);
        }
    }

    /// Debug view: participants under repair, given up, panic mode, withheld.
    pub(super) fn snapshot(&self) -> (Vec<String>, Vec<String>, bool, Vec<String>) {
        (
            self.repairs.keys().map(ToString::to_string).collect(),
            self.gave_up.iter().map(ToString::to_string).collect(),
            self.panic_mode,
            self.withheld.iter().map(ToString::to_string).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> Address {
        Address::unchecked(format!("gonka1host{i}"))
    }

    fn set(xs: &[u8]) -> BTreeSet<Address> {
        xs.iter().map(|i| addr(*i)).collect()
    }

    #[test]
    fn panic_mode_counts_diverged_hosts_but_needs_an_ejected_one_to_race() {
        let hosts: Vec<Address> = (1..=4).map(addr).collect();
        let none = set(&[]);
        let panic = |ejected: &[u8], diverged: &[u8]| {
            panic_mode(&hosts, (&set(ejected), &set(diverged)), &none)
        };
        // Every host ejected: the classic panic.
        assert!(panic(&[1, 2, 3, 4], &[]));
        // Two diverged, two ejected: nothing routable, the ejected two are raced.
        assert!(panic(&[3, 4], &[1, 2]));
        // A host left routable: no panic.
        assert!(!panic(&[3], &[1, 2]));
        // Every host diverged: nobody may be raced (docs/health.md §6.1); repairs are kicked.
        assert!(!panic(&[], &[1, 2, 3, 4]));
        assert!(!panic(&[1, 2], &[1, 2, 3, 4]));
        assert!(!panic_mode(&[], (&none, &none), &none));
    }

    #[test]
    fn seed_long_1_the_only_routable_host_catching_up_from_far_behind_races_the_ejected_ones() {
        let hosts: Vec<Address> = (1..=4).map(addr).collect();
        let (ejected, diverged) = (set(&[2, 3]), set(&[4]));
        // Host 1 serves alone: no panic.
        assert!(!panic_mode(&hosts, (&ejected, &diverged), &set(&[])));
        // Host 1 catches up from far behind: the ejected hosts are raced meanwhile.
        assert!(panic_mode(&hosts, (&ejected, &diverged), &set(&[1])));
        // Nobody ejected to race: no panic (the catch-up is waited for).
        assert!(!panic_mode(
            &hosts,
            (&set(&[]), &set(&[2, 3, 4])),
            &set(&[1])
        ));
        // Another routable host that is not catching up: no panic.
        assert!(!panic_mode(&hosts, (&set(&[2]), &diverged), &set(&[1])));
    }
}
