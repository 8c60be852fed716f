//! The poll schedule of the [`ChainPoller`]: one timer per endpoint; a due timer asks the host's
//! gate for a slot, sends (one request in flight per endpoint) or waits until the gate says; a
//! finished request re-arms its timer one jittered interval later. When several endpoints of one
//! host wait for the same budget slot, `epochs/latest` gets it first (it carries the phase).

use std::time::Duration;

use actix::prelude::*;
use slog::{debug, info, warn};

use super::{
    fetch::{self, Fetched},
    messages::ChainChange,
    poller::ChainPoller,
    view::{ENDPOINT_EPOCHS, ENDPOINT_PARTICIPANTS, ENDPOINT_VERSIONS},
};
use crate::{
    chain::budget::WaitReason,
    stats::timers::{self, Timer},
};

/// Which endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Epochs,
    Participants,
    /// A miner's `/v1/versions`, by participant address.
    Versions(String),
}

impl Target {
    pub fn label(&self) -> &'static str {
        match self {
            Target::Epochs => ENDPOINT_EPOCHS,
            Target::Participants => ENDPOINT_PARTICIPANTS,
            Target::Versions(_) => ENDPOINT_VERSIONS,
        }
    }

    /// The name of this endpoint's timer in the poller's stats.
    pub fn timer_name(&self) -> String {
        match self {
            Target::Versions(addr) => format!("poll {} {addr}", self.label()),
            _ => format!("poll {}", self.label()),
        }
    }

    /// Added to a shared wait's end so that the phase poll wins the freed slot.
    fn priority_offset_ms(&self) -> i64 {
        match self {
            Target::Epochs => 0,
            Target::Participants => 20,
            Target::Versions(_) => 40,
        }
    }
}

/// Poll state of one endpoint.
#[derive(Debug)]
pub struct Endpoint {
    pub target: Target,
    pub url: String,
    /// URL authority: the gate key.
    pub host: String,
    pub created_ms: i64,
    pub next_due_ms: Option<i64>,
    /// The armed poll timer (`poll <endpoint>` in the poller's stats).
    pub timer: Option<Timer>,
    pub in_flight: bool,
    /// Poll again as soon as the request in flight ends (an epoch change arrived meanwhile).
    pub again: bool,
    pub waiting_for: Option<WaitReason>,
    pub last_attempt_ms: Option<i64>,
    pub last_ok_ms: Option<i64>,
    pub last_status: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    pub requests: u64,
    /// Staleness as last reported (to detect transitions).
    pub stale: bool,
}

impl Endpoint {
    pub fn new(target: Target, url: String, host: &str, now_ms: i64) -> Endpoint {
        Endpoint {
            target,
            url,
            host: host.to_owned(),
            created_ms: now_ms,
            next_due_ms: None,
            timer: None,
            in_flight: false,
            again: false,
            waiting_for: None,
            last_attempt_ms: None,
            last_ok_ms: None,
            last_status: None,
            last_error: None,
            consecutive_failures: 0,
            requests: 0,
            stale: false,
        }
    }
}

/// Lower-cased `host[:port]` of a URL.
pub fn authority(url: &str) -> Option<String> {
    let uri: awc::http::Uri = url.trim().parse().ok()?;
    uri.authority().map(|a| a.as_str().to_ascii_lowercase())
}

fn delay_until(at_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(at_ms - now_ms).unwrap_or(0))
}

impl ChainPoller {
    pub(super) fn endpoint_mut(&mut self, target: &Target) -> Option<&mut Endpoint> {
        match target {
            Target::Epochs => Some(&mut self.epochs),
            Target::Participants => Some(&mut self.participants),
            Target::Versions(addr) => self.miners.get_mut(addr),
        }
    }

    pub(super) fn interval_ms(&self, target: &Target) -> u64 {
        match target {
            Target::Epochs => self.settings.chain_phase_poll_interval_ms,
            Target::Participants => self.settings.participants_poll_interval_ms,
            Target::Versions(_) => self.settings.versions_poll_interval_ms,
        }
    }

    /// (Re)arms `target`'s timer for `at_ms`.
    pub(super) fn arm(&mut self, target: Target, at_ms: i64, ctx: &mut Context<Self>) {
        let now = self.now();
        let stats = self.stats.clone();
        let Some(ep) = self.endpoint_mut(&target) else {
            return;
        };
        if let Some(t) = ep.timer.take() {
            t.cancel(&stats, ctx);
        }
        ep.next_due_ms = Some(at_ms.max(now));
        let t = target.clone();
        let delay = delay_until(at_ms, now);
        let timer = timers::run_later(&stats, ctx, target.timer_name(), delay, move |act, ctx| {
            act.fire(t, ctx)
        });
        if let Some(ep) = self.endpoint_mut(&target) {
            ep.timer = Some(timer);
        }
    }

    /// Polls `target` now if its host's gate allows, else waits for the gate.
    pub(super) fn fire(&mut self, target: Target, ctx: &mut Context<Self>) {
        let now = self.now();
        let gates = self.gates.clone();
        let timeout = Duration::from_millis(self.settings.poll_timeout_ms);
        let Some(ep) = self.endpoint_mut(&target) else {
            return;
        };
        ep.timer = None;
        if ep.in_flight {
            return;
        }
        if let Err(wait) = gates.acquire(&ep.host, now) {
            ep.waiting_for = Some(wait.reason);
            debug!(self.log, "chain poll deferred";
                "stage" => "chain_poll_deferred", "endpoint" => target.label(),
                "reason" => wait.reason.as_str(), "until_ms" => wait.until_ms);
            self.metrics
                .deferred
                .with_label_values(&[target.label(), wait.reason.as_str()])
                .inc();
            let at = wait.until_ms + target.priority_offset_ms();
            self.arm(target, at, ctx);
            return;
        }
        ep.waiting_for = None;
        ep.in_flight = true;
        ep.next_due_ms = None;
        ep.requests += 1;
        ep.last_attempt_ms = Some(now);
        let url = ep.url.clone();
        ctx.spawn(
            fetch::get(url, timeout)
                .into_actor(self)
                .map(move |fetched, act, ctx| act.on_fetched(target, fetched, ctx)),
        );
    }

    /// A request of `target` ended.
    fn on_fetched(&mut self, target: Target, fetched: Fetched, ctx: &mut Context<Self>) {
        let now = self.now();
        let Some(ep) = self.endpoint_mut(&target) else {
            // The miner left the participants list while its request was in flight.
            self.metrics
                .requests
                .with_label_values(&[target.label(), &fetched.status_label()])
                .inc();
            return;
        };
        ep.in_flight = false;
        let host = ep.host.clone();
        let url = ep.url.clone();
        let again = std::mem::take(&mut ep.again);
        let mut status = fetched.status_label();
        let mut changes = Vec::new();
        let error = match fetched {
            Fetched::Ok(body) => {
                self.gates.answered(&host);
                match self.apply_body(&target, &body, now, ctx) {
                    Ok(c) => {
                        changes = c;
                        changes.push(ChainChange::Refreshed {
                            endpoint: target.label(),
                            miner: match &target {
                                Target::Versions(a) => Some(a.clone()),
                                _ => None,
                            },
                        });
                        None
                    }
                    Err(e) => {
                        status = "decode_error".to_owned();
                        Some(e)
                    }
                }
            }
            Fetched::Throttled {
                status: code,
                retry_after,
            } => {
                let until = self.gates.throttled(&host, now, retry_after);
                warn!(self.log, "chain poll throttled; backing off";
                    "stage" => "chain_poll_backoff", "endpoint" => target.label(),
                    "host" => &host, "status" => code,
                    "retry_after" => ?retry_after, "backoff_ms" => until - now);
                Some(format!("HTTP {code}, backing off until {until}"))
            }
            Fetched::Failed { error, .. } => {
                self.gates.answered(&host);
                Some(error)
            }
        };
        self.metrics
            .requests
            .with_label_values(&[target.label(), &status])
            .inc();
        let Some(ep) = self.endpoint_mut(&target) else {
            return;
        };
        ep.last_status = Some(status.clone());
        match &error {
            None => {
                ep.last_ok_ms = Some(now);
                ep.last_error = None;
                ep.consecutive_failures = 0;
            }
            Some(e) => {
                ep.last_error = Some(e.clone());
                ep.consecutive_failures += 1;
            }
        }
        if let Some(e) = &error {
            info!(self.log, "chain poll failed; keeping the last good snapshot";
                "stage" => "chain_poll_failed", "endpoint" => target.label(), "url" => url,
                "status" => status, "error" => e.as_str());
        }
        let interval = self.interval_ms(&target);
        let next = if again {
            now
        } else {
            now + self.jittered(interval)
        };
        // Past a back-off deadline at once, so the timer does not wake just to wait again.
        let next = next.max(self.gates.backoff_until(&host));
        self.arm(target, next, ctx);
        changes.extend(self.refresh_health(now));
        self.notify(changes);
    }

    /// Re-arms every idle timer after a settings change: one new interval after the endpoint's
    /// last request (never earlier), so shortening an interval causes no burst.
    pub(super) fn rearm_all(&mut self, ctx: &mut Context<Self>) {
        let mut targets = vec![Target::Epochs, Target::Participants];
        targets.extend(self.miners.keys().cloned().map(Target::Versions));
        for t in targets {
            let interval = self.interval_ms(&t);
            let jittered = self.jittered(interval);
            let Some(ep) = self.endpoint_mut(&t) else {
                continue;
            };
            if ep.in_flight {
                continue;
            }
            let at = match (ep.last_attempt_ms, ep.next_due_ms) {
                (Some(last), _) => last + jittered,
                (None, Some(due)) => due,
                (None, None) => continue,
            };
            self.arm(t, at, ctx);
        }
    }
}
