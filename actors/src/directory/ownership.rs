//! Which escrows this replica should own when several replicas share one store: the pure
//! decision [`plan_ownership`] (the directory runs it each round, `handoff.rs`).
//!
//! - **Fair share.** The registered escrows spread evenly over the live replicas (this one
//!   always counts as live): with `n` escrows and `r` replicas each gets `n / r`, and the first
//!   `n % r` replicas in id order one more. Every replica computes the same shares from the same
//!   view, so the plan needs no coordinator.
//! - **Claims.** Below its share, a replica claims escrows whose lease is free, expired, or its
//!   own (a restarted replica with the same id), its own first, then in an order of its own
//!   (rendezvous hash of replica and escrow), so replicas claiming together try different ones.
//! - **Releases.** Above its share while another live replica is below its own (past what the
//!   free escrows cover), it releases the surplus, the escrows it prefers least first.
//! - **Lost.** An escrow running here whose lease another replica holds is stopped.
//! - **When next.** Below its share with an escrow whose live lease belongs to a dead replica
//!   (heartbeat expired), the next round is due when that lease expires.

use std::collections::{BTreeMap, BTreeSet};

use crate::store::LeaseView;

/// How an escrow comes to this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// Never leased, or released by its owner.
    Free,
    /// Another replica's lease expired (it died or stopped renewing).
    TakeOver,
    /// This replica's own lease (a restart with the same id, or an actor that stopped here).
    Resume,
}

impl ClaimKind {
    /// Bounded label of the handoff metric.
    pub fn label(self) -> &'static str {
        match self {
            ClaimKind::Free => "claimed_free",
            ClaimKind::TakeOver => "taken_over",
            ClaimKind::Resume => "resumed",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnershipAction {
    /// Spawn the escrow here (its actor claims the lease).
    Claim { escrow: String, kind: ClaimKind },
    /// Hand the escrow over gracefully (drain, flush, release the lease).
    Release { escrow: String },
    /// Another replica holds the lease of an escrow running here: stop it.
    Lost { escrow: String, owner: String },
}

/// What one round decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnershipPlan {
    pub actions: Vec<OwnershipAction>,
    /// This replica's fair share.
    pub share: usize,
    /// Escrows it owns before the actions.
    pub owned: usize,
    /// Live replicas counted (this one included).
    pub replicas: usize,
    /// When a lease this replica could take expires (ms, by the database clock): the next round
    /// is due then.
    pub next_expiry_ms: Option<i64>,
}

/// What the plan reads.
#[derive(Debug, Clone, Copy)]
pub struct OwnershipInput<'a> {
    /// This replica's id.
    pub me: &'a str,
    /// Replicas whose heartbeat is live.
    pub live: &'a [String],
    /// Every registered escrow (the same set on every replica).
    pub registered: &'a BTreeSet<String>,
    /// Escrows with a running actor here (not being handed over).
    pub running: &'a BTreeSet<String>,
    /// Escrows this replica will not claim now (past their restart budget here, or being
    /// handed over).
    pub unclaimable: &'a BTreeSet<String>,
    pub leases: &'a [LeaseView],
}

/// Who holds an escrow, as the plan sees it.
enum Holder<'a> {
    Me,
    /// Another replica's unexpired lease.
    Other(&'a LeaseView),
    /// Claimable: free, expired, or this replica's lease without a running actor.
    Claimable(ClaimKind),
}

fn holder<'a>(
    input: &OwnershipInput<'a>,
    escrow: &str,
    lease: Option<&'a LeaseView>,
) -> Holder<'a> {
    match lease {
        Some(l) if l.owner == input.me => match input.running.contains(escrow) {
            true => Holder::Me,
            false => Holder::Claimable(ClaimKind::Resume),
        },
        Some(l) if l.expires_in_ms > 0 => Holder::Other(l),
        Some(l) if !l.owner.is_empty() => Holder::Claimable(ClaimKind::TakeOver),
        // No row, or never claimed: an escrow running here without a lease row is this
        // replica's (a store that does not lease).
        _ if input.running.contains(escrow) => Holder::Me,
        _ => Holder::Claimable(ClaimKind::Free),
    }
}

/// Fair shares of the live replicas (sorted ids, each with its share).
fn shares(live: &BTreeSet<&str>, escrows: usize) -> BTreeMap<String, usize> {
    let r = live.len().max(1);
    let (base, extra) = (escrows / r, escrows % r);
    live.iter()
        .enumerate()
        .map(|(i, id)| (id.to_string(), base + usize::from(i < extra)))
        .collect()
}

/// A replica's stable preference for an escrow (FNV-1a of both ids): lower is preferred.
fn preference(me: &str, escrow: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in me.bytes().chain([0u8]).chain(escrow.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Plans one ownership round (see the module docs).
pub fn plan_ownership(input: OwnershipInput<'_>) -> OwnershipPlan {
    let mut live: BTreeSet<&str> = input.live.iter().map(String::as_str).collect();
    live.insert(input.me);
    let shares = shares(&live, input.registered.len());
    let share = shares.get(input.me).copied().unwrap_or(0);
    let leases: BTreeMap<&str, &LeaseView> = input
        .leases
        .iter()
        .map(|l| (l.escrow_id.as_str(), l))
        .collect();

    let mut mine = Vec::new();
    let mut claimable = Vec::new();
    let mut held_by: BTreeMap<&str, usize> = BTreeMap::new();
    let mut next_expiry_ms: Option<i64> = None;
    let mut actions = Vec::new();
    for escrow in input.registered {
        let lease = leases.get(escrow.as_str()).copied();
        match holder(&input, escrow, lease) {
            Holder::Me => mine.push(escrow.as_str()),
            Holder::Other(l) => {
                if input.running.contains(escrow) {
                    actions.push(OwnershipAction::Lost {
                        escrow: escrow.clone(),
                        owner: l.owner.clone(),
                    });
                }
                if live.contains(l.owner.as_str()) {
                    *held_by.entry(l.owner.as_str()).or_default() += 1;
                } else if !input.unclaimable.contains(escrow) {
                    let at = l.expires_in_ms;
                    next_expiry_ms = Some(next_expiry_ms.map_or(at, |n| n.min(at)));
                }
            }
            Holder::Claimable(kind) => {
                if input.running.contains(escrow) {
                    // A taken-over lease that expired again: this actor's epoch is stale.
                    actions.push(OwnershipAction::Lost {
                        escrow: escrow.clone(),
                        owner: lease.map(|l| l.owner.clone()).unwrap_or_default(),
                    });
                }
                if !input.unclaimable.contains(escrow) {
                    claimable.push((escrow.as_str(), kind));
                }
            }
        }
    }
    let owned = mine.len();
    if owned < share {
        // Own leases first, then by this replica's preference.
        claimable.sort_by_key(|(e, kind)| (*kind != ClaimKind::Resume, preference(input.me, e)));
        actions.extend(claimable.iter().take(share - owned).map(|(e, kind)| {
            OwnershipAction::Claim {
                escrow: e.to_string(),
                kind: *kind,
            }
        }));
    } else if owned > share {
        let deficit: usize = shares
            .iter()
            .filter(|(id, _)| id.as_str() != input.me)
            .map(|(id, s)| s.saturating_sub(held_by.get(id.as_str()).copied().unwrap_or(0)))
            .sum();
        let uncovered = deficit.saturating_sub(claimable.len());
        mine.sort_by_key(|e| std::cmp::Reverse(preference(input.me, e)));
        actions.extend(mine.iter().take((owned - share).min(uncovered)).map(|e| {
            OwnershipAction::Release {
                escrow: e.to_string(),
            }
        }));
    }
    OwnershipPlan {
        actions,
        share,
        owned,
        replicas: live.len(),
        next_expiry_ms: next_expiry_ms.filter(|_| owned < share),
    }
}

#[cfg(test)]
mod tests;
