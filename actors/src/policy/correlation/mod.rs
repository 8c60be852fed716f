//! The correlation guard of docs/health.md §1, per escrow: when two or more distinct hosts fail with
//! the same fault signature within `shared_fault_window_ms` and no host succeeded in between, the
//! fault is *shared* — nobody gets a strike, the fan-out stops, and the client gets a clear cause.
//!
//! Call order (what makes invariant 1 hold for the *first* host too): every failure goes to
//! [`SharedFaultDetector::record_failure`] **before** any strike. A failure that is not (yet)
//! shared is *held*, not charged. A held failure is confirmed as the host's own (and only then
//! struck and sampled) when a host of the escrow succeeds in an attempt sent after it
//! ([`SharedFaultDetector::record_success`]) or when its window passes with no other host failing the same way
//! ([`SharedFaultDetector::release_due`] at [`SharedFaultDetector::next_release`]). A failure that
//! becomes shared retracts every held failure of that signature in the window.
//!
//! Signatures compare class, status, attribution reason and the normalised host message
//! ([`normalise`] strips numbers, so `timestamp drift 45s` and `… 47s` match). Cause messages are
//! chosen on the typed reason, never on message substrings.
//!
//! **Shared outages.** Lost connections found shared (refused, or streams that broke the same way)
//! open the escrow's *shared outage*. It lasts
//! until a host outside it succeeds in an attempt sent after it began, or the window passes since
//! lost connections were last found shared. Every connection a host loses meanwhile (refused, truncated,
//! empty, transport error) is that outage, whatever its signature, and is never charged
//! ([`SharedFaultDetector::excuse`]); the host joins the outage. A host leaves it by succeeding,
//! and what it loses from then on is its own again, unless its refusals are found shared anew.
//! The outage's hosts' connections lost just before it was found are retracted with it. Only lost
//! connections are excused (a 500 or a drift still strikes), and an excused failure does not stop
//! the race's fan-out.

use std::collections::{BTreeMap, BTreeSet};

pub use self::signature::{cause_message, normalise, FaultSignature, SharedFault};
use super::settings::HealthSettings;

mod signature;

/// Entries kept per escrow; beyond this the oldest are dropped (a dropped held failure is never
/// charged: the safe direction).
pub const MAX_ENTRIES: usize = 4096;

/// A failure confirmed as its host's own: now it may be struck and sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldFault<H = String> {
    pub host: H,
    pub signature: FaultSignature,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry<H> {
    host: H,
    signature: FaultSignature,
    at_ms: i64,
    /// Waiting for confirmation (false: part of a shared fault, never charged).
    held: bool,
}

/// The guard of one escrow (plain state; the escrow actor owns it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFaultDetector<H = String> {
    window_ms: i64,
    entries: Vec<Entry<H>>,
    last_success_ms: Option<i64>,
    /// Hosts in the shared outage: when they joined it (their refusals were found shared, or they
    /// lost a connection while it lasted).
    outages: BTreeMap<H, i64>,
    /// The shared outage, while it lasts (module docs).
    outage: Option<Outage<H>>,
}

/// The escrow's shared outage.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outage<H> {
    /// When lost connections were first found shared.
    since_ms: i64,
    /// When they were last found shared.
    last_ms: i64,
    /// Hosts that left it by succeeding: what they lose from then on is their own again.
    left: BTreeSet<H>,
}

impl<H: Clone + Ord> SharedFaultDetector<H> {
    pub fn new(settings: &HealthSettings) -> Self {
        SharedFaultDetector {
            window_ms: settings.shared_fault_window_ms.max(0),
            entries: Vec::new(),
            last_success_ms: None,
            outages: BTreeMap::new(),
            outage: None,
        }
    }

    /// Follows a settings change.
    pub fn set_settings(&mut self, settings: &HealthSettings) {
        self.window_ms = settings.shared_fault_window_ms.max(0);
    }

    /// A failure of `host`. `Some`: the fault is shared (stop fanning out; no strikes); `None`:
    /// the failure is held until confirmed.
    pub fn record_failure(
        &mut self,
        host: H,
        signature: FaultSignature,
        now_ms: i64,
    ) -> Option<SharedFault<H>> {
        let window = self.window_ms;
        self.entries
            .retain(|e| e.held || within(window, e.at_ms, now_ms));
        let shared = !signature.own_state()
            && self.entries.iter().any(|e| {
                e.signature == signature && e.host != host && within(window, e.at_ms, now_ms)
            });
        if !shared {
            self.entries.push(Entry {
                host,
                signature,
                at_ms: now_ms,
                held: true,
            });
            if self.entries.len() > MAX_ENTRIES {
                self.entries.remove(0);
            }
            return None;
        }
        let mut hosts = vec![host.clone()];
        for e in self.entries.iter_mut() {
            if e.signature == signature && within(window, e.at_ms, now_ms) {
                e.held = false;
                hosts.push(e.host.clone());
            }
        }
        hosts.sort();
        hosts.dedup();
        self.entries.push(Entry {
            host,
            signature: signature.clone(),
            at_ms: now_ms,
            held: false,
        });
        if signature.connection_lost() {
            self.begin_outage(&hosts, now_ms);
        }
        Some(SharedFault {
            signature,
            hosts,
            retry_after_ms: None,
        })
    }

    /// `hosts` lost connections together (refused, or streams that broke the same way): the
    /// escrow's shared outage begins (or goes on), each of them is in it, and the connections
    /// they lost within the window are retracted with it. Another host's failures held before
    /// stay held: a host that stalled on its own just before others went down is still struck
    /// (`tests/gateway/timeout_votes.rs`, far verifiers).
    /// Found by the rotating hour-long run (seed `long-1`, 38 s): four hosts refused connections
    /// together, the refusals were shared, but one host's in-flight streams broke as a truncated
    /// stream, an empty stream and a transport error, three signatures no other host had; the
    /// window confirmed them as its own fault and the three strikes ejected it. And by the
    /// 30-minute run `long-3`: two hosts' streams broke together as empty streams and transport
    /// errors, found shared, but an outage began only on shared refusals; one host's truncated
    /// stream and refusals, settled when it came back, were then held and confirmed as its own.
    fn begin_outage(&mut self, hosts: &[H], now_ms: i64) {
        let window = self.window_ms;
        let mut outage = match self.outage.take() {
            Some(o) if within(window, o.last_ms, now_ms) => o,
            _ => Outage {
                since_ms: now_ms,
                last_ms: now_ms,
                left: BTreeSet::new(),
            },
        };
        outage.last_ms = now_ms;
        outage.left.retain(|h| !hosts.contains(h));
        self.outage = Some(outage);
        for h in hosts {
            self.outages.insert(h.clone(), now_ms);
        }
        for e in self.entries.iter_mut() {
            if e.held
                && e.signature.connection_lost()
                && hosts.contains(&e.host)
                && within(window, e.at_ms, now_ms)
            {
                e.held = false;
            }
        }
    }

    /// Whether a failure of `host` is part of the shared outage (module docs): never held, never
    /// charged. A host not yet in it joins it, unless it left it by succeeding: a host whose
    /// stream breaks only after the outage was found is in it too (each host of an outage has
    /// streams in flight in several escrows, and not every escrow sees every host fail alike).
    pub fn excuse(&mut self, host: &H, signature: &FaultSignature, now_ms: i64) -> bool {
        if !signature.connection_lost() {
            return false;
        }
        let window = self.window_ms;
        if self
            .outages
            .get(host)
            .is_some_and(|at| within(window, *at, now_ms))
        {
            return true;
        }
        match &self.outage {
            Some(o) if within(window, o.last_ms, now_ms) && !o.left.contains(host) => {
                self.outages.insert(host.clone(), o.last_ms);
                true
            }
            _ => false,
        }
    }

    /// Whether this failure is still waiting for confirmation (false once it was found shared,
    /// part of a shared outage, confirmed or dropped).
    pub fn still_held(&self, host: &H, at_ms: i64, signature: &FaultSignature) -> bool {
        self.entries
            .iter()
            .any(|e| e.held && e.host == *host && e.at_ms == at_ms && e.signature == *signature)
    }

    /// A success of any host of the escrow, whose attempt was sent at `sent_ms`: correlation is
    /// broken for the failures up to when it was sent, which are confirmed (held) or forgotten.
    /// A failure after `sent_ms` stays: a stream that was already flowing when another host
    /// failed does not show that its host still takes work. Found by the chaos runner (seed
    /// `14728273872760105528`, 84 s): every host went down within 50 ms; the first one's lost
    /// streams and refusal were held, a stream of the second, sent 200 ms before, finished
    /// 13 ms before that host refused too, and confirmed them as three strikes. The host that
    /// succeeded is out of its shared outage.
    pub fn record_success(&mut self, host: &H, sent_ms: i64, now_ms: i64) -> Vec<HeldFault<H>> {
        let in_outage = self.outages.remove(host).is_some();
        if let Some(o) = self.outage.as_mut() {
            if in_outage {
                o.left.insert(host.clone());
            } else if sent_ms >= o.since_ms {
                self.outage = None;
            }
        }
        self.last_success_ms = Some(self.last_success_ms.map_or(now_ms, |t| t.max(now_ms)));
        self.take_held(|e| e.at_ms <= sent_ms)
    }

    /// Confirms held failures whose window has passed unmatched (and forgets stale entries).
    pub fn release_due(&mut self, now_ms: i64) -> Vec<HeldFault<H>> {
        let window = self.window_ms;
        self.outages
            .retain(|_, at| now_ms.saturating_sub(*at) <= window);
        if self
            .outage
            .as_ref()
            .is_some_and(|o| now_ms.saturating_sub(o.last_ms) > window)
        {
            self.outage = None;
        }
        self.take_held(|e| now_ms.saturating_sub(e.at_ms) > window)
    }

    /// Forgets the entries `gone` picks and returns the held ones among them.
    fn take_held(&mut self, gone: impl Fn(&Entry<H>) -> bool) -> Vec<HeldFault<H>> {
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(gone);
        self.entries = keep;
        gone.into_iter()
            .filter(|e| e.held)
            .map(|e| HeldFault {
                host: e.host,
                signature: e.signature,
                at_ms: e.at_ms,
            })
            .collect()
    }

    /// When [`Self::release_due`] has something to confirm next.
    pub fn next_release(&self) -> Option<i64> {
        self.entries
            .iter()
            .filter(|e| e.held)
            .map(|e| e.at_ms.saturating_add(self.window_ms).saturating_add(1))
            .min()
    }

    /// Failures waiting for confirmation.
    pub fn held(&self) -> usize {
        self.entries.iter().filter(|e| e.held).count()
    }

    /// The latest success seen.
    pub fn last_success_ms(&self) -> Option<i64> {
        self.last_success_ms
    }
}

/// Whether `at_ms` is within `window_ms` of `now_ms` (either side).
fn within(window_ms: i64, at_ms: i64, now_ms: i64) -> bool {
    now_ms.saturating_sub(at_ms).saturating_abs() <= window_ms
}
