//! Request bodies of the durability path: an attempt's or a resend's inference request (the
//! last chunk of the diffs it carries, ending with its nonce's diff, plus the payload) after a
//! catch-up [`Prelude`] of the rest, and a repair's payload-less catch-up. The part of a
//! catch-up within the session's window is encoded here (each diff once: `wire_cache.rs`); the
//! part below it stays in the store until each chunk of it is sent (`escrow/prelude.rs`), so a
//! body never holds more than a window of diffs however far behind its host is.

use std::sync::Arc;

use bytes::Bytes;
use slog::info;

use super::Durable;
use crate::{
    escrow::{
        diff_log::{self, DiffPath},
        error::EscrowError,
        prelude::Prelude,
        session::Session,
        wire_cache, EscrowDeps,
    },
    protocol::wire::PayloadJson,
};

/// An attempt's bodies.
pub(in crate::escrow) struct Bodies {
    pub prelude: Prelude,
    pub request: Bytes,
    /// Diffs carried in all (prelude and request).
    pub diffs: u64,
}

impl Durable {
    /// The bodies carrying the diffs in `(after, to]` (to the session's nonce at most), the
    /// request ending with the last of them and carrying `payload` for `nonce`: at most a chunk
    /// of diffs inline (read back from the store when they left the window), the rest as the
    /// prelude before it.
    pub(in crate::escrow) fn bodies(
        &self,
        session: &Session,
        deps: &EscrowDeps,
        path: DiffPath,
        (after, to): (u64, u64),
        (nonce, payload): (u64, &PayloadJson),
    ) -> Result<Bodies, EscrowError> {
        let chunk = deps.cfg.catch_up_chunk.max(1);
        let top = to.min(session.nonce());
        let inline_after = top
            .saturating_sub(u64::try_from(chunk).unwrap_or(u64::MAX))
            .max(after);
        let inline = diff_log::diffs_after(session, deps, path, inline_after, top, chunk)?;
        let prelude = self.prelude(session, deps, path, (after, inline_after))?;
        let body = self
            .wire
            .body(inline.iter().map(|d| &**d), nonce, Some(payload));
        Ok(Bodies {
            prelude,
            request: wire_cache::encoded(body)?,
            diffs: top.saturating_sub(after),
        })
    }

    /// The payload-less catch-up of the diffs in `(after, to]`: the part below the session's
    /// window as a range read from the store as it is sent, then the rest encoded now.
    pub(in crate::escrow) fn prelude(
        &self,
        session: &Session,
        deps: &EscrowDeps,
        path: DiffPath,
        (after, to): (u64, u64),
    ) -> Result<Prelude, EscrowError> {
        let chunk = deps.cfg.catch_up_chunk.max(1);
        let escrow_id = &session.info().escrow_id;
        let stored_to = to.min(session.first_held().saturating_sub(1));
        let held = session
            .held_after(after.max(stored_to), to, usize::MAX)
            .ok_or_else(|| {
                EscrowError::Store(format!(
                    "diffs after {} of escrow {escrow_id} left the window while the catch-up was built",
                    after.max(stored_to)
                ))
            })?;
        let encoded = self.wire.catch_up_chunks(&held, chunk)?;
        let from = after.saturating_add(1);
        if from <= stored_to {
            info!(deps.log, "a catch-up below the window is read from the store chunk by chunk as it is sent";
                "stage" => "catch_up_from_store", "path" => path.label(), "from" => from,
                "to" => stored_to, "held" => held.len());
        }
        Ok(Prelude::stored_then(
            (deps.store.clone(), Arc::from(escrow_id.as_str())),
            (from, stored_to, chunk),
            deps.metrics
                .diffs_from_store
                .with_label_values(&[path.label()]),
            encoded,
        ))
    }

    /// The same nonce again for a host that answered a nonce gap holding only up to `holds`:
    /// every diff above that, up to the nonce (all durable: the nonce's grant was answered after
    /// its ack), with the nonce's payload.
    pub(in crate::escrow) fn resend(
        &self,
        session: &Session,
        deps: &EscrowDeps,
        (nonce, holds): (u64, u64),
        payload: &PayloadJson,
    ) -> Result<(Prelude, Bytes), EscrowError> {
        if nonce > self.durable_nonce {
            return Err(EscrowError::Protocol(format!(
                "resend of nonce {nonce} above the durable nonce {}",
                self.durable_nonce
            )));
        }
        let b = self.bodies(
            session,
            deps,
            DiffPath::Resend,
            (holds, nonce),
            (nonce, payload),
        )?;
        deps.metrics
            .catch_up_diffs
            .with_label_values(&["resend"])
            .observe(b.diffs as f64);
        Ok((b.prelude, b.request))
    }
}
