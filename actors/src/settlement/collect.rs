//! Collecting state signatures of the final nonce (PROTOCOL.md §5.7): the escrow's own verified
//! signatures first, then `GET …/signatures?nonce=N` from every host still missing, in
//! parallel, then catch-up for hosts that did not have one. Every signature is verified before
//! it counts; a rejected one is reported (logged, and counted against the host).

use std::{collections::BTreeMap, time::Duration};

use futures::future::join_all;

use super::{
    port::{EscrowSteps, FinalState},
    quorum::{self, SignatureRejected, Weight},
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
    /// Signatures that failed verification, by host.
    pub rejected: Vec<(Address, SignatureRejected)>,
    /// Hosts that could not be asked (unreachable), with the error.
    pub unreachable: Vec<(Address, String)>,
}

fn verify_into(
    fin: &FinalState,
    root: &[u8; 32],
    host: &Address,
    fetched: &BTreeMap<u32, Vec<u8>>,
    out: &mut Collected,
) {
    let group = fin.state.group();
    let escrow = fin.state.escrow_id();
    for (slot, sig) in fetched {
        // Take only entries of slots this host holds.
        if fin.state.slot_address(*slot) != Some(host) {
            continue;
        }
        match quorum::accept_state_signature(group, escrow, root, out.nonce, *slot, sig) {
            Ok(signer) => quorum::record(group, &mut out.signatures, &signer, sig),
            Err(e) => out.rejected.push((host.clone(), e)),
        }
    }
}

async fn fetch(url: String, timeout: Duration) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    client::get_signatures(&url, timeout)
        .await
        .map(|r| r.signatures.unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// One pass: verified own signatures, then fetch (and catch-up + fetch) for every missing host.
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
        rejected: Vec::new(),
        unreachable: Vec::new(),
    };
    for host in quorum::missing(fin.state.group(), &BTreeMap::new()) {
        verify_into(fin, &root, &host, &fin.signatures, &mut out);
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
            verify_into(fin, &root, &host, sigs, &mut out);
        }
        let signed = fin
            .state
            .slots_of(&host)
            .first()
            .is_some_and(|s| out.signatures.contains_key(s));
        if !signed {
            retry.push((host, url, got.err()));
        }
    }
    for (host, url, err) in retry {
        let result = match steps.catch_up(host.clone()).await {
            Ok(()) => fetch(url, timeout).await,
            Err(e) => Err(err.unwrap_or_else(|| e.to_string())),
        };
        match result {
            Ok(sigs) => verify_into(fin, &root, &host, &sigs, &mut out),
            Err(e) => out.unreachable.push((host, e)),
        }
    }
    out.weight = quorum::weight(group, &out.signatures);
    out
}
