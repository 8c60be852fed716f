//! A host's per-escrow sessions, behind a lock of their own.
//!
//! Applying a catch-up verifies every diff's signature under this lock: thousands of diffs (a
//! host restarted empty, synced by a vote or a background catch-up) hold it for seconds in a
//! debug build. The fault script, latency and jitter sit behind the host's other lock, so a
//! request's first steps never wait for it, and async code reaches a session through
//! [`HostState::on_session`], which never blocks the runtime thread: one host busy must not
//! hold every other simulated host, the chain API and the chaos runner's checks that share it
//! (chaos, invariant 3: both attempts of a recovery probe, on healthy hosts, answered in the
//! same millisecond 6.5 s late, right after a vote's sync of a far verifier ended).

use std::{
    collections::HashMap,
    sync::{Arc, MutexGuard, PoisonError, TryLockError},
};

use http::StatusCode;

use super::{session::HostSession, HostState};
use crate::sim::{chain::EscrowInfo, network::NetCore, server::Reject};

/// The sessions of one host.
#[derive(Debug, Default)]
pub(crate) struct HostSessions {
    pub(crate) sessions: HashMap<String, HostSession>,
    /// What each session held when `forget_session` dropped it (the newest nonce per escrow):
    /// the chaos runner checks a settled escrow's payouts against a host's state at its final
    /// nonce, and every host holding it may have restarted empty since.
    forgotten: HashMap<String, serde_json::Value>,
    /// Counter of created sessions (new incarnation after `forget_session`).
    session_seq: u64,
}

impl HostSessions {
    /// The session of `escrow_id`, created from the in-process chain's escrow on first use.
    pub(crate) fn get_or_create(
        &mut self,
        core: &NetCore,
        host: &HostState,
        escrow: &EscrowInfo,
        escrow_id: &str,
    ) -> Result<&mut HostSession, Reject> {
        if !self.sessions.contains_key(escrow_id) {
            self.session_seq += 1;
            let inc = self.session_seq;
            let seed = host.session_seed(escrow_id, inc);
            let session =
                HostSession::new(escrow, host.key.address(), inc, seed, core.host_grants())
                    .map_err(|e| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            self.sessions.insert(escrow_id.to_owned(), session);
        }
        self.sessions
            .get_mut(escrow_id)
            .ok_or_else(|| Reject::new(StatusCode::INTERNAL_SERVER_ERROR, "session not found"))
    }

    /// Drops every session (a host restarted empty), remembering what each held.
    fn forget_all(&mut self) {
        for (escrow, s) in self.sessions.drain() {
            let held = s.held();
            let newer = |old: &serde_json::Value| {
                old["latest_nonce"].as_u64() < held["latest_nonce"].as_u64()
            };
            if self.forgotten.get(&escrow).is_none_or(newer) {
                self.forgotten.insert(escrow, held);
            }
        }
    }
}

impl HostState {
    /// The sessions lock, waited for: only from the blocking pool or synchronous callers
    /// (poisoning is ignored: no invariant spans a panic).
    pub(crate) fn sessions(&self) -> MutexGuard<'_, HostSessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sessions lock if it is free now (poisoning ignored), else `None`: a catch-up holds it.
    fn try_sessions(&self) -> Option<MutexGuard<'_, HostSessions>> {
        match self.sessions.try_lock() {
            Ok(s) => Some(s),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Runs `f` on the session of `escrow_id`, if the host has it, waiting for the lock (tests
    /// and synchronous callers).
    pub(crate) fn with_session<R>(
        &self,
        escrow_id: &str,
        f: impl FnOnce(&mut HostSession) -> R,
    ) -> Option<R> {
        self.sessions().sessions.get_mut(escrow_id).map(f)
    }

    /// [`Self::with_session`] from async code: at once when the lock is free, else on the
    /// blocking pool while a catch-up holds it, so the runtime thread never waits.
    pub(crate) async fn on_session<R: Send + 'static>(
        self: &Arc<Self>,
        escrow_id: &str,
        f: impl FnOnce(&mut HostSession) -> R + Send + 'static,
    ) -> Option<R> {
        if let Some(mut s) = self.try_sessions() {
            return s.sessions.get_mut(escrow_id).map(f);
        }
        let (host, id) = (Arc::clone(self), escrow_id.to_owned());
        tokio::task::spawn_blocking(move || host.with_session(&id, f))
            .await
            .ok()
            .flatten()
    }

    /// [`Self::on_session`] from code that cannot wait (a drop): at once when the lock is free,
    /// else on the blocking pool, not awaited.
    pub(crate) fn on_session_detached(
        self: &Arc<Self>,
        escrow_id: &str,
        f: impl FnOnce(&mut HostSession) + Send + 'static,
    ) {
        if let Some(mut s) = self.try_sessions() {
            s.sessions.get_mut(escrow_id).map(f);
            return;
        }
        let (host, id) = (Arc::clone(self), escrow_id.to_owned());
        self.runtime()
            .spawn_blocking(move || host.with_session(&id, f));
    }

    /// What the host held of `escrow_id` before it last restarted empty ([`HostSession::held`]).
    pub(crate) async fn forgotten(self: &Arc<Self>, escrow_id: &str) -> Option<serde_json::Value> {
        let (host, id) = (Arc::clone(self), escrow_id.to_owned());
        tokio::task::spawn_blocking(move || host.sessions().forgotten.get(&id).cloned())
            .await
            .ok()
            .flatten()
    }

    /// Restarts the host empty: waits for the lock (synchronous callers and the blocking pool).
    pub(crate) fn forget_sessions(&self) {
        self.sessions().forget_all();
    }

    /// [`Self::forget_sessions`] from a request handler: at once when the lock is free, else as
    /// soon as the catch-up holding it ends (a host restarting a moment later).
    pub(crate) fn forget_sessions_soon(self: &Arc<Self>) {
        if let Some(mut s) = self.try_sessions() {
            s.forget_all();
            return;
        }
        let host = Arc::clone(self);
        self.runtime()
            .spawn_blocking(move || host.forget_sessions());
    }
}

#[cfg(test)]
mod tests;
