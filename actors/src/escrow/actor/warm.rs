//! Warm-key checks before a signature is judged (LIFECYCLE.md §5): the escrow asks the chain
//! (through the shared grant cache) about every warm signer the state does not already vouch
//! for, then judges the receipt, mempool or vote with the cache filled. A check that fails or is
//! slow leaves the signer unresolved: the receipt is answered `WarmKeyUnresolved` (a gateway
//! fault, never a strike; the race retries elsewhere), a finish marker is held (the nonce stays
//! pending until a later mempool shows it again), a vote is not counted this round.
//!
//! Log stages: `warm_key_accepted` (the chain granted a new key), `warm_key_rejected` (a key the
//! chain does not grant, or a slot already bound to another key); `warm_key_check_failed` comes
//! from the checker.

use futures::future::LocalBoxFuture;
use slog::{info, warn};

use super::EscrowActor;
use crate::{
    escrow::session::WarmSigner,
    protocol::{
        proto::TimeoutReason,
        state,
        warm::{Acceptance, CheckOutcome},
        wire::VerifyTimeoutResponse,
    },
};

impl EscrowActor {
    /// Asks the chain about every unresolved signer (logging rejections known already).
    pub(super) fn check_warm_signers(
        &self,
        signers: Vec<WarmSigner>,
    ) -> LocalBoxFuture<'static, ()> {
        let log = self.deps.log.clone();
        let checker = self.deps.warm.clone();
        let escrow = self.escrow_id().to_string();
        let mut unresolved = Vec::new();
        for s in signers {
            match &s.acceptance {
                Acceptance::Unresolved => unresolved.push(s),
                Acceptance::Rejected(why) => {
                    warn!(log, "warm key rejected"; "stage" => "warm_key_rejected", "escrow" => %escrow,
                        "validator" => s.validator.short(), "warm_key" => s.warm.as_str(),
                        "reason" => why.as_str());
                }
                _ => {}
            }
        }
        Box::pin(async move {
            for s in unresolved {
                match checker.check(&s.validator, &s.warm).await {
                    CheckOutcome::Granted => {
                        info!(log, "warm key granted on chain"; "stage" => "warm_key_accepted",
                            "escrow" => %escrow, "validator" => s.validator.short(),
                            "warm_key" => s.warm.as_str());
                    }
                    CheckOutcome::NotGranted => {
                        warn!(log, "warm key rejected"; "stage" => "warm_key_rejected",
                            "escrow" => %escrow, "validator" => s.validator.short(),
                            "warm_key" => s.warm.as_str(), "reason" => "not_granted");
                    }
                    // Logged by the checker (`warm_key_check_failed`); the signature is held.
                    CheckOutcome::Failed(_) => {}
                }
            }
        })
    }

    /// The warm signers of accepting timeout votes that need a chain answer.
    pub(super) fn vote_signers(
        &self,
        nonce: u64,
        reason: TimeoutReason,
        answers: &[(crate::protocol::crypto::Address, VerifyTimeoutResponse)],
    ) -> Vec<WarmSigner> {
        let content = state::timeout_vote_content(self.escrow_id(), nonce, reason);
        answers
            .iter()
            .filter(|(_, a)| a.accept)
            .filter_map(|(_, a)| {
                let sig = a.signature.as_ref()?;
                self.session
                    .vote_signer_to_check(a.voter_slot, &content, sig)
            })
            .collect()
    }
}
