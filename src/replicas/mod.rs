//! Several replicas on one PostgreSQL database (README "Any replica serves any request"):
//! forwarding requests to the replica that owns a suitable escrow ([`route`],
//! `crate::http::forward`), sharing host health and settings changes between replicas
//! ([`events`], [`apply`]), and publishing the budgets of this replica's escrows for the
//! rotation's leader ([`budgets`]). SQLite has none of this ([`Replicas::for_store`] is `None`).
//!
//! | metric | type |
//! |---|---|
//! | `devshard_requests_forwarded_total{outcome}` | counter: requests forwarded to (or refused for) another replica, by [`ForwardOutcome`] |
//! | `devshard_shared_events_total{kind,direction}` | counter: shared events by [`events::EventKind`] and [`events::Direction`] |
//! | `devshard_escrow_budgets_published_total{result}` | counter: budgets of this replica's escrows published for the rotation's leader ([`budgets`]) |
//!
//! The lookup of the other replicas' escrows (live lease, live `replicas` row, the escrow's
//! model) is cached for [`LOOKUP_TTL`]; a failed forward drops the cache.

pub mod apply;
pub mod budgets;
pub mod events;
pub mod route;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use devshard_actors::{
    directory::{Directory, ShareHealthDecisions},
    participant::messages::HealthDecided,
    stats::TrackedAddr,
};
use prometheus::{IntCounterVec, Opts, Registry};
use slog::{info, warn, Logger};

use crate::store::{
    postgres::{replicas::RemoteEscrow, PgStore},
    GatewayStore,
};

/// Names the replica that served a chat request (on every chat answer of a PostgreSQL replica).
pub const HEADER_REPLICA: &str = "x-devshard-replica";
/// Marks a forwarded request with the forwarding replica's id: its receiver never forwards it.
pub const HEADER_FORWARDED_BY: &str = "x-devshard-forwarded-by";
/// How long a lookup of the other replicas' escrows is reused.
pub const LOOKUP_TTL: Duration = Duration::from_millis(500);
/// `Retry-After` of a refused or failed forward.
pub const FORWARD_RETRY_AFTER_S: u64 = 1;

/// Why a request could not be forwarded (503 + `Retry-After`, `crate::http::error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("escrow {escrow} is served by replica {owner}, which could not be reached ({reason}); retry shortly")]
    OwnerUnreachable {
        owner: String,
        escrow: String,
        reason: String,
    },
    #[error("this request was forwarded by replica {from} to replica {here}, which cannot serve model {model} either; requests are forwarded once only, retry shortly")]
    SecondHop {
        from: String,
        here: String,
        model: String,
    },
}

impl ForwardError {
    /// The `code` of the error body.
    pub fn code(&self) -> &'static str {
        match self {
            ForwardError::OwnerUnreachable { .. } => "owner_unreachable",
            ForwardError::SecondHop { .. } => "forward_hop_limit",
        }
    }
}

/// The `outcome` label of `devshard_requests_forwarded_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// The owner answered (any status; its answer is passed through).
    Forwarded,
    /// The owner could not be reached.
    OwnerUnreachable,
    /// A forwarded request this replica cannot serve (one hop only).
    SecondHopRefused,
    /// The owner refused the request (its escrow closed since the lookup): sent to another.
    Rerouted,
    /// No local escrow could take a request routed here after all: sent to an owner elsewhere.
    AfterLocalRefusal,
    /// The request's escrow here closed under its race before granting it a nonce, and no
    /// other escrow here could take it: sent to an owner elsewhere.
    AfterEscrowClosed,
    /// A request forwarded here that no escrow here could take after all (nothing granted):
    /// refused with `X-Devshard-Forward-Refused`, so its forwarder sends it to another owner.
    HandedBack,
}

impl ForwardOutcome {
    pub const ALL: [ForwardOutcome; 7] = [
        ForwardOutcome::Forwarded,
        ForwardOutcome::OwnerUnreachable,
        ForwardOutcome::SecondHopRefused,
        ForwardOutcome::Rerouted,
        ForwardOutcome::AfterLocalRefusal,
        ForwardOutcome::AfterEscrowClosed,
        ForwardOutcome::HandedBack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ForwardOutcome::Forwarded => "forwarded",
            ForwardOutcome::OwnerUnreachable => "owner_unreachable",
            ForwardOutcome::SecondHopRefused => "second_hop_refused",
            ForwardOutcome::Rerouted => "rerouted",
            ForwardOutcome::AfterLocalRefusal => "after_local_refusal",
            ForwardOutcome::AfterEscrowClosed => "after_escrow_closed",
            ForwardOutcome::HandedBack => "handed_back",
        }
    }
}

type Cached = Option<(Instant, Arc<Vec<RemoteEscrow>>)>;

pub use apply::Reloads;

/// Starts sharing host health with the other replicas: this replica's own participant
/// decisions (ejections, probations) are published once persisted, and the others' events are
/// applied here (the applier on this actix system and the listener thread feeding it (a listener that cannot start is logged; forwarding works
/// without it).
pub fn start_sharing(
    replicas: &Replicas,
    directory: TrackedAddr<Directory>,
    reloads: Reloads,
    log: &Logger,
) {
    let Some(pg) = replicas.pg() else { return };
    let (decided, mut decisions) = tokio::sync::mpsc::unbounded_channel::<HealthDecided>();
    directory.do_send(ShareHealthDecisions(decided));
    let own = replicas.clone();
    actix_web::rt::spawn(async move {
        while let Some(d) = decisions.recv().await {
            own.publish(d.decision.into(), Some(d.address.to_string()))
                .await;
        }
    });
    let sink = apply::start(replicas.clone(), directory, reloads, log.clone());
    let wiring = events::ListenerWiring {
        target: pg.connect_target().clone(),
        channel: replicas.channel().to_string(),
        me: replicas.id().to_string(),
        sink,
        counted: replicas.clone(),
        log: log.clone(),
    };
    if let Err(e) = events::spawn_listener(wiring) {
        warn!(log, "the shared events listener did not start"; "stage" => "shared_events_listener_lost",
            "error" => %e);
    }
}

/// This replica's view of the others (cheap to clone; one per process).
#[derive(Clone)]
pub struct Replicas {
    store: Arc<GatewayStore>,
    cache: Arc<Mutex<Cached>>,
    spread: Arc<AtomicUsize>,
    forwarded: IntCounterVec,
    events: IntCounterVec,
    /// The `NOTIFY` channel of this database schema (`events::channel_for`).
    channel: Arc<str>,
    log: Logger,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

impl Replicas {
    /// The replicas' view for a PostgreSQL `store` (`None` for SQLite), metrics registered.
    pub async fn for_store(
        store: Arc<GatewayStore>,
        registry: &Registry,
        log: Logger,
    ) -> prometheus::Result<Option<Replicas>> {
        let GatewayStore::Postgres(pg) = &*store else {
            return Ok(None);
        };
        let schema = pg.schema().await.unwrap_or_else(|e| {
            warn!(log, "the schema name could not be read; using the public channel";
                "stage" => "replica_lookup_failed", "error" => %e);
            String::new()
        });
        let channel: Arc<str> = events::channel_for(&schema).into();
        let forwarded = IntCounterVec::new(
            Opts::new(
                "requests_forwarded_total",
                "Requests forwarded to the replica owning a suitable escrow, by outcome",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(forwarded.clone()))?;
        for o in ForwardOutcome::ALL {
            forwarded.with_label_values(&[o.as_str()]);
        }
        let events = IntCounterVec::new(
            Opts::new(
                "shared_events_total",
                "Host health and settings events shared between replicas (LISTEN/NOTIFY), by kind and direction",
            ),
            &["kind", "direction"],
        )?;
        registry.register(Box::new(events.clone()))?;
        Ok(Some(Replicas {
            store,
            cache: Arc::default(),
            spread: Arc::default(),
            forwarded,
            events,
            channel,
            log,
        }))
    }

    /// The PostgreSQL store (always, by construction).
    pub fn pg(&self) -> Option<&PgStore> {
        match &*self.store {
            GatewayStore::Postgres(pg) => Some(pg),
            GatewayStore::Sqlite(_) => None,
        }
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        self.pg().map_or("", PgStore::replica_id)
    }

    /// The other replicas' live escrows (cached for [`LOOKUP_TTL`]; a failed lookup is logged
    /// and reads as none).
    pub async fn remote(&self) -> Arc<Vec<RemoteEscrow>> {
        if let Some((at, list)) = &*self.cache.lock().unwrap_or_else(|e| e.into_inner()) {
            if at.elapsed() < LOOKUP_TTL {
                return list.clone();
            }
        }
        let Some(pg) = self.pg() else {
            return Arc::default();
        };
        let list = match pg.remote_escrows().await {
            Ok(list) => Arc::new(list),
            Err(e) => {
                warn!(self.log, "the other replicas' escrows could not be read";
                    "stage" => "replica_lookup_failed", "error" => %e);
                return Arc::default();
            }
        };
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), list.clone()));
        list
    }

    /// Drops the cached lookup (after a failed forward).
    pub fn forget_lookup(&self) {
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether this replica holds the lease of `escrow`.
    pub fn holds(&self, escrow: &str) -> bool {
        self.pg().is_some_and(|pg| pg.holds(escrow))
    }

    /// A rotating number that spreads forwarded requests over the suitable owners.
    pub fn next_spread(&self) -> usize {
        self.spread.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a forward's outcome.
    pub fn count_forward(&self, outcome: ForwardOutcome) {
        self.forwarded.with_label_values(&[outcome.as_str()]).inc();
    }

    /// The process logger.
    pub fn log(&self) -> &Logger {
        &self.log
    }

    /// The `NOTIFY` channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Tells the other replicas that this one changed `kind` (of `participant`, or of every
    /// participant) — after the change is persisted. A failure is logged and counted: the
    /// others then see the change at their next reload (a reconnect of their listener).
    pub async fn publish(&self, kind: events::EventKind, participant: Option<String>) {
        let event = events::SharedEvent {
            kind,
            participant,
            origin: self.id().to_string(),
        };
        let sent = match (self.pg(), serde_json::to_string(&event)) {
            (Some(pg), Ok(payload)) => pg
                .notify(&self.channel, &payload)
                .await
                .map_err(|e| e.to_string()),
            (None, _) => Err("not a PostgreSQL store".to_string()),
            (_, Err(e)) => Err(e.to_string()),
        };
        match sent {
            Ok(()) => {
                self.count_event(kind, events::Direction::Sent);
                info!(self.log, "shared event sent to the other replicas";
                    "stage" => "shared_event_sent", "kind" => kind.as_str(),
                    "participant" => event.participant.as_deref().unwrap_or("all"));
            }
            Err(e) => {
                self.count_event(kind, events::Direction::Failed);
                warn!(self.log, "shared event not sent"; "stage" => "shared_event_sent",
                    "kind" => kind.as_str(), "error" => e);
            }
        }
    }

    /// Counts a shared event.
    pub fn count_event(&self, kind: events::EventKind, direction: events::Direction) {
        self.events
            .with_label_values(&[kind.as_str(), direction.as_str()])
            .inc();
    }
}
