//! A policy-level model of escrows and their hosts, run through the intended call order: every
//! failure goes to the escrow's correlation guard first; only failures it confirms become strikes;
//! successes feed probation, peer evidence and confirmation. Random schedules of time advances,
//! successes, single-host faults and shared bursts check invariants 1, 3 and 8 after every step.

use std::collections::BTreeSet;

use devshard_actors::{
    outcome::OutcomeClass,
    policy::{
        correlation::{FaultSignature, HeldFault, SharedFaultDetector},
        health::{
            is_routable, on_outcome, tick, EjectionContext, EscrowView, HealthEffect, HealthState,
            HealthStatus, OutcomeFacts,
        },
        reason::OutcomeReason,
        settings::HealthSettings,
    },
};

use super::common::T0;

/// (class, status, reason, message with `{}` for a varying number).
pub const FAULTS: [(OutcomeClass, Option<u16>, OutcomeReason, &str); 11] = [
    (
        OutcomeClass::HostFault,
        None,
        OutcomeReason::ConnectFailed,
        "connection refused",
    ),
    (
        OutcomeClass::HostFault,
        Some(500),
        OutcomeReason::HostError,
        "internal error {}",
    ),
    (
        OutcomeClass::HostFault,
        None,
        OutcomeReason::EmptyStream,
        "",
    ),
    (
        OutcomeClass::HostFault,
        None,
        OutcomeReason::InvalidReceipt,
        "bad receipt signature",
    ),
    (
        OutcomeClass::HostFault,
        None,
        OutcomeReason::Stalled,
        "no progress for {}s",
    ),
    (
        OutcomeClass::HostFault,
        Some(401),
        OutcomeReason::TimestampDrift,
        "timestamp drift {}s exceeds maximum 30s",
    ),
    (
        OutcomeClass::Overload,
        Some(429),
        OutcomeReason::RateLimited,
        "slow down",
    ),
    (
        OutcomeClass::EscrowFault,
        Some(403),
        OutcomeReason::NotEscrowOwner,
        "restricted to escrow owner",
    ),
    (
        OutcomeClass::RequestFault,
        Some(400),
        OutcomeReason::BadRequest,
        "context length {} exceeded",
    ),
    (
        OutcomeClass::PendingFinish,
        None,
        OutcomeReason::FinishPending,
        "",
    ),
    (OutcomeClass::Cancelled, None, OutcomeReason::Cancelled, ""),
];

#[derive(Clone, Debug)]
pub enum Ev {
    Advance(i64),
    Success {
        escrow: usize,
        pick: usize,
    },
    Fault {
        escrow: usize,
        pick: usize,
        kind: usize,
        num: u32,
    },
    /// Every host of the escrow fails the same way, `gap` ms apart (the whole burst within the window).
    Burst {
        escrow: usize,
        kind: usize,
        gap: i64,
    },
}

pub struct World {
    pub settings: HealthSettings,
    pub now: i64,
    pub hosts: Vec<HealthState>,
    pub escrows: Vec<Vec<usize>>,
    detectors: Vec<SharedFaultDetector<usize>>,
    last_success: Vec<Option<i64>>,
    any_success: bool,
    /// Every failure confirmed as its host's own.
    pub confirmed: Vec<HeldFault<usize>>,
    /// (host, time) of every failure that was part of a burst.
    pub burst_failures: BTreeSet<(usize, i64)>,
    pub ejections: usize,
    draws: u64,
}

impl World {
    pub fn new(settings: HealthSettings, n_hosts: usize, escrows: Vec<Vec<usize>>) -> World {
        World {
            detectors: escrows
                .iter()
                .map(|_| SharedFaultDetector::new(&settings))
                .collect(),
            settings,
            now: T0,
            hosts: vec![HealthState::default(); n_hosts],
            escrows,
            last_success: vec![None; n_hosts],
            any_success: false,
            confirmed: Vec::new(),
            burst_failures: BTreeSet::new(),
            ejections: 0,
            draws: 0,
        }
    }

    fn draw(&mut self) -> f64 {
        self.draws = self
            .draws
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.draws >> 33) % 2001) as f64 / 1000.0 - 1.0
    }

    fn host_of(&self, escrow: usize, pick: usize) -> (usize, usize) {
        let e = escrow % self.escrows.len();
        let members = &self.escrows[e];
        (e, members[pick % members.len()])
    }

    pub fn context(&self, h: usize) -> EjectionContext {
        let window = self.settings.peer_evidence_window_ms;
        let escrows = self
            .escrows
            .iter()
            .filter(|e| e.contains(&h))
            .map(|e| EscrowView {
                distinct: e.len() as u32,
                routable: e
                    .iter()
                    .filter(|&&g| is_routable(&self.hosts[g], self.now))
                    .count() as u32,
                peer_success_recent: e.iter().any(|&g| {
                    g != h && self.last_success[g].is_some_and(|t| self.now - t <= window)
                }),
            })
            .collect();
        EjectionContext {
            escrows,
            gateway_has_any_success: self.any_success,
        }
    }

    /// Applies final facts to host `h`, checking invariant 3 and the monotone deadline.
    fn apply(&mut self, h: usize, facts: &OutcomeFacts) {
        let ctx = self.context(h);
        let draw = self.draw();
        let before = self.hosts[h].clone();
        let (next, effects) = on_outcome(&before, facts, &ctx, &self.settings, self.now, draw);
        for effect in &effects {
            let HealthEffect::Ejected { until_ms, .. } = *effect else {
                continue;
            };
            self.ejections += 1;
            assert!(until_ms > self.now);
            if let HealthStatus::Ejected { until_ms: old, .. } = before.state {
                if self.now < old {
                    assert!(until_ms >= old, "a later ejection shortened the deadline");
                }
            }
            let was_routable = u32::from(is_routable(&before, self.now));
            for v in &ctx.escrows {
                let after = v.routable - was_routable;
                assert!(
                    after >= 1,
                    "an ejection left an escrow with no routable host"
                );
                let fraction = f64::from(after) / f64::from(v.distinct);
                assert!(
                    fraction >= self.settings.min_routable_fraction || v.peer_success_recent,
                    "an ejection went below the floor without peer evidence: {v:?}"
                );
            }
        }
        self.hosts[h] = next;
    }

    fn strike(&mut self, fault: HeldFault<usize>) {
        let facts = OutcomeFacts {
            winner: fault.signature.reason == OutcomeReason::Stalled,
            ..OutcomeFacts::new(fault.signature.class, fault.signature.reason)
        };
        self.apply(fault.host, &facts);
        self.confirmed.push(fault);
    }

    fn signature(kind: usize, num: u32) -> FaultSignature {
        let (class, status, reason, message) = FAULTS[kind % FAULTS.len()];
        FaultSignature::new(
            class,
            status,
            reason,
            &message.replace("{}", &num.to_string()),
        )
    }

    fn fail(&mut self, e: usize, h: usize, sig: FaultSignature) {
        if matches!(
            sig.class,
            OutcomeClass::PendingFinish | OutcomeClass::Cancelled
        ) {
            // Invariant 8: not a failure; no strike, nothing but the deadline replay.
            let (ticked, _) = tick(&self.hosts[h], &self.settings, self.now);
            self.apply(h, &OutcomeFacts::new(sig.class, sig.reason));
            assert_eq!(self.hosts[h], ticked, "a pending finish changed health");
            return;
        }
        // Shared: no strike for anyone; held: charged only once confirmed.
        let _ = self.detectors[e].record_failure(h, sig, self.now);
    }

    pub fn step(&mut self, ev: &Ev) {
        match *ev {
            Ev::Advance(ms) => {
                self.now += ms;
                for e in 0..self.detectors.len() {
                    for fault in self.detectors[e].release_due(self.now) {
                        self.strike(fault);
                    }
                }
            }
            Ev::Success { escrow, pick } => {
                let (e, h) = self.host_of(escrow, pick);
                self.last_success[h] = Some(self.now);
                self.any_success = true;
                for fault in self.detectors[e].record_success(&h, self.now, self.now) {
                    self.strike(fault);
                }
                self.apply(
                    h,
                    &OutcomeFacts::new(OutcomeClass::Success, OutcomeReason::Finished),
                );
            }
            Ev::Fault {
                escrow,
                pick,
                kind,
                num,
            } => {
                let (e, h) = self.host_of(escrow, pick);
                self.fail(e, h, Self::signature(kind, num));
            }
            Ev::Burst { escrow, kind, gap } => {
                let e = escrow % self.escrows.len();
                let kind = kind % 9; // failure classes only
                for (i, h) in self.escrows[e].clone().into_iter().enumerate() {
                    self.now += gap;
                    self.burst_failures.insert((h, self.now));
                    let shared = self.detectors[e].record_failure(
                        h,
                        Self::signature(kind, i as u32),
                        self.now,
                    );
                    if i > 0 {
                        assert!(
                            shared.is_some(),
                            "the second host of a burst did not make it shared"
                        );
                    }
                }
                self.now += 1;
            }
        }
        for (i, e) in self.escrows.iter().enumerate() {
            let routable = e
                .iter()
                .filter(|&&g| is_routable(&self.hosts[g], self.now))
                .count();
            assert!(routable >= 1, "escrow {i} has no routable host");
        }
    }
}
