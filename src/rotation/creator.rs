//! Creating an escrow on chain (docs/lifecycle.md §3–§4): sign `MsgCreateDevshardEscrow`, make
//! the intent (and the day's deposit) durable, broadcast, and reconcile every open intent until
//! its escrow is registered or its tx can no longer commit.
//!
//! Reconciling an intent asks the chain for its tx hash ([`super::intent::next`] decides):
//! committed → the id of its `devshard_escrow_created` event is registered, then the intent is
//! cleared; failed → cleared; unknown → the same signed bytes are sent again until the tx's
//! timeout has passed, then cleared; chain unreachable → kept. Intents are reconciled at start
//! and on every rotation tick, one at a time (a mutex serialises creation and reconciling, so an
//! admin call waiting for its escrow and the tick never register the same escrow twice).

use std::sync::Arc;

use devshard_actors::{
    clock::SharedClock,
    directory::Directory,
    protocol::{
        cosmos::{create_tx, MsgCreateDevshardEscrow, TxSettings},
        crypto::{Address, SigningKey},
        tx_timeout::TxTimeout,
    },
    settlement::{
        chain::ChainTxClient,
        machine::{BroadcastOutcome, CONFIRM_POLL_MS},
    },
    stats::TrackedAddr,
    store::SharedStore,
};
use slog::{error, info, warn, Logger};

use super::{
    deposits::Deposits,
    intent::{next, Cleared, CreateIntent, IntentNext, Lookup, Origin, NS_CREATE_INTENTS},
    metrics::RotationMetrics,
    CreateError,
};
use crate::{
    chain::ChainClient,
    escrows,
    state::ChainPolling,
    store::duty::{Duty, Leadership},
};

/// What registration needs (the same call as `POST /v1/admin/escrows {"escrow_id"}`).
#[derive(Clone)]
pub struct Registrar {
    pub chain: ChainClient,
    pub directory: TrackedAddr<Directory>,
    pub store: SharedStore,
    pub signer: Address,
    pub polling: ChainPolling,
}

/// How reconciling one intent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    Registered(String),
    Cleared { why: Cleared, log: String },
    Pending(Box<CreateIntent>),
}

/// The creation side of the rotation (cheap to clone).
#[derive(Clone)]
pub struct Creator {
    /// The rotation's one-replica lease: creations and their intents are fenced by it.
    pub(super) duty: Duty,
    pub(super) store: SharedStore,
    pub(super) chain: ChainTxClient,
    pub(super) key: SigningKey,
    pub(super) tx: TxSettings,
    pub(super) clock: SharedClock,
    pub(super) log: Logger,
    pub(super) metrics: Option<RotationMetrics>,
    pub(super) registrar: Registrar,
    pub(super) deposits: Deposits,
    pub(super) lock: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Creator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creator").finish_non_exhaustive()
    }
}

impl Creator {
    fn count(&self, result: &str) {
        if let Some(m) = &self.metrics {
            m.creations.with_label_values(&[result]).inc();
        }
    }

    /// Every open intent, oldest first.
    pub fn intents(&self) -> Vec<CreateIntent> {
        let mut all: Vec<CreateIntent> = self
            .store
            .list(NS_CREATE_INTENTS)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_value(v).ok())
            .collect();
        all.sort_by_key(|i| i.created_at_ms);
        all
    }

    async fn save(&self, intent: &CreateIntent) -> Result<(), CreateError> {
        let value = serde_json::to_value(intent).map_err(|e| CreateError::Store(e.to_string()))?;
        self.store
            .put_fenced(self.duty.name(), NS_CREATE_INTENTS, &intent.tx_hash, value)
            .await
            .map_err(|e| CreateError::Store(e.to_string()))
    }

    async fn clear(&self, intent: &CreateIntent, why: Option<Cleared>) {
        if let Err(e) = self.store.delete(NS_CREATE_INTENTS, &intent.tx_hash).await {
            error!(self.log, "creation intent not cleared"; "stage" => "escrow_create_intent",
                "tx_hash" => &intent.tx_hash, "error" => %e);
        }
        if why.is_some() {
            self.deposits.refund(intent).await;
        }
    }

    /// Signs the creation, persists the intent (and the day's deposit), then broadcasts once.
    /// A tx refused on that first broadcast is cleared at once ([`CreateError::Refused`]); any
    /// other answer leaves the intent open for [`Creator::reconcile`].
    pub async fn create(
        &self,
        model: &str,
        amount: u64,
        origin: Origin,
    ) -> Result<CreateIntent, CreateError> {
        let _one = self.lock.lock().await;
        match self.duty.lead() {
            Leadership::Leading => {}
            Leadership::Elsewhere { owner } => return Err(CreateError::NotLeader { owner }),
            Leadership::Unknown { error } => return Err(CreateError::Store(error)),
        }
        let signed = self.sign(model, amount).await.inspect_err(|e| {
            self.count("error");
            warn!(self.log, "escrow creation not signed"; "stage" => "escrow_create_intent",
                "model" => model, "error" => %e);
        })?;
        let intent = CreateIntent {
            tx_hash: signed.hash.clone(),
            model: model.to_owned(),
            amount,
            created_at_ms: self.clock.now_ms(),
            origin,
            tx: signed,
            attempts: 0,
            last_error: None,
            escrow_id: None,
        };
        // Durable before the tx leaves: the deposit first (a crash in between over-counts
        // the day, never under-counts it), then the intent.
        self.deposits.add(&intent).await?;
        self.save(&intent).await?;
        info!(self.log, "escrow creation intent persisted"; "stage" => "escrow_create_intent",
            "tx_hash" => &intent.tx_hash, "model" => model, "amount" => amount,
            "origin" => ?origin);
        match self.chain.broadcast(&intent.tx.bytes).await {
            BroadcastOutcome::Refused { code, log } => {
                self.clear(&intent, Some(Cleared::Refused)).await;
                self.count(Cleared::Refused.label());
                warn!(self.log, "escrow creation refused by the chain";
                    "stage" => "escrow_create_intent", "tx_hash" => &intent.tx_hash,
                    "code" => code, "error" => &log);
                Err(CreateError::Refused { code, log })
            }
            other => {
                info!(self.log, "escrow creation broadcast"; "stage" => "escrow_create_intent",
                    "tx_hash" => &intent.tx_hash, "result" => ?other);
                Ok(intent)
            }
        }
    }

    async fn sign(
        &self,
        model: &str,
        amount: u64,
    ) -> Result<devshard_actors::protocol::cosmos::SignedTx, CreateError> {
        let unavailable = |e: devshard_actors::settlement::chain::ChainTxError| {
            CreateError::ChainUnavailable(e.to_string())
        };
        let chain_id = self.chain.chain_id().await.map_err(unavailable)?;
        let account = self
            .chain
            .account_number(self.key.address())
            .await
            .map_err(unavailable)?;
        let msg = MsgCreateDevshardEscrow {
            creator: self.key.address().to_string(),
            amount,
            model_id: model.to_owned(),
        };
        let timeout = TxTimeout::unique(self.clock.now_ms(), self.tx.timeout_s);
        Ok(create_tx(
            &self.key, &msg, &self.tx, &chain_id, account, timeout,
        ))
    }

    /// Reconciles every open intent once; answers how each ended.
    pub async fn reconcile_all(&self) -> Vec<Reconciled> {
        let mut out = Vec::new();
        for intent in self.intents() {
            out.push(self.reconcile(&intent.tx_hash).await);
        }
        out
    }

    /// Reconciles the intent of `tx_hash` (see the module docs).
    pub async fn reconcile(&self, tx_hash: &str) -> Reconciled {
        let _one = self.lock.lock().await;
        let stored = self
            .store
            .get(NS_CREATE_INTENTS, tx_hash)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<CreateIntent>(v).ok());
        let Some(mut intent) = stored else {
            // Cleared by an earlier pass: registered, or cleared for a reason now gone.
            return match self.created_id(tx_hash) {
                Some(id) => Reconciled::Registered(id),
                None => Reconciled::Cleared {
                    why: Cleared::Failed,
                    log: "cleared by an earlier reconcile without an escrow".into(),
                },
            };
        };
        let lookup = match self.chain.committed_tx(tx_hash).await {
            Ok(Some(c)) => Lookup::Committed(c),
            Ok(None) => Lookup::NotFound,
            Err(e) => Lookup::Unreachable(e.to_string()),
        };
        let decision = next(&lookup, &intent.tx, self.clock.now_unix());
        intent.attempts += 1;
        match decision {
            IntentNext::Register(id) => self.register(intent, id).await,
            IntentNext::Clear(why) => {
                let log = match &lookup {
                    Lookup::Committed(c) => format!("code {}: {}", c.code, c.log),
                    _ => "not committed before its timeout".to_owned(),
                };
                self.clear(&intent, Some(why)).await;
                self.count(why.label());
                warn!(self.log, "escrow creation cleared without an escrow";
                    "stage" => "escrow_create_intent", "tx_hash" => tx_hash,
                    "model" => &intent.model, "reason" => why.label(), "error" => &log);
                Reconciled::Cleared { why, log }
            }
            IntentNext::NoEscrowId => {
                intent.last_error = Some(
                    "committed, but no devshard_escrow_created event names an escrow_id".into(),
                );
                error!(self.log, "escrow creation committed without an escrow id";
                    "stage" => "escrow_create_intent", "tx_hash" => tx_hash);
                let _ = self.save(&intent).await;
                Reconciled::Pending(Box::new(intent))
            }
            IntentNext::Resend => {
                let outcome = self.chain.broadcast(&intent.tx.bytes).await;
                intent.last_error = Some(format!("not committed yet; re-sent: {outcome:?}"));
                let _ = self.save(&intent).await;
                Reconciled::Pending(Box::new(intent))
            }
            IntentNext::Keep => {
                if let Lookup::Unreachable(e) = lookup {
                    intent.last_error = Some(e);
                }
                let _ = self.save(&intent).await;
                Reconciled::Pending(Box::new(intent))
            }
        }
    }

    /// The escrow a cleared intent registered (kept in the creations record).
    fn created_id(&self, tx_hash: &str) -> Option<String> {
        let v = self.store.get(super::NS_CREATED, tx_hash).ok()??;
        v["escrow_id"].as_str().map(str::to_owned)
    }

    async fn register(&self, mut intent: CreateIntent, id: String) -> Reconciled {
        intent.escrow_id = Some(id.clone());
        let r = &self.registrar;
        let registered = escrows::register(
            &r.chain,
            &r.directory,
            &r.store,
            &r.signer,
            &r.polling,
            &id,
            Some(&intent.model),
            None,
            None,
        )
        .await;
        match registered {
            Ok(_) => {
                let record = serde_json::json!({"escrow_id": id, "model": intent.model,
                    "amount": intent.amount, "origin": intent.origin,
                    "created_at_ms": intent.created_at_ms,
                    "registered_at_ms": self.clock.now_ms()});
                // The creations record first: a crash in between re-registers (a no-op).
                let _ = self
                    .store
                    .put(super::NS_CREATED, &intent.tx_hash, record)
                    .await;
                self.clear(&intent, None).await;
                self.count("created");
                info!(self.log, "escrow created on chain and registered";
                    "stage" => "escrow_created", "escrow" => &id, "tx_hash" => &intent.tx_hash,
                    "model" => &intent.model, "amount" => intent.amount,
                    "origin" => ?intent.origin);
                Reconciled::Registered(id)
            }
            Err(e) => {
                warn!(self.log, "created escrow not registered yet; retried";
                    "stage" => "escrow_create_intent", "escrow" => &id,
                    "tx_hash" => &intent.tx_hash, "error" => %e);
                intent.last_error = Some(format!("registration: {e}"));
                let _ = self.save(&intent).await;
                Reconciled::Pending(Box::new(intent))
            }
        }
    }

    /// Reconciles `tx_hash` every confirmation poll interval until it ends or `deadline_ms`
    /// (by the gateway clock) passes.
    pub async fn wait(&self, tx_hash: &str, deadline_ms: i64) -> Reconciled {
        loop {
            let r = self.reconcile(tx_hash).await;
            if !matches!(r, Reconciled::Pending(_)) || self.clock.now_ms() >= deadline_ms {
                return r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(CONFIRM_POLL_MS as u64)).await;
        }
    }
}
