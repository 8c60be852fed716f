//! What the escrow learns from participants: health changes (routability, preference, perf) and
//! live settings. Ejected participants are withheld in this escrow (their nonces become diffs
//! without inference); when that would leave no routable host the escrow enters panic mode and
//! races its hosts anyway (HEALTH.md §2 floor, invariant 3).

use std::sync::Arc;

use actix::prelude::*;
use slog::{info, warn};

use super::actor::{EscrowActor, HostHealth};
use crate::{
    participant::messages::{ApplyHealthSettings, HealthChanged},
    policy::health::Preference,
    protocol::crypto::Address,
};

impl Handler<HealthChanged> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: HealthChanged, ctx: &mut Self::Context) {
        if self.session.info().host(&msg.address).is_none() {
            return;
        }
        self.hosts_health.insert(
            msg.address.clone(),
            HostHealth {
                health: msg.health,
                perf: msg.perf,
                routable: msg.routable,
            },
        );
        self.recompute_withheld();
        self.pump(ctx);
    }
}

impl Handler<ApplyHealthSettings> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: ApplyHealthSettings, _: &mut Self::Context) {
        self.detector.set_settings(&msg.0);
        self.settings = Arc::clone(&msg.0);
    }
}

impl EscrowActor {
    /// Withheld = participants not routable by health (plus, later, those under repair). When no
    /// participant would be left, panic mode withholds nobody.
    pub(super) fn recompute_withheld(&mut self) {
        let hosts: Vec<Address> = self
            .session
            .info()
            .hosts
            .iter()
            .map(|h| h.address.clone())
            .collect();
        let ejected: Vec<Address> = hosts
            .iter()
            .filter(|a| self.hosts_health.get(*a).is_some_and(|h| !h.routable))
            .cloned()
            .collect();
        let panic = !hosts.is_empty() && ejected.len() == hosts.len();
        if panic && !self.panic_mode {
            warn!(self.log, "no routable host; racing the least-bad hosts anyway";
                "stage" => "panic_mode_entered", "hosts" => hosts.len());
            self.metrics.panic_mode.inc();
        } else if !panic && self.panic_mode {
            info!(self.log, "a host is routable again"; "stage" => "panic_mode_left");
        }
        self.panic_mode = panic;
        // Diverged participants are never sent inference, panic mode or not.
        let mut withheld: std::collections::BTreeSet<Address> = if panic {
            Default::default()
        } else {
            ejected.into_iter().collect()
        };
        withheld.extend(self.repairs.keys().cloned());
        withheld.extend(self.gave_up.iter().cloned());
        self.withheld = withheld;
    }

    /// Routing preference of a participant (Healthy unless known otherwise).
    pub(super) fn preference(&self, host: &Address) -> Preference {
        self.hosts_health
            .get(host)
            .map_or(Preference::Healthy, |h| {
                crate::policy::health::preference(&h.health)
            })
    }
}
