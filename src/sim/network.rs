//! [`SimNetwork`]: starting the chain API and the hosts on the current runtime, and the library
//! API tests use to inspect and steer them.

use std::{net::SocketAddr, sync::Arc};

use http::Request;
use hyper::body::Incoming;

use devshard_actors::{
    clock::SharedClock,
    protocol::{
        crypto::{sha256, Address, SigningKey},
        warm::SharedResolver,
    },
};

mod chain_view;

use super::{
    chain::{pubkey_b64, Chain, EscrowInfo, ParticipantInfo},
    config::SimConfig,
    control, cosmos_api,
    create::{Creation, Template},
    epoch,
    faults::{Counters, Faults},
    host::{self, session::HostView, HostState},
    ledger::Ledger,
    profile::LatencyProfile,
    server::{bind_reuse, Handler, Listener, Resp},
    warm::{self, HostGrants, WarmRegistry},
};

/// Errors of starting or steering the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulator config: {0}")]
    Config(String),
    #[error("the simulator must be started inside a tokio runtime")]
    NoRuntime,
    #[error("bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("unknown host index {0}")]
    UnknownHost(usize),
}

/// Shared state of the whole network (held by every server task).
#[derive(Debug)]
pub(crate) struct NetCore {
    pub(crate) cfg: SimConfig,
    pub(crate) chain: Chain,
    pub(crate) hosts: Vec<Arc<HostState>>,
    /// The chain's warm-key grants (`warm.rs`).
    pub(crate) warm: Arc<WarmRegistry>,
    /// The chain API's listener, for the control API's outage knob (set once it listens).
    pub(crate) chain_listener: std::sync::OnceLock<std::sync::Weak<Listener>>,
}

impl NetCore {
    /// Step 4 of the warm-key rule for a host's state machine: the chain's grant table.
    pub(crate) fn host_grants(&self) -> SharedResolver {
        Arc::new(HostGrants(Arc::clone(&self.warm)))
    }
}

/// Public facts about one host.
#[derive(Clone, Debug)]
pub struct SimHostInfo {
    pub index: usize,
    pub address: Address,
    /// Base URL (`http://ip:port`), the participant's `inference_url`.
    pub url: String,
    /// The cold key (its address is the host's identity).
    pub key: SigningKey,
    /// The warm key it signs with, if any.
    pub warm_key: Option<SigningKey>,
}

/// A running simulated network. Dropping it stops every server.
#[derive(Debug)]
pub struct SimNetwork {
    core: Arc<NetCore>,
    chain_listener: Arc<Listener>,
    chain_url: String,
    hosts: Vec<SimHostInfo>,
}

fn bind(cfg: &SimConfig, offset: usize) -> Result<tokio::net::TcpListener, SimError> {
    let port = match cfg.base_port {
        0 => 0,
        base => u16::try_from(usize::from(base) + offset)
            .map_err(|_| SimError::Config("base_port + hosts exceeds 65535".into()))?,
    };
    let addr = SocketAddr::new(cfg.bind_ip, port);
    bind_reuse(addr).map_err(|source| SimError::Bind { addr, source })
}

fn local_url(l: &tokio::net::TcpListener) -> Result<String, SimError> {
    l.local_addr()
        .map(|a| format!("http://{a}"))
        .map_err(|e| SimError::Config(format!("local address: {e}")))
}

impl SimNetwork {
    /// Binds every server and starts them on the current tokio runtime.
    pub async fn start(cfg: SimConfig, clock: SharedClock) -> Result<SimNetwork, SimError> {
        let slot_map = cfg.validate().map_err(SimError::Config)?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| SimError::NoRuntime)?;
        let chain_tcp = bind(&cfg, 0)?;
        let chain_url = local_url(&chain_tcp)?;
        let mut host_tcp = Vec::with_capacity(cfg.hosts);
        let mut hosts = Vec::with_capacity(cfg.hosts);
        for i in 0..cfg.hosts {
            let tcp = bind(&cfg, i + 1)?;
            let key = SigningKey::derive(&cfg.seed, i as u32);
            let warm_key = cfg
                .warm_keys
                .covers(i, cfg.hosts)
                .then(|| warm::warm_key(&cfg.seed, i));
            hosts.push(SimHostInfo {
                index: i,
                address: key.address().clone(),
                url: local_url(&tcp)?,
                key,
                warm_key,
            });
            host_tcp.push(tcp);
        }
        let participants = hosts
            .iter()
            .map(|h| {
                let w = sha256(format!("{}/weight/{}", cfg.seed, h.index).as_bytes());
                ParticipantInfo {
                    index: h.index,
                    address: h.address.clone(),
                    url: h.url.clone(),
                    weight: 1_000 + u64::from(u16::from_be_bytes([w[0], w[1]]) % 1_000),
                    validator_key: pubkey_b64(&h.key.public_key().serialize()),
                    node_id: format!("mlnode-{}", h.index),
                    preserved: h.index % 2 == 0,
                }
            })
            .collect();
        let epoch_index = epoch::view_at(&cfg.epochs, epoch::height_at(&cfg.epochs, 0)).epoch_index;
        let slots: Vec<Address> = slot_map.iter().map(|&h| hosts[h].address.clone()).collect();
        let escrows = cfg
            .escrow_ids
            .iter()
            .map(|id| EscrowInfo {
                escrow_id: id.clone(),
                creator: cfg.gateway_key.address().clone(),
                amount: cfg.amount,
                slots: slots.clone(),
                epoch_index,
                session_config: cfg.effective_session_config(slots.len()),
                max_nonce: cfg.max_nonces.get(id).copied().unwrap_or(cfg.max_nonce),
            })
            .collect::<Vec<_>>();
        let host_addresses: Vec<Address> = hosts.iter().map(|h| h.address.clone()).collect();
        let validators: Vec<(Address, usize)> =
            hosts.iter().map(|h| (h.address.clone(), h.index)).collect();
        let grants = warm::default_grants(cfg.warm_keys, &cfg.seed, &validators);
        let warm_registry = Arc::new(WarmRegistry::new(clock.clone(), grants));
        let mut ledger = Ledger::new(&escrows, &host_addresses, cfg.creator_balance);
        ledger.grants = Some(Arc::clone(&warm_registry));
        let template = Template {
            model: cfg.model.clone(),
            session_config: cfg.effective_session_config(slots.len()),
            slots,
            epoch_index,
            max_nonce: cfg.max_nonce,
        };
        let creator = cfg.gateway_key.address().clone();
        ledger.open_account(&creator, cfg.creator_balance);
        ledger.creation = Creation::new(template, &[creator], &cfg.escrow_ids);
        let chain = Chain::new(
            clock.clone(),
            cfg.epochs.clone(),
            cfg.model.clone(),
            participants,
            ledger,
        );
        let host_states = hosts
            .iter()
            .map(|h| {
                let latency = cfg.profile.for_host(h.index, cfg.hosts);
                let state = HostState::new(
                    h.index,
                    h.key.clone(),
                    h.url.clone(),
                    latency,
                    clock.clone(),
                    rt.clone(),
                    &cfg.seed,
                )
                .with_warm_key(h.warm_key.clone());
                Arc::new(state)
            })
            .collect();
        let core = Arc::new(NetCore {
            warm: warm_registry,
            chain_listener: std::sync::OnceLock::new(),
            cfg,
            chain,
            hosts: host_states,
        });
        for (i, tcp) in host_tcp.into_iter().enumerate() {
            let c = Arc::clone(&core);
            let handler: Handler =
                Arc::new(move |req, peer| Box::pin(host::route(Arc::clone(&c), i, req, peer)));
            let listener =
                Listener::start(tcp, handler).map_err(|e| SimError::Config(e.to_string()))?;
            if let Some(h) = core.hosts.get(i) {
                h.set_listener(listener);
            }
        }
        let c = Arc::clone(&core);
        let handler: Handler =
            Arc::new(move |req, peer| Box::pin(chain_route(Arc::clone(&c), req, peer)));
        let chain_listener = Arc::new(
            Listener::start(chain_tcp, handler).map_err(|e| SimError::Config(e.to_string()))?,
        );
        let _ = core.chain_listener.set(Arc::downgrade(&chain_listener));
        Ok(SimNetwork {
            core,
            chain_listener,
            chain_url,
            hosts,
        })
    }

    /// Base URL of the chain's public API and REST queries.
    pub fn chain_url(&self) -> &str {
        &self.chain_url
    }

    /// Base URL of the control API (`/sim/…`, served next to the chain API).
    pub fn control_url(&self) -> &str {
        &self.chain_url
    }

    pub fn hosts(&self) -> &[SimHostInfo] {
        &self.hosts
    }

    pub fn config(&self) -> &SimConfig {
        &self.core.cfg
    }

    pub fn gateway_key(&self) -> &SigningKey {
        &self.core.cfg.gateway_key
    }

    /// `{host url}{route_prefix}/sessions/{escrow_id}`.
    pub fn session_url(&self, index: usize, escrow_id: &str) -> Option<String> {
        let h = self.hosts.get(index)?;
        Some(format!(
            "{}{}/sessions/{escrow_id}",
            h.url, self.core.cfg.route_prefix
        ))
    }

    pub(crate) fn host(&self, index: usize) -> Result<&Arc<HostState>, SimError> {
        self.core
            .hosts
            .get(index)
            .ok_or(SimError::UnknownHost(index))
    }

    /// Replaces host `index`'s faults with one set.
    pub fn set_faults(&self, index: usize, faults: Faults) -> Result<(), SimError> {
        self.set_fault_script(index, vec![faults])
    }

    /// Replaces host `index`'s faults with a script (sets applied in order, see [`Faults`]).
    pub fn set_fault_script(&self, index: usize, script: Vec<Faults>) -> Result<(), SimError> {
        self.host(index)?.set_script(script);
        Ok(())
    }

    /// Applies one set to every host.
    pub fn set_all_faults(&self, faults: Faults) {
        for h in &self.core.hosts {
            h.set_script(vec![faults.clone()]);
        }
    }

    pub fn clear_faults(&self, index: usize) -> Result<(), SimError> {
        self.set_fault_script(index, Vec::new())
    }

    pub fn clear_all_faults(&self) {
        for h in &self.core.hosts {
            h.set_script(Vec::new());
        }
    }

    /// The active fault set of a host.
    pub fn faults(&self, index: usize) -> Option<Faults> {
        self.core.hosts.get(index).map(|h| h.faults())
    }

    pub fn set_latency(&self, index: usize, latency: LatencyProfile) -> Result<(), SimError> {
        self.host(index)?.set_latency(latency);
        Ok(())
    }

    /// What host `index` holds for `escrow_id` (`None` without a session).
    pub fn host_view(&self, index: usize, escrow_id: &str) -> Option<HostView> {
        self.core
            .hosts
            .get(index)?
            .with_session(escrow_id, |s| s.view())
    }

    pub fn counters(&self, index: usize) -> Option<Counters> {
        self.core.hosts.get(index).map(|h| h.counters.snapshot())
    }

    /// Stops every server and drops every connection.
    pub fn shutdown(&self) {
        self.chain_listener.shutdown();
        for h in &self.core.hosts {
            if let Some(l) = h.listener() {
                l.shutdown();
            }
        }
    }
}

impl Drop for SimNetwork {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The chain server: `/sim/…` is the control API, everything else the chain (logged).
async fn chain_route(core: Arc<NetCore>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
    let path = req.uri().path().to_owned();
    if path == "/sim" || path.starts_with("/sim/") {
        return control::handle(&core, req).await;
    }
    let client = super::traffic::client_id(&req, peer);
    if cosmos_api::handles(&path) {
        return cosmos_api::route(core, req, client).await;
    }
    let method = req.method();
    if method == http::Method::GET && path.starts_with(warm::GRANTEES_PREFIX) {
        return super::warm_api::serve_grantees(&core, &path, &client).await;
    }
    core.chain
        .serve("chain", &path, &client, || core.chain.handle(method, &path))
}
