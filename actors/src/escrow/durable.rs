//! The durability path, one part of the escrow actor: **where a diff becomes durable**.
//!
//! Every diff is composed by the session, appended to the store here, and reaches a host only
//! after the store acknowledged it (the store group-commits appends; see `store/`). A grant is
//! answered from [`Durable::acked`] once its ack resolved; a store failure stops the actor (the
//! directory respawns it from the last durable state, so an undurable nonce is never used).
//! Also here: the highest acknowledged nonce, request bodies (encoded once; signed as each
//! leaves, by the grant's signer; each diff sent to a host once, and a nonce sent again from what
//! the host holds after a nonce gap: [`Durable::resend`]), and the persistence of host sync
//! nonces.

use std::{sync::Arc, time::Instant};

mod bodies;
mod upkeep;

use slog::{debug, error, info, warn};
use tokio::sync::oneshot;

use super::{
    diff_log::DiffPath,
    error::EscrowError,
    hedging,
    info::HostEndpoint,
    links::{LinkView, Links},
    messages::{AttemptKind, NonceGrant, VerifyContext},
    nonces::{NonceEntry, NonceState},
    picker::Waiter,
    routing::Routing,
    session::{Session, StartParams},
    wire_cache::{self, WireDiffs},
    EscrowDeps,
};
use crate::{
    directory::StopCause,
    outcome::AttemptTimings,
    policy::reason::EmptyDiffReason,
    protocol::{diff::Diff, session_error::SessionError, wire::PayloadJson},
    store::{Ack, StoreError},
};

/// What waits for a diff's ack.
pub(super) enum OnDurable {
    /// Nobody: only the durable nonce advances.
    Nothing,
    /// A race's grant, answered once the diff is durable.
    Grant {
        reply: oneshot::Sender<Result<NonceGrant, EscrowError>>,
        grant: Box<NonceGrant>,
        composed: Instant,
    },
}

/// What the actor does after an ack resolved.
pub(super) enum AfterAck {
    Done,
    /// The race is gone: the granted nonce is settled without an outcome.
    Unclaimed(u64),
    /// The diff is not durable: stop the actor (the directory respawns it from the log).
    Stop(StopCause),
}

/// A composed diff whose ack is still pending, and its follow-up.
pub(super) struct Pending {
    pub nonce: u64,
    pub ack: Ack,
    pub then: OnDurable,
}

/// The attempt a grant is built for.
struct Attempt<'a> {
    host: &'a HostEndpoint,
    nonce: u64,
    payload: &'a PayloadJson,
    primary: bool,
}

/// See the module docs.
pub(super) struct Durable {
    /// Highest nonce whose diff the store acknowledged.
    durable_nonce: u64,
    /// Sync nonces changed since they were last persisted.
    sync_dirty: bool,
    /// Diffs encoded once for the request bodies that carry them.
    wire: WireDiffs,
    /// The nonce at the last `sync_persist` tick, and the ticks since it last moved.
    quiet: (u64, u32),
    /// Nonce of the last state checkpoint written (0: none since the actor started).
    last_checkpoint: u64,
    /// Each body's turn on its host's link (`links.rs`).
    links: Links,
}

/// `sync_persist` ticks (1 s) without a new nonce after which the escrow is idle.
pub(super) const IDLE_AFTER_TICKS: u32 = 5;

impl Durable {
    /// Starts at the session's nonce (a restored session replayed only durable diffs), keeping
    /// at most `window` encoded diffs (the session's diff window), with fresh links.
    pub(super) fn new(durable_nonce: u64, window: usize, links: Links) -> Durable {
        Durable {
            durable_nonce,
            sync_dirty: false,
            wire: WireDiffs::new(window),
            quiet: (durable_nonce, 0),
            last_checkpoint: 0,
            links,
        }
    }

    /// The links' state (the escrow's snapshot).
    pub(super) fn links(&self) -> Vec<LinkView> {
        self.links.view()
    }

    pub(super) fn durable_nonce(&self) -> u64 {
        self.durable_nonce
    }

    /// The store answered the ack of `nonce`'s diff.
    pub(super) fn acked(
        &mut self,
        deps: &EscrowDeps,
        nonce: u64,
        res: Result<(), StoreError>,
        then: OnDurable,
    ) -> AfterAck {
        match res {
            Ok(()) => {
                self.durable_nonce = self.durable_nonce.max(nonce);
                let OnDurable::Grant {
                    reply,
                    grant,
                    composed,
                } = then
                else {
                    return AfterAck::Done;
                };
                deps.metrics
                    .diff_durable_seconds
                    .observe(composed.elapsed().as_secs_f64());
                match reply.send(Ok(*grant)) {
                    Ok(()) => AfterAck::Done,
                    Err(_) => AfterAck::Unclaimed(nonce),
                }
            }
            Err(e @ StoreError::LeaseLost { .. }) => {
                error!(deps.log, "lease lost to another replica; stopping escrow";
                    "stage" => "lease_lost", "nonce" => nonce, "error" => %e);
                deps.metrics.escrow_leases_lost.inc();
                if let OnDurable::Grant { reply, .. } = then {
                    let _ = reply.send(Err(e.into()));
                }
                AfterAck::Stop(StopCause::Failed)
            }
            Err(e) => {
                error!(deps.log, "diff not durable; stopping escrow"; "stage" => "store_error",
                    "nonce" => nonce, "error" => %e);
                let cause = if e.is_unavailable() {
                    StopCause::StoreUnavailable
                } else {
                    StopCause::Failed
                };
                if let OnDurable::Grant { reply, .. } = then {
                    let _ = reply.send(Err(e.into()));
                }
                AfterAck::Stop(cause)
            }
        }
    }

    /// Sequences the next nonce as a diff without `MsgStartInference` (pending txs only) and
    /// appends it. It costs the per-nonce fee but assigns the host no work it could be charged
    /// for. Returns the diff and its durability ack.
    pub(super) fn compose_withheld(
        &mut self,
        session: &mut Session,
        deps: &EscrowDeps,
        reason: EmptyDiffReason,
    ) -> Option<(Arc<Diff>, Ack)> {
        match session.compose(Vec::new(), &deps.key) {
            Ok(diff) => {
                let kind = reason.nonce_kind();
                deps.metrics.nonces.with_label_values(&[kind]).inc();
                debug!(deps.log, "diff without inference composed"; "stage" => "diff_composed",
                    "nonce" => diff.nonce, "reason" => reason);
                let ack = append(session, deps, &diff);
                Some((diff, ack))
            }
            Err(SessionError::NonceLimit { nonce, last_active }) => {
                deps.metrics.diffs_deferred_at_nonce_limit.inc();
                warn!(deps.log, "diff deferred to the finalize round: the last active nonce is kept for it";
                    "stage" => "diff_deferred_at_nonce_limit", "nonce" => nonce,
                    "last_active" => last_active, "reason" => reason, "queued_txs" => session.pending().len());
                None
            }
            Err(e) => {
                error!(deps.log, "compose failed"; "stage" => "compose_failed", "error" => %e);
                None
            }
        }
    }

    /// An ack covering every diff composed so far: the store's flush when nothing `reason` needs
    /// is pending, else the ack of one more diff sequencing the pending txs (writes commit in
    /// order). A vote's context needs what its verifiers judge by (a ConfirmStart, a finish),
    /// never other nonces' confirmed timeouts, which wait for their batch (`actor/voting.rs`).
    pub(super) fn settle_pending(
        &mut self,
        session: &mut Session,
        deps: &EscrowDeps,
        reason: EmptyDiffReason,
    ) -> Option<(u64, Ack)> {
        let nothing_needed = match reason {
            EmptyDiffReason::TimeoutContext => session.pending().only_timeouts(),
            _ => session.pending().is_empty(),
        };
        if nothing_needed {
            return Some((session.nonce(), deps.store.flush()));
        }
        self.compose_withheld(session, deps, reason)
            .map(|(d, ack)| (d.nonce, ack))
    }

    /// Composes the waiter's inference, appends it and prepares its grant. The entry is for the
    /// nonce book; the grant is answered when [`Pending`] resolves. `None` when the waiter was
    /// answered with an error.
    pub(super) fn grant(
        &mut self,
        session: &mut Session,
        routing: &Routing,
        deps: &EscrowDeps,
        w: Waiter,
    ) -> Option<(NonceEntry, Pending)> {
        let started_at = deps.clock.now_unix();
        let params = StartParams {
            prompt_hash: w.params.prompt_hash,
            model: w.params.model.clone(),
            input_length: u64::try_from(w.params.body.len()).unwrap_or(u64::MAX),
            max_tokens: w.params.max_tokens,
            started_at,
        };
        let diff = match session.compose_start(&params, &deps.key) {
            Ok(d) => d,
            Err(e) => {
                let _ = w.reply.send(Err(e.into()));
                return None;
            }
        };
        let nonce = diff.nonce;
        deps.metrics.nonces.with_label_values(&["inference"]).inc();
        let composed = Instant::now();
        let payload = PayloadJson {
            prompt: w.params.body.to_vec(),
            model: params.model.clone(),
            input_length: params.input_length,
            max_tokens: params.max_tokens,
            started_at,
        };
        super::payloads::persist(deps, &session.info().escrow_id, nonce, &payload);
        let ack = append(session, deps, &diff);
        let info = session.info().clone();
        let Some(host) = info.host_for_nonce(nonce).cloned() else {
            let _ = w
                .reply
                .send(Err(EscrowError::NoRoutableHost(info.escrow_id.clone())));
            return None;
        };
        let attempt = Attempt {
            host: &host,
            nonce,
            payload: &payload,
            primary: w.kind == AttemptKind::Primary,
        };
        let built = self.build_grant(session, routing, deps, attempt);
        let grant = match built {
            Ok(g) => {
                session.mark_sent(&host.address, nonce);
                g
            }
            Err(e) => {
                let _ = w.reply.send(Err(e));
                return None;
            }
        };
        let now_ms = deps.clock.now_ms();
        let entry = NonceEntry {
            nonce,
            host: host.address.clone(),
            race_id: Some(w.race_id),
            request_id: w.params.request_id.clone(),
            started_at,
            confirmed_at: None,
            payload: Some(payload),
            timings: AttemptTimings {
                send_ms: now_ms,
                end_ms: now_ms,
                input_bytes: params.input_length,
                ..Default::default()
            },
            state: NonceState::InFlight,
            crowned: false,
            emitted: false,
        };
        let then = OnDurable::Grant {
            reply: w.reply,
            grant: Box::new(grant),
            composed,
        };
        Some((entry, Pending { nonce, ack, then }))
    }

    /// Encoded request bodies for one attempt: the newest `catch_up_window` diffs and any no
    /// request carried to the host yet (`session/sync_points.rs`), as catch-up chunks first when
    /// they are more than one chunk, then the inference request ending with this nonce's diff. They are signed
    /// when each leaves (the grant carries the signer, not signatures), once the body's turn on
    /// its host's link came (the grant's ticket, registered here in nonce order: `links.rs`).
    fn build_grant(
        &self,
        session: &Session,
        routing: &Routing,
        deps: &EscrowDeps,
        attempt: Attempt<'_>,
    ) -> Result<NonceGrant, EscrowError> {
        let Attempt {
            host,
            nonce,
            payload,
            primary,
        } = attempt;
        let info = session.info();
        let after = session.windowed_after(&host.address, nonce, deps.cfg.catch_up_window);
        let bodies::Bodies {
            prelude,
            request,
            diffs,
        } = self.bodies(
            session,
            deps,
            DiffPath::Attempt,
            (after, u64::MAX),
            (nonce, payload),
        )?;
        deps.metrics
            .catch_up_diffs
            .with_label_values(&["first"])
            .observe(diffs as f64);
        let now_ms = deps.clock.now_ms();
        let catching_up = !prelude.is_empty();
        let link = self.links.register(&host.address, nonce, after);
        Ok(NonceGrant {
            nonce,
            host: host.address.clone(),
            url: info.session_url(host, "chat/completions"),
            prelude,
            request,
            signer: wire_cache::signer(session, deps),
            preference: routing.preference(&host.address),
            hedge_due_ms: primary
                .then(|| {
                    let input = payload.input_length;
                    let primary = (&host.address, catching_up);
                    hedging::hedge_due(routing, &deps.settings, primary, input, now_ms)
                })
                .flatten(),
            healthy_available: routing.healthy_available(),
            verify: VerifyContext {
                escrow_id: Arc::from(info.escrow_id.as_str()),
                start: session.start_of(nonce),
            },
            link,
            execution_timeout: u64::try_from(info.config.execution_timeout)
                .ok()
                .filter(|s| *s > 0)
                .map(std::time::Duration::from_secs),
        })
    }
}

/// Appends a freshly composed diff with the warm keys it bound (`warm_key_bound`), so a replay
/// restores them without the chain.
pub(super) fn append(session: &Session, deps: &EscrowDeps, diff: &Diff) -> Ack {
    let delta = session.last_warm_delta();
    for b in delta {
        info!(deps.log, "warm key bound to its slot"; "stage" => "warm_key_bound",
            "nonce" => diff.nonce, "slot" => b.slot, "warm_key" => b.address.as_str());
    }
    deps.store
        .append_diff_with_warm(&session.info().escrow_id, diff, delta)
}
