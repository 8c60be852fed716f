//! Messages of the `EscrowActor`, one struct each.

use std::{collections::BTreeSet, sync::Arc};

use actix::Message;
use bytes::Bytes;
use serde::Serialize;

use super::attempt::{AttemptReport, AttemptVerdict};
use super::error::EscrowError;
pub use super::prelude::Prelude;
use super::session::SessionError;
use crate::{
    host::RequestSigner,
    policy::health::Preference,
    protocol::{crypto::Address, wire::ReceiptBody},
};

/// One client request as the escrow sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InferenceParams {
    /// `X-Request-Id` (logs and accounting).
    pub request_id: String,
    pub model: String,
    /// The normalised OpenAI request body: becomes the payload's `prompt`.
    pub body: Bytes,
    /// `sha256(canonical_json(body))`.
    pub prompt_hash: [u8; 32],
    pub max_tokens: u64,
    pub stream: bool,
    /// Relaxed PoC: the only participants whose hosts may serve it (`None`: any host).
    pub only_hosts: Option<Arc<BTreeSet<Address>>>,
}

impl InferenceParams {
    /// May `host` serve this request (relaxed PoC routing)?
    pub fn allows(&self, host: &Address) -> bool {
        self.only_hosts
            .as_ref()
            .is_none_or(|only| only.contains(host))
    }
}

/// A race asks for the next nonce it may send. Answered once the nonce's diff is durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<NonceGrant, EscrowError>")]
pub struct RequestNonce {
    pub race_id: u64,
    pub params: Arc<InferenceParams>,
    /// Participants this race already tried (a new attempt must go elsewhere).
    pub exclude: Vec<Address>,
    /// Why this attempt is asked for (primary, failure-driven retry, hedge, probation pair).
    pub kind: AttemptKind,
}

/// Why a race asks for another nonce.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptKind {
    /// The first attempt of a request.
    Primary,
    /// The previous attempt failed before content.
    Retry,
    /// The primary is slow: a budgeted hedge (docs/health.md §4).
    Hedge(HedgeRequest),
    /// The primary runs on a Suspect/Probation host: pair it with a Healthy host's attempt.
    Pair,
}

/// How far the primary got, for the hedge decision.
#[derive(Debug, Clone, PartialEq)]
pub struct HedgeRequest {
    pub primary: Address,
    pub sent_ms: i64,
    pub got_receipt: bool,
    pub got_first_content: bool,
    pub attempts: u32,
    /// The primary's grant carried catch-up chunks (its host was behind).
    pub catching_up: bool,
}

/// Everything a race needs to send one attempt.
#[derive(Debug, Clone)]
pub struct NonceGrant {
    pub nonce: u64,
    pub host: Address,
    /// Full `…/chat/completions` URL of the host.
    pub url: String,
    /// Catch-up chunks (`InferenceRequest`s without payload) to POST first, in order, when the
    /// host is far behind (the part below the diff window read from the store as it is sent).
    pub prelude: Prelude,
    /// Encoded `InferenceRequest`: the last catch-up diffs ending with this nonce's diff, plus
    /// payload.
    pub request: Bytes,
    /// Signs each of these bodies as it leaves (never at grant time: `host/signer.rs`).
    pub signer: RequestSigner,
    /// Routing preference of the host (the race's liveness rule reads it).
    pub preference: Preference,
    /// When a hedge becomes due for this attempt, if it is the primary (unix ms).
    pub hedge_due_ms: Option<i64>,
    /// A Healthy host exists in this escrow (probation attempts get paired with one).
    pub healthy_available: bool,
    /// What the host's receipt and state signature are checked against, so the attempt can
    /// recover their signers on its own thread (see `race/prewarm.rs`).
    pub verify: VerifyContext,
    /// The body's turn on its host's link (`escrow/links.rs`); `None` without pacing.
    pub link: Option<Arc<crate::escrow::links::LinkTicket>>,
    /// The escrow's `execution_timeout`: from its receipt, the attempt reads no longer than this
    /// (after it the nonce is the escrow's to time out by vote; `race/attempt.rs`). `None` when
    /// the escrow's config has none (0): only the attempt timeout bounds it.
    pub execution_timeout: Option<std::time::Duration>,
}

/// The escrow facts an attempt needs to pre-recover its host's signatures.
#[derive(Debug, Clone)]
pub struct VerifyContext {
    pub escrow_id: Arc<str>,
    /// This nonce's `MsgStartInference` (the receipt signs over it).
    pub start: Option<crate::protocol::proto::MsgStartInference>,
}

/// The host of an attempt answered a nonce gap holding only up to `holds`: the bodies that send
/// the same nonce again from there (optimistic catch-up's recovery, `session/sync_points.rs`).
#[derive(Debug, Message)]
#[rtype(result = "Result<Resend, EscrowError>")]
pub struct ResendGrant {
    pub nonce: u64,
    pub host: Address,
    pub holds: u64,
}

/// The bodies of a [`ResendGrant`]: catch-up chunks first (when the host is more than one
/// chunk behind), then the inference request with the nonce's payload (signed as each leaves).
#[derive(Debug, Clone)]
pub struct Resend {
    pub prelude: Prelude,
    pub request: Bytes,
}

/// A receipt event arrived on an attempt (processed at once: sync nonce, signatures, confirm).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), SessionError>")]
pub struct AttemptReceipt {
    /// The attempt's nonce.
    pub nonce: u64,
    /// True for the answer to a catch-up chunk (no inference of ours in it).
    pub catch_up: bool,
    pub host: Address,
    pub receipt: ReceiptBody,
}

/// An attempt is over (from the race's point of view). The escrow settles it and tells the race
/// whether another attempt makes sense.
#[derive(Debug, Message)]
#[rtype(result = "AttemptVerdict")]
pub struct AttemptEnded {
    pub nonce: u64,
    pub host: Address,
    pub report: AttemptReport,
}

/// A race that asked for a nonce is gone (client left before the grant was used).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RaceGone {
    pub race_id: u64,
}

/// Summary of the escrow for the debug endpoint and the directory's escrow choice.
#[derive(Debug, Message)]
#[rtype(result = "EscrowSnapshot")]
pub struct GetSnapshot;

/// Debug view of an escrow actor.
#[derive(Debug, Clone, Serialize)]
pub struct EscrowSnapshot {
    pub escrow_id: String,
    pub model: String,
    pub nonce: u64,
    pub phase: String,
    pub state_root: String,
    pub balance: u64,
    pub durable_nonce: u64,
    pub host_sync: Vec<(String, u64)>,
    pub pending_txs: usize,
    pub waiting_races: usize,
    pub attempts_in_flight: usize,
    pub pending_finishes: Vec<u64>,
    pub pending_timeouts: Vec<u64>,
    /// Inferences started and not settled yet (each may still take a nonce before the finalize
    /// round: `escrow/nonce_room.rs`).
    pub unsettled: usize,
    pub signatures: Vec<(String, u64)>,
    /// Participants withheld because their state diverged (under repair or given up).
    pub repairs: Vec<String>,
    pub repairs_given_up: Vec<String>,
    pub panic_mode: bool,
    /// Participants this escrow sends no inference and no catch-up to now (ejected outside panic
    /// mode, under repair, repair given up): they may lag until they are routable again.
    pub withheld: Vec<String>,
    /// Warm key bound to each slot (docs/lifecycle.md §5).
    pub warm_keys: std::collections::BTreeMap<u32, crate::protocol::crypto::Address>,
    /// Each host link's pacing (`escrow/links.rs`): its reorder horizon, bodies waiting.
    pub links: Vec<crate::escrow::links::LinkView>,
    /// The reachability gate (`escrow/reach/mod.rs`): closed while hosts refuse connections.
    pub reach: crate::escrow::reach::ReachView,
}

/// Test and operator hook: make the actor panic (only when fault injection is enabled).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct InjectPanic;

/// Test and operator hook: the actor stops taking messages from its mailbox for `ms` (it awaits
/// a timer under `ctx.wait`), as if stuck; only when fault injection is enabled.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct InjectStall {
    pub ms: u64,
}

/// Stops the actor for good (escrow removed); it is not respawned.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

/// Catch every host up to the escrow's nonce (after sequencing pending txs); answers each host's
/// sync nonce afterwards.
#[derive(Debug, Message)]
#[rtype(result = "Vec<(Address, u64)>")]
pub struct SyncHosts;

/// Admin: run a repair tick of `participant` now; `false` when it is not under repair.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct TriggerRepair {
    pub participant: Address,
}

/// The state of every repair of this escrow (debug).
#[derive(Debug, Message)]
#[rtype(result = "Vec<crate::repair::messages::RepairState>")]
pub struct GetRepairStates;

/// Admin `forget` of a participant: lift its divergence block in this escrow.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ForgetDivergence {
    pub participant: Address,
}

/// A granted nonce the race will not send (its client left, or the hedge came too late).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct GrantUnused {
    pub nonce: u64,
}

/// Settlement: stop taking new requests (idempotent); answers what is still running.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "DrainProgress")]
pub struct BeginDrain;

/// What keeps a draining escrow from finalizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DrainProgress {
    /// Races waiting for a nonce.
    pub waiting: usize,
    /// Nonces handed out and not settled yet (finish or timeout vote).
    pub unsettled: usize,
}

/// Settlement: one diff round without inference (the first carries `MsgFinalizeRound`), made
/// durable and sent to every host by catch-up.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<crate::settlement::port::RoundDone, String>")]
pub struct FinalizeRound;

/// Settlement: the session state and the verified signatures of its latest nonce.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "crate::settlement::port::FinalState")]
pub struct GetFinalState;

/// Settlement: send every host the durable diffs it lacks (no new diff is composed).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct CatchUpAll;

/// Settlement: ask the chain whether `validator` grants `warm` (fills the grant cache).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct CheckWarmSigner {
    pub validator: Address,
    pub warm: Address,
}

/// Settlement: `participant` sent a final-state signature that does not verify; it is charged
/// like any invalid state signature.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ChargeInvalidSignature {
    pub participant: Address,
}
