//! Applying the other replicas' shared events (`events.rs`) on this one: a participant's health
//! is reloaded from the store by its actor (which tells the escrows, so routing follows at
//! once), a forget also clears the escrows' divergence marks, and settings are reloaded from the
//! store: health (the directory), chain polling (applied to the poller) and rotation. A
//! [`Received::Resync`] (the listener reconnected) reloads everything.
//!
//! The applier is a task on the actix system ([`start`]); the listener thread feeds it.

use devshard_actors::{
    directory::{Directory, ReloadHealthSettings, ReloadParticipants},
    protocol::crypto::Address,
    stats::TrackedAddr,
};
use slog::{info, warn, Logger};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::{
    events::{Direction, EventKind, Received, SharedEvent},
    Replicas,
};
use crate::{
    rotation::Rotation,
    state::{ChainPolling, ACTOR_TIMEOUT},
};
use devshard_actors::store::SharedStore;

/// The settings besides health that a settings event reloads from the store.
#[derive(Clone)]
pub struct Reloads {
    pub polling: ChainPolling,
    pub rotation: Rotation,
    pub store: SharedStore,
}

impl Reloads {
    /// Chain polling and rotation as the store holds them now; the sections that changed.
    async fn settings(&self, log: &Logger) -> Result<Vec<&'static str>, String> {
        let mut changed = Vec::new();
        if self.polling.reload(&self.store, log).await? {
            changed.push("chain_poll");
        }
        if self.rotation.reload() {
            changed.push("rotation");
        }
        Ok(changed)
    }
}

/// Starts the applier on the current actix system; returns where to send what was received.
pub fn start(
    replicas: Replicas,
    directory: TrackedAddr<Directory>,
    reloads: Reloads,
    log: Logger,
) -> UnboundedSender<Received> {
    let (tx, mut rx) = unbounded_channel();
    actix_web::rt::spawn(async move {
        while let Some(received) = rx.recv().await {
            match received {
                Received::Event(event) => {
                    apply(&replicas, &directory, &event, &log).await;
                    if event.kind == EventKind::Settings {
                        reload_settings(&reloads, &log).await;
                    }
                }
                Received::Resync => {
                    resync(&directory, &log).await;
                    reload_settings(&reloads, &log).await;
                }
            }
        }
    });
    tx
}

async fn apply(
    replicas: &Replicas,
    directory: &TrackedAddr<Directory>,
    event: &SharedEvent,
    log: &Logger,
) {
    let result = match event.kind {
        EventKind::Settings => directory
            .send(ReloadHealthSettings)
            .timeout(ACTOR_TIMEOUT)
            .await
            .map(|()| 0)
            .map_err(|e| e.to_string()),
        EventKind::Eject | EventKind::Unquarantine | EventKind::Forget | EventKind::Probation => {
            match event.participant.as_deref().map(Address::parse).transpose() {
                Ok(address) => directory
                    .send(ReloadParticipants {
                        address,
                        forget: event.kind == EventKind::Forget,
                    })
                    .timeout(ACTOR_TIMEOUT)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    let participant = event.participant.as_deref().unwrap_or("all");
    match result {
        Ok(reloaded) => {
            replicas.count_event(event.kind, Direction::Applied);
            info!(log, "shared event applied"; "stage" => "shared_event_applied",
                "kind" => event.kind.as_str(), "participant" => participant,
                "origin" => &event.origin, "reloaded" => reloaded);
        }
        Err(e) => {
            replicas.count_event(event.kind, Direction::Failed);
            warn!(log, "shared event not applied"; "stage" => "shared_event_applied",
                "kind" => event.kind.as_str(), "participant" => participant,
                "origin" => &event.origin, "error" => e);
        }
    }
}

async fn resync(directory: &TrackedAddr<Directory>, log: &Logger) {
    let participants = directory
        .send(ReloadParticipants {
            address: None,
            forget: false,
        })
        .timeout(ACTOR_TIMEOUT)
        .await;
    let settings = directory
        .send(ReloadHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await;
    match (participants, settings) {
        (Ok(n), Ok(())) => info!(log, "health and settings reloaded after a reconnect";
            "stage" => "shared_event_applied", "kind" => "resync", "reloaded" => n),
        (Err(e), _) | (_, Err(e)) => warn!(log, "reload after a reconnect failed";
            "stage" => "shared_event_applied", "kind" => "resync", "error" => %e),
    }
}

/// Chain polling and rotation reloaded from the store (another replica changed them).
async fn reload_settings(reloads: &Reloads, log: &Logger) {
    match reloads.settings(log).await {
        Ok(changed) if changed.is_empty() => {}
        Ok(changed) => info!(log, "settings another replica changed reloaded";
            "stage" => "shared_settings_reloaded", "sections" => changed.join(",")),
        Err(e) => warn!(log, "settings another replica changed not reloaded";
            "stage" => "shared_settings_reloaded", "error" => e),
    }
}
