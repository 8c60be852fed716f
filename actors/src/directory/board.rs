//! The escrow board: what the HTTP edge needs to serve a chat request without a message to the
//! [`Directory`]: the models served and, for every registered escrow, what the pick
//! (`pick.rs`) reads. The directory publishes a new board over a `tokio::sync::watch` channel
//! whenever an escrow is added, removed, (re)spawned, dies, fails or closes; the edge reads the
//! latest one with a read lock and an `Arc` clone ([`EscrowBoard::load`]).
//!
//! What changes per request is not copied into the board but shared with it: the escrow's
//! [`BudgetCell`] (balance, nonce, reservations of requests on their way, routable hosts; the
//! escrow actor publishes into it, the pick reserves in it under its lock) and the count of races
//! in flight (an atomic the directory's `RaceStarted` / `RaceEnded` move). Liveness is the
//! escrow actor's address itself, asked at pick time.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use tokio::sync::watch;

use super::{Directory, EscrowSlot};
use crate::{
    escrow::{BudgetCell, EscrowActor, EscrowInfo},
    stats::TrackedAddr,
};

/// One registered escrow as the pick sees it.
#[derive(Debug)]
pub struct BoardEscrow {
    pub id: String,
    pub info: Arc<EscrowInfo>,
    /// The running actor (`None` while it respawns).
    pub addr: Option<TrackedAddr<EscrowActor>>,
    /// Settling (draining or later).
    pub closed: bool,
    /// Past its restart budget.
    pub failed: bool,
    pub budget: BudgetCell,
    /// Races in flight on this escrow (shared with the directory).
    pub in_flight: Arc<AtomicUsize>,
    /// Sum of its hosts' chain weights (each at least 1).
    pub weight: u64,
}

impl BoardEscrow {
    /// Races in flight relative to the hosts' weight: lower has more spare capacity.
    pub fn load(&self) -> f64 {
        self.in_flight.load(Ordering::Relaxed) as f64 / self.weight.max(1) as f64
    }
}

/// One published state of the directory's escrows.
#[derive(Debug, Default)]
pub struct Board {
    pub escrows: Vec<BoardEscrow>,
    /// Models of escrows that have not failed, sorted, each once.
    pub models: Vec<String>,
}

impl Board {
    fn of(escrows: &std::collections::BTreeMap<String, EscrowSlot>) -> Board {
        let mut models: Vec<String> = escrows
            .values()
            .filter(|e| !e.slot.failed)
            .map(|e| e.info.model.clone())
            .collect();
        models.sort();
        models.dedup();
        let escrows = escrows
            .iter()
            .map(|(id, e)| BoardEscrow {
                id: id.clone(),
                info: e.info.clone(),
                // Handed over: not picked while its requests in flight finish.
                addr: e.slot.addr.clone().filter(|_| !e.handing_over),
                closed: e.closed,
                failed: e.slot.failed,
                budget: e.budget.clone(),
                in_flight: e.in_flight.clone(),
                weight: e.info.hosts.iter().map(|h| h.weight.max(1)).sum(),
            })
            .collect();
        Board { escrows, models }
    }
}

/// The edge's handle on the latest board (cheap to clone; one per process).
#[derive(Debug, Clone)]
pub struct EscrowBoard {
    board: watch::Receiver<Arc<Board>>,
    /// Rotates ties between equally loaded escrows.
    pub(crate) rotation: Arc<AtomicUsize>,
}

impl EscrowBoard {
    /// The latest published board.
    pub fn load(&self) -> Arc<Board> {
        self.board.borrow().clone()
    }
}

/// The directory's side: publishes a board after every change of its escrows.
#[derive(Debug)]
pub(crate) struct BoardPublisher {
    tx: watch::Sender<Arc<Board>>,
    board: EscrowBoard,
}

impl BoardPublisher {
    pub(crate) fn new() -> BoardPublisher {
        let (tx, rx) = watch::channel(Arc::new(Board::default()));
        BoardPublisher {
            tx,
            board: EscrowBoard {
                board: rx,
                rotation: Arc::new(AtomicUsize::new(0)),
            },
        }
    }
}

impl Directory {
    /// The handle the HTTP edge picks from (take it before the directory starts).
    pub fn board(&self) -> EscrowBoard {
        self.board.board.clone()
    }

    /// Publishes the escrows as they are now (after any change of a slot).
    pub(crate) fn publish_board(&self) {
        self.board
            .tx
            .send_replace(Arc::new(Board::of(&self.escrows)));
    }
}
