//! Request accounting: a bounded in-memory table of chat requests (fingerprint, escrow, the
//! nonces and attempts of its race, outcome, and the completed answer for replay), and the
//! `Idempotency-Key` index. The race reports its nonces and attempts when it ends (after the
//! client's answer, for a stream: the winner still drains its finish marker), through a
//! `RaceReport` the HTTP edge writes here ([`Accounting::set_race_report`]).
//!
//! Every admitted chat request gets a SHA3-256 [`fingerprint`] of (model, canonical body,
//! caller). A request carrying an `Idempotency-Key` already seen within the window:
//! - with a different fingerprint → 422 `idempotency_key_reused`;
//! - with the same one → joins the first request (waits while it runs) and gets its answer
//!   (stored JSON body or SSE bytes, ≤ `max_replay_bytes`; beyond → 409
//!   `idempotent_replay_unavailable`), without a new race, so no new nonce.
//!
//! A request that failed releases its key: a later retry starts fresh. The table keeps at most
//! `max_requests` records and drops those older than the window (oldest first).

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use bytes::Bytes;
use devshard_actors::race::{AttemptRecord, RaceReport};
use serde::Serialize;
use sha3::{Digest, Sha3_256};
use tokio::sync::watch;

use crate::config::AccountingConfig;

/// SHA3-256 of model, canonical body (the raw bytes when not canonicalisable) and caller, hex.
pub fn fingerprint(model: &str, raw_body: &[u8], caller: &str) -> String {
    use devshard_actors::protocol::canonical::canonical_json;
    let mut h = Sha3_256::new();
    h.update(model.as_bytes());
    h.update([0u8]);
    match canonical_json(raw_body) {
        Ok(c) => h.update(c.as_bytes()),
        Err(_) => h.update(raw_body),
    }
    h.update([0u8]);
    h.update(caller.as_bytes());
    hex::encode(h.finalize())
}

/// State of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Outcome {
    InFlight,
    Completed {
        status: u16,
    },
    Failed {
        status: u16,
        code: String,
        message: String,
    },
}

/// A stored answer.
#[derive(Debug, Clone)]
pub struct Stored {
    pub content_type: &'static str,
    pub bytes: Bytes,
}

/// One request of the table (what `GET /v1/requests/{id}` shows, minus the stored bytes).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub request_id: String,
    pub fingerprint: String,
    pub model: String,
    pub caller: String,
    pub stream: bool,
    pub idempotency_key: Option<String>,
    pub escrow: Option<String>,
    /// Race id (log field `race` of `escrow_picked`), once an escrow was picked.
    pub race_id: Option<u64>,
    /// Every nonce the escrow granted this request's race (set when the race ends).
    pub nonces: Vec<u64>,
    /// Every attempt of the race: nonce, host, role, timing, result (set when the race ends).
    pub attempts: Vec<AttemptRecord>,
    /// When the race ended and reported its nonces and attempts.
    pub race_ended_at_ms: Option<i64>,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub outcome: Outcome,
    /// Retries answered from this record.
    pub replays: u64,
    /// The answer was larger than `max_replay_bytes` (not stored).
    pub replay_truncated: bool,
    #[serde(skip)]
    pub stored: Option<Stored>,
}

/// Called once per request when it has both its outcome and its race report (the ledger).
#[derive(Clone)]
pub struct EndedHook(pub Arc<dyn Fn(&Record) + Send + Sync>);

impl std::fmt::Debug for EndedHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndedHook")
    }
}

#[derive(Debug, Default)]
struct Table {
    order: VecDeque<String>,
    /// The record (boxed: ≈ 400 B each, so the map's spare buckets stay small) and, for a
    /// request with an idempotency key only (nothing else can join it), the channel a joining
    /// retry waits on.
    by_id: HashMap<String, (Box<Record>, Option<watch::Sender<bool>>)>,
    by_key: HashMap<String, String>,
    ended: Option<EndedHook>,
}

impl Table {
    fn ended(&self, request_id: &str) {
        let (Some(hook), Some((r, _))) = (&self.ended, self.by_id.get(request_id)) else {
            return;
        };
        if r.race_ended_at_ms.is_some() && r.outcome != Outcome::InFlight {
            (hook.0)(r);
        }
    }
}

/// What [`Accounting::begin`] decided.
#[derive(Debug)]
pub enum Begin {
    /// A new request: run it and report through [`Accounting`].
    Fresh,
    /// A retry of `request_id`: wait on `done`, then [`Accounting::get`] it.
    Join {
        request_id: String,
        done: watch::Receiver<bool>,
    },
    /// Same key, different fingerprint.
    KeyReused { request_id: String },
}

/// The table (cheap to clone).
#[derive(Debug, Clone)]
pub struct Accounting {
    cfg: AccountingConfig,
    table: Arc<Mutex<Table>>,
}

impl Accounting {
    pub fn new(cfg: AccountingConfig) -> Accounting {
        Accounting {
            cfg,
            table: Arc::new(Mutex::new(Table::default())),
        }
    }

    pub fn config(&self) -> AccountingConfig {
        self.cfg
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `record` (outcome in flight) unless its idempotency key is bound (see [`Begin`]).
    pub fn begin(&self, record: Record, now_ms: i64) -> Begin {
        let window = i64::try_from(self.cfg.idempotency_window.as_millis()).unwrap_or(i64::MAX);
        let mut t = self.lock();
        prune(&mut t, now_ms.saturating_sub(window), self.cfg.max_requests);
        if let Some(key) = &record.idempotency_key {
            let bound = t.by_key.get(key).and_then(|id| t.by_id.get(id));
            if let Some((first, tx)) = bound {
                if first.started_at_ms.saturating_add(window) >= now_ms {
                    let request_id = first.request_id.clone();
                    if first.fingerprint != record.fingerprint {
                        return Begin::KeyReused { request_id };
                    }
                    let done = match tx {
                        Some(tx) => tx.subscribe(),
                        // Not reached (a bound key's record has its channel): answer at once.
                        None => watch::channel(true).1,
                    };
                    if let Some((r, _)) = t.by_id.get_mut(&request_id) {
                        r.replays = r.replays.saturating_add(1);
                    }
                    return Begin::Join { request_id, done };
                }
            }
            t.by_key.insert(key.clone(), record.request_id.clone());
        }
        let id = record.request_id.clone();
        let tx = record
            .idempotency_key
            .is_some()
            .then(|| watch::channel(false).0);
        if t.by_id.insert(id.clone(), (Box::new(record), tx)).is_none() {
            t.order.push_back(id);
        }
        Begin::Fresh
    }

    /// Notes the escrow picked for `request_id` and its race id (`race` of the edge's
    /// `escrow_picked` log line; the race's lines, nonces included, carry the request id).
    pub fn set_escrow(&self, request_id: &str, escrow: &str, race_id: u64) {
        if let Some((r, _)) = self.lock().by_id.get_mut(request_id) {
            r.escrow = Some(escrow.to_string());
            r.race_id = Some(race_id);
        }
    }

    /// Records the nonces and attempts of `request_id`'s race (it ended at `now_ms`). The report
    /// of a race the request was placed away from (its escrow closed, `http/placement.rs`) is
    /// not the request's: only its current race (`set_escrow`) reports here.
    pub fn set_race_report(&self, request_id: &str, report: RaceReport, now_ms: i64) {
        let mut t = self.lock();
        if let Some((r, _)) = t.by_id.get_mut(request_id) {
            if r.race_ended_at_ms.is_some() || r.race_id.is_some_and(|id| id != report.race_id) {
                return;
            }
            r.nonces = report.nonces;
            r.attempts = report.attempts;
            r.race_ended_at_ms = Some(now_ms);
            t.ended(request_id);
        }
    }

    /// Sets the hook called when a request has both its outcome and its race report.
    pub fn on_ended(&self, hook: EndedHook) {
        self.lock().ended = Some(hook);
    }

    /// Ends `request_id`: `stored` is kept when the request has an idempotency key and it is
    /// within `max_replay_bytes` (`truncated`: it was larger). A failure releases the key.
    pub fn finish(&self, request_id: &str, outcome: Outcome, stored: Option<Stored>, now_ms: i64) {
        self.finish_inner(request_id, outcome, stored, false, now_ms);
    }

    /// Like [`Accounting::finish`] for an answer too large to keep.
    pub fn finish_truncated(&self, request_id: &str, outcome: Outcome, now_ms: i64) {
        self.finish_inner(request_id, outcome, None, true, now_ms);
    }

    fn finish_inner(
        &self,
        request_id: &str,
        outcome: Outcome,
        stored: Option<Stored>,
        truncated: bool,
        now_ms: i64,
    ) {
        let mut t = self.lock();
        let Some((r, tx)) = t.by_id.get_mut(request_id) else {
            return;
        };
        if r.outcome != Outcome::InFlight {
            return;
        }
        let failed = matches!(outcome, Outcome::Failed { .. });
        r.outcome = outcome;
        r.finished_at_ms = Some(now_ms);
        r.replay_truncated = truncated;
        // Only a retry with the same key replays: an answer without one is not kept.
        r.stored = stored
            .filter(|s| r.idempotency_key.is_some() && s.bytes.len() <= self.cfg.max_replay_bytes);
        if let Some(tx) = tx {
            tx.send_replace(true);
        }
        let key = r.idempotency_key.clone();
        t.ended(request_id);
        if let (true, Some(k)) = (failed, key) {
            if t.by_key.get(&k).is_some_and(|id| id == request_id) {
                t.by_key.remove(&k);
            }
        }
    }

    /// Forgets `request_id`, begun here but served by another replica after all (no escrow
    /// could take it here and no race ran: the owner records it). Its idempotency key is
    /// released; a retry joined to it finds no record.
    pub fn abandon(&self, request_id: &str) {
        let mut t = self.lock();
        let Some((r, tx)) = t.by_id.remove(request_id) else {
            return;
        };
        if let Some(tx) = tx {
            tx.send_replace(true);
        }
        if let Some(k) = r.idempotency_key.clone() {
            if t.by_key.get(&k).is_some_and(|id| id == request_id) {
                t.by_key.remove(&k);
            }
        }
    }

    /// A copy of the record of `request_id` (stored bytes included).
    pub fn get(&self, request_id: &str) -> Option<Record> {
        self.lock()
            .by_id
            .get(request_id)
            .map(|(r, _)| Record::clone(r))
    }

    /// Requests in the table.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops records started before `oldest_ms` (finished ones) and beyond `max` (oldest first).
fn prune(t: &mut Table, oldest_ms: i64, max: usize) {
    while let Some(id) = t.order.front().cloned() {
        let old = t
            .by_id
            .get(&id)
            .is_none_or(|(r, _)| r.started_at_ms < oldest_ms && r.outcome != Outcome::InFlight);
        if !(old || t.order.len() >= max) {
            break;
        }
        t.order.pop_front();
        if let Some((r, _)) = t.by_id.remove(&id) {
            if let Some(k) = r.idempotency_key {
                if t.by_key.get(&k).is_some_and(|v| *v == id) {
                    t.by_key.remove(&k);
                }
            }
        }
    }
}
