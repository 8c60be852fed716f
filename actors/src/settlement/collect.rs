//! Collecting state signatures of the final nonce (docs/protocol.md §5.7): the escrow's own verified
//! signatures first, then `GET …/signatures?nonce=N` from every host still missing, in
//! parallel, then catch-up for hosts that did not have one. Every signature is verified before
//! it counts — by the slot's cold key or a warm key the session binds or the chain grants
//! (docs/lifecycle.md §5; a warm key the grant cache does not know yet is checked on chain, then
//! judged again). A fetched signature that does not verify (forged, wrong root, a key nobody
//! granted) is not counted and its host is charged like any invalid signature.

use std::{collections::BTreeMap, time::Duration};

use futures::future::join_all;

use super::{
    port::{EscrowSteps, FinalState},
    quorum::{self, SignatureRejected, SignerKey, Weight},
};
use crate::{
    escrow::EscrowInfo,
    host::client,
    protocol::{crypto::Address, state::Phase},
};

/// The result of one collection pass.
#[derive(Debug, Clone)]
pub struct Collected {
    pub nonce: u64,
    pub root: [u8; 32],
    pub signatures: BTreeMap<u32, Vec<u8>>,
    pub weight: Weight,
    /// The key each counted validator signed with.
    pub keys: BTreeMap<Address, SignerKey>,
    /// Fetched signatures that failed verification, by host (each such host was charged).
    pub rejected: Vec<(Address, SignatureRejected)>,
    /// Fetched signatures by warm keys whose grant is still unknown after asking the chain
    /// (not counted, not charged; the next pass judges them again).
    pub unresolved: Vec<(Address, SignatureRejected)>,
    /// Hosts that could not be asked (unreachable), with the error.
    pub unreachable: Vec<(Address, String)>,
}

/// A fetched signature by a warm key the grant cache has no answer for yet.
struct Unresolved {
    host: Address,
    slot: u32,
    signature: Vec<u8>,
    rejected: SignatureRejected,
}

/// Verifies `fetched` (slot → signature, from `host`) into `out`. Rejections are kept only for
/// signatures the host sent now (`from_host`); the escrow's own copies were verified on arrival.
fn verify_into(
    fin: &FinalState,
    host: &Address,
    fetched: &BTreeMap<u32, Vec<u8>>,
    from_host: bool,
    out: &mut Collected,
    unresolved: &mut Vec<Unresolved>,
) {
    let group = fin.state.group();
    let escrow = fin.state.escrow_id();
    let at = (out.root, out.nonce);
    for (slot, sig) in fetched {
        // Take only entries of slots this host holds.
        if fin.state.slot_address(*slot) != Some(host) {
            continue;
        }
        let acceptance = |v: &Address, r: &Address| fin.state.address_acceptance(v, r);
        match quorum::accept_state_signature(group, escrow, (&at.0, at.1), *slot, sig, acceptance) {
            Ok(a) => {
                quorum::record(group, &mut out.signatures, &a.validator, sig);
                out.keys.insert(a.validator, a.key);
            }
            Err(_) if !from_host => {}
            Err(rejected @ SignatureRejected::Unresolved { .. }) => unresolved.push(Unresolved {
                host: host.clone(),
                slot: *slot,
                signature: sig.clone(),
                rejected,
            }),
            Err(e) => out.rejected.push((host.clone(), e)),
        }
    }
}

/// Asks the chain about each unresolved warm signer, then judges its signature again.
async fn resolve_warm(
    fin: &FinalState,
    steps: &dyn EscrowSteps,
    pending: Vec<Unresolved>,
    out: &mut Collected,
) {
    let mut still = Vec::new();
    for u in pending {
        if let SignatureRejected::Unresolved {
            validator, warm, ..
        } = &u.rejected
        {
            // A failed check leaves the cache without an answer: judged unresolved again.
            let _ = steps.check_warm_key(validator.clone(), warm.clone()).await;
        }
        let one = BTreeMap::from([(u.slot, u.signature)]);
        verify_into(fin, &u.host, &one, true, out, &mut still);
    }
    out.unresolved
        .extend(still.into_iter().map(|u| (u.host, u.rejected)));
}

async fn fetch(url: String, timeout: Duration) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    client::get_signatures(&url, timeout)
        .await
        .map(|r| r.signatures.unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// One pass: verified own signatures, then fetch (and catch-up + fetch) for every missing host;
/// warm signers are checked on chain; every host that sent an invalid signature is charged.
pub async fn collect(
    info: &EscrowInfo,
    fin: &FinalState,
    steps: &dyn EscrowSteps,
    timeout: Duration,
) -> Collected {
    let nonce = fin.state.latest_nonce();
    let root = fin.state.root_with_phase(Phase::Settlement);
    let mut out = Collected {
        nonce,
        root,
        signatures: BTreeMap::new(),
        weight: quorum::weight(fin.state.group(), &BTreeMap::new()),
        keys: BTreeMap::new(),
        rejected: Vec::new(),
        unresolved: Vec::new(),
        unreachable: Vec::new(),
    };
    let mut unresolved = Vec::new();
    for host in quorum::missing(fin.state.group(), &BTreeMap::new()) {
        verify_into(
            fin,
            &host,
            &fin.signatures,
            false,
            &mut out,
            &mut unresolved,
        );
    }
    let group = fin.state.group();
    let path = format!("signatures?nonce={nonce}");
    let missing = quorum::missing(group, &out.signatures);
    let urls: Vec<(Address, String)> = missing
        .iter()
        .filter_map(|a| {
            info.host(a)
                .map(|h| (a.clone(), info.session_url(h, &path)))
        })
        .collect();
    let first = join_all(urls.iter().map(|(_, u)| fetch(u.clone(), timeout))).await;
    let mut retry = Vec::new();
    for ((host, url), got) in urls.into_iter().zip(first) {
        if let Ok(sigs) = &got {
            verify_into(fin, &host, sigs, true, &mut out, &mut unresolved);
        }
        let signed = fin
            .state
            .slots_of(&host)
            .first()
            .is_some_and(|s| out.signatures.contains_key(s));
        let judged = out.rejected.iter().any(|(h, _)| *h == host)
            || unresolved.iter().any(|u| u.host == host);
        if !signed && !judged {
            retry.push((host, url, got.err()));
        }
    }
    for (host, url, err) in retry {
        let result = match steps.catch_up(host.clone()).await {
            Ok(()) => fetch(url, timeout).await,
            Err(e) => Err(err.unwrap_or_else(|| e.to_string())),
        };
        match result {
            Ok(sigs) => verify_into(fin, &host, &sigs, true, &mut out, &mut unresolved),
            Err(e) => out.unreachable.push((host, e)),
        }
    }
    resolve_warm(fin, steps, unresolved, &mut out).await;
    let mut charged: Vec<&Address> = Vec::new();
    for (host, _) in out.rejected.iter().filter(|(_, e)| e.is_host_fault()) {
        if !charged.contains(&host) {
            charged.push(host);
            let _ = steps.charge_invalid_signature(host.clone()).await;
        }
    }
    out.weight = quorum::weight(group, &out.signatures);
    out
}
