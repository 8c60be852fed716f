//! Ghost inferences, one step of the durability path (docs/health.md §6.4): after its repair gave
//! up, a still-diverged participant's nonces carry an accountable inference that is never sent,
//! settled by the refused-timeout vote at its deadline. Composed and appended like any diff
//! (durable before visible); no state or timers of its own.

use super::{
    durable::{append, Durable, OnDurable, Pending},
    nonces::{NonceEntry, NonceState},
    session::{Session, StartParams},
    EscrowDeps,
};
use crate::{
    outcome::AttemptTimings,
    policy::reason::OutcomeReason,
    protocol::{canonical, crypto::Address, wire::PayloadJson},
};

/// The prompt of a ghost inference (upstream's ghost probe).
const GHOST_PROMPT: &[u8] = br#"{"messages":[{"role":"user","content":"."}],"max_tokens":1}"#;

impl Durable {
    /// After its repair gave up, a still-diverged participant is charged normally again: its
    /// nonces carry an accountable inference that is never sent (it cannot serve it), and the
    /// refused-timeout vote at `deadline_ms(started_at)` settles it — so a permanently forked
    /// host does not end the epoch cleaner than one that served. `None` when nothing could be
    /// composed.
    pub(super) fn compose_ghost(
        &mut self,
        session: &mut Session,
        deps: &EscrowDeps,
        host: &Address,
        deadline_ms: impl Fn(i64) -> i64,
    ) -> Option<(NonceEntry, Pending)> {
        let prompt_hash = canonical::prompt_hash(GHOST_PROMPT).ok()?;
        let started_at = deps.clock.now_unix();
        let params = StartParams {
            prompt_hash,
            model: session.info().model.clone(),
            input_length: GHOST_PROMPT.len() as u64,
            max_tokens: 1,
            started_at,
        };
        let diff = session.compose_start(&params, &deps.key).ok()?;
        let payload = PayloadJson {
            prompt: GHOST_PROMPT.to_vec(),
            model: params.model,
            input_length: params.input_length,
            max_tokens: 1,
            started_at,
        };
        super::payloads::persist(deps, &session.info().escrow_id, diff.nonce, &payload);
        let ack = append(session, deps, &diff);
        deps.metrics.nonces.with_label_values(&["ghost"]).inc();
        let entry = NonceEntry {
            nonce: diff.nonce,
            host: host.clone(),
            race_id: None,
            request_id: "ghost".into(),
            started_at,
            confirmed_at: None,
            payload: Some(payload),
            timings: AttemptTimings::default(),
            state: NonceState::AwaitingTimeout {
                deadline_ms: deadline_ms(started_at),
                reason: OutcomeReason::Ghost,
            },
            crowned: false,
            emitted: true,
        };
        let then = OnDurable::Nothing;
        Some((
            entry,
            Pending {
                nonce: diff.nonce,
                ack,
                then,
            },
        ))
    }
}
