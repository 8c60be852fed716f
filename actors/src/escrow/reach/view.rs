//! What the escrow snapshot shows of host reachability (`reach.catching_up` and the rest).

use serde::Serialize;

use super::{Reachability, Refusal};

/// What carries a host's catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Carrier {
    /// The attempt at this nonce (a catch-up of at most `background_above` diffs).
    Attempt(u64),
    /// A background sync (`actor/background.rs`).
    Sync,
}

/// One host catching up, as the escrow snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatchingView {
    /// The host's full address.
    pub host: String,
    pub carrier: Carrier,
    /// Since (unix ms).
    pub since_ms: i64,
}

/// One unreachable host and what it said last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusingView {
    /// The host's short address.
    pub host: String,
    pub cause: Refusal,
}

/// The escrow snapshot's view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReachView {
    /// Hosts that refused a connection or rejected a request before any work, and have not
    /// answered since.
    pub unreachable: Vec<String>,
    /// The same hosts, with what each said last.
    pub refusing: Vec<RefusingView>,
    /// Hosts catching up, with what carries their catch-up.
    pub catching_up: Vec<CatchingView>,
    /// Every host the escrow could route to is unreachable since (unix ms).
    pub gate_closed_since_ms: Option<i64>,
    /// This actor's life: nonces passed over, requests answered without a nonce, probes.
    pub withheld: u64,
    pub refused: u64,
    pub probes: u64,
}

impl Reachability {
    pub fn view(&self) -> ReachView {
        ReachView {
            unreachable: self.hosts.keys().map(|a| a.short().to_owned()).collect(),
            refusing: (self.hosts.iter())
                .map(|(a, u)| RefusingView {
                    host: a.short().to_owned(),
                    cause: u.cause,
                })
                .collect(),
            catching_up: (self.catching.iter())
                .map(|(a, (carrier, since_ms))| CatchingView {
                    host: a.to_string(),
                    carrier: *carrier,
                    since_ms: *since_ms,
                })
                .collect(),
            gate_closed_since_ms: self.gate_closed_since_ms,
            withheld: self.withheld,
            refused: self.refused,
            probes: self.probes,
        }
    }
}
