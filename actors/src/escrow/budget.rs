//! The escrow's spending budget as the directory sees it when it picks an escrow for a new
//! request (docs/lifecycle.md §4, admission by balance): the escrow actor publishes its balance,
//! nonce and whether it can serve; the directory adds a reservation for each request it sends
//! there. A reservation ends when the escrow sequences that request's `MsgStartInference` (its
//! reserve is then part of the balance) or when the request's [`Reservation`] is dropped, so the
//! same request is never counted twice.
//!
//! The cell is owned by the directory (one per registered escrow) and survives a respawn of the
//! escrow actor: the new actor publishes over the same cell, and reservations of requests in
//! flight stay.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard},
};

use super::info::EscrowInfo;

/// What the escrow actor last published, plus the reservations of requests on their way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetView {
    /// The state machine's balance (started inferences' reserves already taken).
    pub balance: u64,
    /// Last sequenced nonce.
    pub nonce: u64,
    /// Phase Active and not closing.
    pub active: bool,
    /// At least one host can be routed to.
    pub routable: bool,
    /// Inferences started and not settled yet: each may still need a nonce of its own for its
    /// finish or timeout, so the pick keeps that many below the serving limit
    /// (`escrow/nonce_room.rs`).
    pub settling: u64,
    /// Reserved cost of each request picked for this escrow and not started yet (by request id).
    pub reservations: BTreeMap<String, u64>,
}

impl BudgetView {
    /// The balance minus every reservation of a request not started yet.
    pub fn spendable(&self) -> u64 {
        let reserved: u64 = self
            .reservations
            .values()
            .fold(0u64, |a, r| a.saturating_add(*r));
        self.balance.saturating_sub(reserved)
    }
}

/// The shared cell (cheap to clone).
#[derive(Debug, Clone)]
pub struct BudgetCell(Arc<Mutex<BudgetView>>);

impl BudgetCell {
    /// A cell for a fresh escrow (full deposit less the creation fee, nonce 0) until its actor
    /// publishes.
    pub fn new(info: &EscrowInfo) -> BudgetCell {
        let balance = info.amount.saturating_sub(info.config.create_devshard_fee);
        BudgetCell(Arc::new(Mutex::new(BudgetView {
            balance,
            nonce: 0,
            active: true,
            routable: true,
            settling: 0,
            reservations: BTreeMap::new(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, BudgetView> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the current view.
    pub fn view(&self) -> BudgetView {
        self.lock().clone()
    }

    /// The escrow actor's state: balance, nonce, inferences not settled yet, whether it serves;
    /// `started` is the request whose `MsgStartInference` this state already carries (its
    /// reservation ends).
    pub fn publish(
        &self,
        balance: u64,
        nonce: u64,
        settling: u64,
        active: bool,
        routable: bool,
        started: Option<&str>,
    ) {
        let mut v = self.lock();
        v.balance = balance;
        v.nonce = nonce;
        v.settling = settling;
        v.active = active;
        v.routable = routable;
        if let Some(id) = started {
            v.reservations.remove(id);
        }
    }

    /// `check` applied to the current view, under the cell's lock (no copy).
    pub fn check<T>(&self, check: impl FnOnce(&BudgetView) -> T) -> T {
        check(&self.lock())
    }

    /// Reserves `cost` for `request_id` (the pick) if `admit` still accepts the view, in one
    /// critical section: two picks running at once on different threads cannot both take the
    /// last nonce or the last of the balance. Ends when the returned [`Reservation`] is
    /// dropped, or earlier when the request starts.
    pub fn try_reserve<E>(
        &self,
        request_id: &str,
        cost: u64,
        admit: impl FnOnce(&BudgetView) -> Result<(), E>,
    ) -> Result<Reservation, E> {
        let mut v = self.lock();
        admit(&v)?;
        v.reservations.insert(request_id.to_owned(), cost);
        drop(v);
        Ok(Reservation {
            cell: self.clone(),
            request_id: request_id.to_owned(),
        })
    }
}

/// A request's hold on an escrow's balance until its inference starts (see the module docs).
#[derive(Debug)]
pub struct Reservation {
    cell: BudgetCell,
    request_id: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.cell.lock().reservations.remove(&self.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(balance: u64) -> BudgetCell {
        let c = BudgetCell(Arc::new(Mutex::new(BudgetView {
            balance,
            nonce: 0,
            active: true,
            routable: true,
            settling: 0,
            reservations: BTreeMap::new(),
        })));
        c.publish(balance, 0, 0, true, true, None);
        c
    }

    #[test]
    fn a_reservation_ends_at_start_or_drop_never_twice() {
        let c = cell(100);
        let always = |_: &BudgetView| Ok::<(), ()>(());
        let a = c.try_reserve("a", 30, always).unwrap();
        let b = c.try_reserve("b", 30, always).unwrap();
        assert_eq!(c.view().spendable(), 40);
        // "a" starts: its reserve moves from the reservation into the balance.
        c.publish(70, 1, 0, true, true, Some("a"));
        assert_eq!(c.view().spendable(), 40);
        drop(a);
        assert_eq!(
            c.view().spendable(),
            40,
            "a drop after start changes nothing"
        );
        drop(b);
        assert_eq!(c.view().spendable(), 70);
    }
}
