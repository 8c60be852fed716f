//! Actor-level harness: the simulated network and the gateway's actors (directory, escrows,
//! participants, races) in one runtime, without the HTTP edge. Used where the tokio clock is
//! paused (the in-memory store keeps every ack immediate, so virtual time never jumps while a
//! real thread works).
#![allow(dead_code)] // shared by every test module; not each uses every helper

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use bytes::Bytes;
use devshard_actors::{
    clock::{SharedClock, TokioClock},
    directory::{
        AddEscrow, Directory, DirectoryDeps, EscrowBoard, GetEscrow, PickEscrow, RestartBudget,
    },
    escrow::{
        messages::{EscrowSnapshot, GetSnapshot, InferenceParams},
        EscrowConfig, EscrowInfo, HostEndpoint,
    },
    protocol::{canonical::prompt_hash, crypto::Address, state::Slot},
    race::{RaceActor, RaceError, RaceErrorKind, RaceLimits, RaceSpec, RaceStart},
    stats::{ActorRegistry, TrackedActor, TrackedAddr},
    store::{MemoryStore, SharedStore},
};
use devshard_gateway::{
    http::error::{stream_error_event, ApiError},
    sim::{SimConfig, SimNetwork},
};

static RACE_IDS: AtomicU64 = AtomicU64::new(1);

/// The gateway's actors over a simulated network.
pub struct Harness {
    pub sim: SimNetwork,
    pub directory: TrackedAddr<Directory>,
    /// What the directory publishes for the pick.
    pub board: EscrowBoard,
    pub store: SharedStore,
    pub clock: SharedClock,
    pub limits: RaceLimits,
    pub log: slog::Logger,
    pub metrics: devshard_actors::metrics::ActorMetrics,
    /// Every live actor's stats.
    pub actors: ActorRegistry,
}

/// What a test's request ended as.
#[derive(Debug)]
pub enum Answer {
    /// Streamed SSE bytes, complete.
    Stream(Vec<u8>),
    /// A non-streaming body.
    Whole(Bytes),
    /// Failed before any byte.
    Failed(Failure),
}

/// A race that failed before any byte, as a client sees it: the status comes from the HTTP
/// edge's one mapping table.
#[derive(Debug)]
pub struct Failure {
    pub status: u16,
    pub message: String,
    pub error: RaceError,
}

impl Failure {
    fn of(error: RaceError) -> Self {
        Failure {
            status: ApiError::Race(error.clone()).parts().status,
            message: error.message.clone(),
            error,
        }
    }
}

impl Answer {
    /// The concatenated `delta.content` of a streamed answer (or the message of a whole one).
    pub fn content(&self) -> String {
        match self {
            Answer::Stream(bytes) => stream_content(bytes),
            Answer::Whole(b) => {
                let v: serde_json::Value = serde_json::from_slice(b).unwrap_or_default();
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            Answer::Failed(_) => String::new(),
        }
    }

    pub fn is_success(&self) -> bool {
        !matches!(self, Answer::Failed(_))
    }
}

/// Content of an SSE stream of chat chunks.
pub fn stream_content(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for line in text.lines() {
        let Some(json) = line.strip_prefix("data: ") else {
            continue;
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(json) {
            if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                out.push_str(c);
            }
        }
    }
    out
}

/// Our view of a simulated escrow, built from the simulator's chain facts.
pub fn escrow_info(sim: &SimNetwork, escrow_id: &str) -> EscrowInfo {
    let chain = sim
        .escrow(escrow_id)
        .expect("escrow on the simulated chain");
    let group: Vec<Slot> = chain
        .slots
        .iter()
        .enumerate()
        .map(|(i, a)| Slot {
            slot_id: i as u32,
            validator: a.clone(),
        })
        .collect();
    let mut hosts: Vec<HostEndpoint> = Vec::new();
    for (i, addr) in chain.slots.iter().enumerate() {
        if let Some(h) = hosts.iter_mut().find(|h| &h.address == addr) {
            h.slots.push(i as u32);
            continue;
        }
        let url = sim
            .hosts()
            .iter()
            .find(|h| &h.address == addr)
            .expect("host")
            .url
            .clone();
        hosts.push(HostEndpoint {
            address: addr.clone(),
            base_url: url,
            slots: vec![i as u32],
            weight: 1,
        });
    }
    EscrowInfo {
        escrow_id: escrow_id.to_string(),
        creator: chain.creator.clone(),
        model: sim.config().model.clone(),
        amount: chain.amount,
        config: chain.session_config.clone(),
        group,
        hosts,
        max_nonce: 20_000,
        route_prefix: sim.config().route_prefix.clone(),
    }
}

#[path = "recent_log.rs"]
pub mod recent_log;

/// A JSON test logger that discards output unless `TEST_LOG=1`, or keeps the last lines in
/// memory once the test binary asked for them (`recent_log::keep_recent_log`).
pub fn logger() -> slog::Logger {
    use slog::Drain;
    if let Some(drain) = recent_log::recent_drain() {
        return slog::Logger::root(drain, slog::o!());
    }
    if std::env::var("TEST_LOG").is_ok() {
        let drain = slog_json::Json::default(std::io::stderr()).fuse();
        let drain = std::sync::Mutex::new(drain).fuse();
        slog::Logger::root(drain, slog::o!())
    } else {
        slog::Logger::root(slog::Discard, slog::o!())
    }
}

impl Harness {
    /// Starts the simulator and the actors, and registers every simulated escrow.
    pub async fn start(cfg: SimConfig) -> Harness {
        Self::start_escrow(cfg, EscrowConfig::default()).await
    }

    /// [`Harness::start`] with escrows configured as `escrow_cfg`.
    pub async fn start_escrow(cfg: SimConfig, escrow_cfg: EscrowConfig) -> Harness {
        Self::start_with(cfg, Arc::new(MemoryStore::new()), escrow_cfg).await
    }

    pub async fn start_with(
        cfg: SimConfig,
        store: SharedStore,
        escrow_cfg: EscrowConfig,
    ) -> Harness {
        Self::start_mapped(cfg, store, escrow_cfg, |_, info| async move { info }).await
    }

    /// [`Harness::start_with`], registering `map(sim, info)` instead of each escrow's `info`
    /// (e.g. hosts behind TLS proxies).
    pub async fn start_mapped<F, Fut>(
        cfg: SimConfig,
        store: SharedStore,
        escrow_cfg: EscrowConfig,
        map: F,
    ) -> Harness
    where
        F: Fn(&SimNetwork, EscrowInfo) -> Fut,
        Fut: std::future::Future<Output = EscrowInfo>,
    {
        let mut cfg = cfg;
        // The test binary decides whether hosts sign with warm keys (`tests/gateway_warm.rs`
        // runs the seed incident tests with every host on warm keys).
        if cfg.warm_keys == devshard_gateway::sim::WarmMode::None {
            cfg.warm_keys = crate::WARM_KEYS;
        }
        let clock = TokioClock::new().shared();
        let key = Arc::new(cfg.gateway_key.clone());
        let escrows = cfg.escrow_ids.clone();
        let sim = SimNetwork::start(cfg, clock.clone())
            .await
            .expect("simulator starts");
        let log = logger();
        let metrics = devshard_actors::metrics::ActorMetrics::detached().expect("metrics");
        let actors = ActorRegistry::default();
        let deps = DirectoryDeps {
            key,
            store: store.clone(),
            clock: clock.clone(),
            log: log.clone(),
            escrow_cfg,
            budget: RestartBudget::default(),
            fault_injection: true,
            metrics: metrics.clone(),
            actors: actors.clone(),
            warm: devshard_actors::protocol::warm::WarmKeyChecker::rest(
                sim.chain_url(),
                clock.clone(),
                devshard_actors::protocol::warm::WarmKeyMetrics::detached().expect("metrics"),
                log.clone(),
            ),
        };
        let directory = Directory::new(deps);
        let board = directory.board();
        let directory = directory.start_tracked();
        for id in escrows {
            let info = map(&sim, escrow_info(&sim, &id)).await;
            directory
                .send(AddEscrow { info, key: None })
                .await
                .expect("directory")
                .expect("escrow added");
        }
        Harness {
            sim,
            directory,
            board,
            store,
            clock,
            limits: RaceLimits::default(),
            log,
            metrics,
            actors,
        }
    }

    /// A request and its time to first byte (virtual time when the clock is paused).
    pub async fn chat_timed(
        &self,
        body: serde_json::Value,
    ) -> (Answer, Option<std::time::Duration>) {
        self.chat_on_timed(None, body).await
    }

    /// Sends one chat request through a race and collects the whole answer.
    pub async fn chat(&self, body: serde_json::Value) -> Answer {
        self.chat_on(None, body).await
    }

    /// Like `chat`, on a given escrow (or the directory's choice).
    pub async fn chat_on(&self, escrow: Option<&str>, body: serde_json::Value) -> Answer {
        self.chat_on_timed(escrow, body).await.0
    }

    /// `chat_on` with the time to first byte.
    pub async fn chat_on_timed(
        &self,
        escrow: Option<&str>,
        body: serde_json::Value,
    ) -> (Answer, Option<std::time::Duration>) {
        let model = self.sim.config().model.clone();
        let mut body = body;
        body["model"] = serde_json::json!(model);
        let stream = body["stream"].as_bool().unwrap_or(false);
        let max_tokens = body["max_tokens"].as_u64().unwrap_or(64);
        body["max_tokens"] = serde_json::json!(max_tokens);
        let raw = serde_json::to_vec(&body).expect("json");
        let race_id = RACE_IDS.fetch_add(1, Ordering::Relaxed);
        let params = InferenceParams {
            request_id: format!("test-{race_id}"),
            model: model.clone(),
            prompt_hash: prompt_hash(&raw).expect("prompt hash"),
            body: Bytes::from(raw),
            max_tokens,
            stream,
            only_hosts: None,
        };
        let (escrow_id, addr) = match escrow {
            Some(id) => {
                let msg = GetEscrow {
                    escrow_id: id.to_string(),
                };
                match self.directory.send(msg).await.expect("directory") {
                    Some(addr) => (id.to_string(), addr),
                    None => {
                        return (
                            Answer::Failed(Failure::of(RaceError {
                                kind: RaceErrorKind::EscrowUnavailable,
                                message: format!("escrow {id} is not running"),
                                retry_after_s: Some(1),
                            })),
                            None,
                        )
                    }
                }
            }
            None => {
                let p = self.board.pick(&PickEscrow {
                    model: &model,
                    request_id: &params.request_id,
                    input_bytes: params.body.len() as u64,
                    max_tokens,
                    deactivated: &Default::default(),
                    closed: &[],
                    only_hosts: None,
                });
                match p {
                    Ok(p) => (p.escrow_id, p.addr),
                    // Admission refused every escrow (e.g. none has a routable host): the client
                    // gets a clear 503 (`ApiError::NoEscrow` at the edge).
                    Err(e) => {
                        return (
                            Answer::Failed(Failure::of(RaceError {
                                kind: RaceErrorKind::EscrowUnavailable,
                                message: e.to_string(),
                                retry_after_s: Some(5),
                            })),
                            None,
                        )
                    }
                }
            }
        };
        let spec = RaceSpec {
            race_id,
            escrow_id,
            escrow: addr,
            directory: self.directory.clone(),
            params: Arc::new(params),
            limits: self.limits,
            clock: self.clock.clone(),
            log: self.log.clone(),
            metrics: self.metrics.clone(),
            actors: self.actors.clone(),
            report: None,
            stream_error: stream_error_event,
            dispatched: None,
        };
        let started = tokio::time::Instant::now();
        match RaceActor::start_race(spec).await {
            Ok(Ok(RaceStart::Stream(mut rx))) => {
                let mut out = Vec::new();
                let mut first = None;
                while let Some(b) = rx.recv().await {
                    first = first.or(Some(started.elapsed()));
                    out.extend_from_slice(&b);
                }
                (Answer::Stream(out), first)
            }
            Ok(Ok(RaceStart::Whole(b))) => (Answer::Whole(b), Some(started.elapsed())),
            Ok(Err(e)) => (Answer::Failed(Failure::of(e)), None),
            Err(_) => panic!("race dropped its reply"),
        }
    }

    /// A simple chat request body.
    pub fn body(text: &str, stream: bool) -> serde_json::Value {
        serde_json::json!({"messages": [{"role": "user", "content": text}], "stream": stream, "max_tokens": 32})
    }

    /// The escrow actor's snapshot.
    pub async fn snapshot(&self, escrow_id: &str) -> EscrowSnapshot {
        let addr = self
            .directory
            .send(GetEscrow {
                escrow_id: escrow_id.to_string(),
            })
            .await
            .expect("directory")
            .expect("escrow alive");
        addr.send(GetSnapshot).await.expect("snapshot")
    }

    /// A participant's persisted record, through its actor.
    pub async fn participant(
        &self,
        address: &Address,
    ) -> devshard_actors::participant::record::ParticipantRecord {
        let addr = self
            .directory
            .send(devshard_actors::directory::GetParticipantActor {
                address: address.clone(),
            })
            .await
            .expect("directory")
            .expect("participant actor");
        addr.send(devshard_actors::participant::messages::GetParticipant)
            .await
            .expect("participant")
            .record
            .clone()
    }

    /// Waits (virtual or real time) until the directory reports an entity alive again.
    pub async fn wait_alive(&self, kind: devshard_actors::directory::ActorKind, id: &str) {
        for _ in 0..500 {
            let status = self
                .directory
                .send(devshard_actors::directory::GetStatus)
                .await
                .expect("directory");
            if status
                .entities
                .iter()
                .any(|e| e.kind == kind && e.id == id && e.alive)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{kind:?} {id} was not respawned");
    }

    /// The escrow's actor.
    pub async fn escrow_addr(
        &self,
        escrow_id: &str,
    ) -> TrackedAddr<devshard_actors::escrow::EscrowActor> {
        self.directory
            .send(GetEscrow {
                escrow_id: escrow_id.to_string(),
            })
            .await
            .expect("directory")
            .expect("escrow alive")
    }

    /// Address of simulated host `i`.
    pub fn host(&self, i: usize) -> Address {
        self.sim.hosts()[i].address.clone()
    }
}
