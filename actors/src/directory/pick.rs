//! Escrow choice: the escrow with the most spare capacity for the model (races in flight relative
//! to its participants' chain weight); ties rotate. An escrow that is settling (`CloseEscrow`)
//! is never picked.

use actix::prelude::*;

use super::{CloseEscrow, Directory, DirectoryError, PickEscrow, PickedEscrow};

impl Handler<PickEscrow> for Directory {
    type Result = Result<PickedEscrow, DirectoryError>;

    fn handle(&mut self, msg: PickEscrow, _: &mut Self::Context) -> Self::Result {
        let mut candidates: Vec<(String, f64)> = Vec::new();
        let mut any_for_model = false;
        for (id, e) in &self.escrows {
            if e.info.model != msg.model {
                continue;
            }
            any_for_model = true;
            if e.closed || e.slot.failed || !e.slot.addr.as_ref().is_some_and(|a| a.connected()) {
                continue;
            }
            let weight: u64 = e.info.hosts.iter().map(|h| h.weight.max(1)).sum();
            let load = e.in_flight as f64 / weight.max(1) as f64;
            candidates.push((id.clone(), load));
        }
        if !any_for_model {
            return Err(DirectoryError::UnknownModel(msg.model));
        }
        let best = candidates
            .iter()
            .map(|(_, l)| *l)
            .fold(f64::INFINITY, f64::min);
        let tied: Vec<&String> = candidates
            .iter()
            .filter(|(_, l)| (*l - best).abs() < 1e-12)
            .map(|(id, _)| id)
            .collect();
        if tied.is_empty() {
            return Err(DirectoryError::NoCapacity(msg.model));
        }
        self.rotation = self.rotation.wrapping_add(1);
        let id = tied[self.rotation % tied.len()].clone();
        let addr = self
            .escrows
            .get(&id)
            .and_then(|e| e.slot.addr.clone())
            .ok_or_else(|| DirectoryError::NoCapacity(msg.model.clone()))?;
        Ok(PickedEscrow {
            escrow_id: id,
            addr,
        })
    }
}

impl Handler<CloseEscrow> for Directory {
    type Result = ();

    fn handle(&mut self, msg: CloseEscrow, _: &mut Self::Context) {
        if let Some(e) = self.escrows.get_mut(&msg.escrow_id) {
            e.closed = true;
        }
    }
}
