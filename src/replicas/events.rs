//! Host health and settings shared between replicas through `LISTEN/NOTIFY`.
//!
//! A replica that ejects, forgets or unquarantines a participant (admin API), whose participant
//! actor ejects one or starts its probation by itself, or that changes the settings
//! (`PUT /v1/admin/settings`), persists the change first and then `NOTIFY`s the channel
//! ([`channel_for`]: `devshard_events`, or `devshard_events_<schema>` when the tables are not in
//! `public`, so databases shared by several schemas keep their events apart) with a JSON
//! [`SharedEvent`]. Every replica listens on a dedicated connection of its own
//! ([`spawn_listener`], thread `replica-events`), ignores its own events and hands the others to
//! the applier (`apply.rs`), which reloads the participant's health or the settings from the
//! store. A dropped listening connection is reconnected (backoff 200 ms … 5 s); the events it may
//! have missed are covered by a full reload ([`Received::Resync`]).
//!
//! Log stages `shared_event_sent`, `shared_event_applied`, `shared_events_listening`,
//! `shared_events_listener_lost`; metric `devshard_shared_events_total{kind,direction}`.

use std::time::Duration;

use devshard_actors::{directory::ParticipantOp, participant::messages::HealthDecision};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use slog::{info, warn, Logger};
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::AsyncMessage;

use crate::store::postgres::{target, PgConnectError, PgTarget};

/// The channel of a database whose tables are in `public`.
pub const CHANNEL: &str = "devshard_events";
/// Longest identifier PostgreSQL keeps (bytes).
const MAX_IDENTIFIER: usize = 63;
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Eject,
    Forget,
    Unquarantine,
    /// A replica's own health decision moved a participant into probation.
    Probation,
    Settings,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Eject => "eject",
            EventKind::Forget => "forget",
            EventKind::Unquarantine => "unquarantine",
            EventKind::Probation => "probation",
            EventKind::Settings => "settings",
        }
    }
}

impl From<ParticipantOp> for EventKind {
    fn from(op: ParticipantOp) -> EventKind {
        match op {
            ParticipantOp::ForceEject => EventKind::Eject,
            ParticipantOp::Forget => EventKind::Forget,
            ParticipantOp::Unquarantine => EventKind::Unquarantine,
        }
    }
}

impl From<HealthDecision> for EventKind {
    fn from(d: HealthDecision) -> EventKind {
        match d {
            HealthDecision::Ejected => EventKind::Eject,
            HealthDecision::ProbationStarted => EventKind::Probation,
        }
    }
}

/// The `direction` label of `devshard_shared_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Notified by this replica.
    Sent,
    /// Received from another replica and applied.
    Applied,
    /// Received from this replica itself (ignored).
    OwnIgnored,
    /// Could not be sent or applied.
    Failed,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Sent => "sent",
            Direction::Applied => "applied",
            Direction::OwnIgnored => "own_ignored",
            Direction::Failed => "failed",
        }
    }
}

/// The payload of one notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedEvent {
    pub kind: EventKind,
    /// The participant's address (`None`: every participant, or a settings change).
    pub participant: Option<String>,
    /// The replica that made the change.
    pub origin: String,
}

/// What the listener hands to the applier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    Event(SharedEvent),
    /// The listening connection was re-established: events may have been missed.
    Resync,
}

/// The channel for tables in `schema`.
pub fn channel_for(schema: &str) -> String {
    if schema.is_empty() || schema == "public" {
        return CHANNEL.to_string();
    }
    let mut name = format!("{CHANNEL}_{schema}");
    while name.len() > MAX_IDENTIFIER {
        name.pop();
    }
    name
}

/// `name` as a quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Decides what a received payload is: an event of another replica, one of ours (`Ok(None)`),
/// or unreadable.
pub fn decode(payload: &str, me: &str) -> Result<Option<SharedEvent>, serde_json::Error> {
    let event: SharedEvent = serde_json::from_str(payload)?;
    Ok((event.origin != me).then_some(event))
}

/// Where the listener sends what it receives, and who it is.
pub struct ListenerWiring {
    /// The store's database and TLS settings.
    pub target: PgTarget,
    pub channel: String,
    pub me: String,
    pub sink: UnboundedSender<Received>,
    pub counted: super::Replicas,
    pub log: Logger,
}

/// Starts the listener on a thread with its own runtime; it ends when the sink is dropped.
pub fn spawn_listener(wiring: ListenerWiring) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("replica-events".into())
        .spawn(move || {
            let rt = match crate::store::postgres::thread_runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    warn!(wiring.log, "the shared events listener has no runtime";
                        "stage" => "shared_events_listener_lost", "error" => %e);
                    return;
                }
            };
            rt.block_on(listen_forever(wiring));
        })
        .map(|_| ())
}

async fn listen_forever(w: ListenerWiring) {
    let mut backoff = RECONNECT_FIRST;
    let mut first = true;
    loop {
        match listen_once(&w, first).await {
            Ok(Stop::SinkClosed) => return,
            Ok(Stop::ConnectionEnded) => {
                warn!(w.log, "the shared events connection ended; reconnecting";
                    "stage" => "shared_events_listener_lost");
                backoff = RECONNECT_FIRST;
                first = false;
            }
            Err(e) => {
                warn!(w.log, "shared events: cannot listen; retrying";
                    "stage" => "shared_events_listener_lost", "error" => %e,
                    "retry_ms" => backoff.as_millis());
                if !first {
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                }
                first = false;
            }
        }
        if w.sink.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
    }
}

enum Stop {
    SinkClosed,
    ConnectionEnded,
}

/// Why listening failed.
#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error(transparent)]
    Connect(#[from] PgConnectError),
    #[error(transparent)]
    Sql(#[from] tokio_postgres::Error),
}

/// How long the listener's connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

async fn listen_once(w: &ListenerWiring, first: bool) -> Result<Stop, ListenError> {
    let (client, mut connection, negotiated) = target::connect(&w.target, CONNECT_TIMEOUT).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                if tx.send(n.payload().to_string()).is_err() {
                    return;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {}", quoted(&w.channel)))
        .await?;
    info!(w.log, "listening for the other replicas' events"; "stage" => "shared_events_listening",
        "channel" => &w.channel, "tls" => negotiated.tls, "sslmode" => negotiated.mode.as_str());
    if !first && w.sink.send(Received::Resync).is_err() {
        return Ok(Stop::SinkClosed);
    }
    while let Some(payload) = rx.recv().await {
        match decode(&payload, &w.me) {
            Ok(Some(event)) => {
                if w.sink.send(Received::Event(event)).is_err() {
                    driver.abort();
                    return Ok(Stop::SinkClosed);
                }
            }
            Ok(None) => {
                if let Ok(own) = serde_json::from_str::<SharedEvent>(&payload) {
                    w.counted.count_event(own.kind, Direction::OwnIgnored);
                }
            }
            Err(e) => warn!(w.log, "unreadable shared event ignored";
                "stage" => "shared_event_unreadable", "error" => %e),
        }
    }
    drop(client);
    Ok(Stop::ConnectionEnded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_per_schema_and_own_events_ignored() {
        assert_eq!(channel_for("public"), "devshard_events");
        assert_eq!(channel_for("t_x_1"), "devshard_events_t_x_1");
        assert!(channel_for(&"s".repeat(100)).len() <= 63);
        assert_eq!(quoted("a\"b"), "\"a\"\"b\"");
        let e = SharedEvent {
            kind: EventKind::Eject,
            participant: Some("gonka1x".into()),
            origin: "a".into(),
        };
        let payload = serde_json::to_string(&e).unwrap();
        assert!(payload.contains("\"kind\":\"eject\""), "{payload}");
        assert_eq!(decode(&payload, "b").unwrap(), Some(e));
        assert_eq!(decode(&payload, "a").unwrap(), None);
        assert!(decode("{", "a").is_err());
    }
}
