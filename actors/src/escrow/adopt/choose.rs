//! The choice of the adopted chain (pure; see the module docs of `adopt`).

use std::collections::BTreeMap;

use super::{AdoptError, Adoption, HostChain, HostReport};

/// Weight of the hosts that agree with `candidate`.
fn agreeing_weight(chains: &[HostChain], candidate: &HostChain) -> u32 {
    chains
        .iter()
        .filter(|h| h.may_agree() && h.compatible(candidate))
        .map(|h| h.weight)
        .sum()
}

/// The longest verified chain that hosts weighing at least `threshold` slots agree with.
pub fn choose(
    escrow_id: &str,
    chains: Vec<HostChain>,
    threshold: u32,
) -> Result<Adoption, AdoptError> {
    let mut order: Vec<usize> = (0..chains.len())
        .filter(|&i| chains[i].may_agree())
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(chains[i].diffs.len()));
    let mut best = 0;
    let mut chosen = None;
    for i in order {
        let weight = agreeing_weight(&chains, &chains[i]);
        best = best.max(weight);
        if weight >= threshold {
            chosen = Some((i, weight));
            break;
        }
    }
    let rejected: Vec<_> = chains.iter().flat_map(|h| h.rejected.clone()).collect();
    let Some((index, weight)) = chosen else {
        return Err(AdoptError::NoQuorum {
            escrow_id: escrow_id.to_string(),
            best,
            threshold,
            rejected: rejected.len(),
            unreachable: chains.iter().filter(|h| !h.answered).count(),
            report: rejected,
        });
    };
    let winner = &chains[index];
    let mut host_sync = BTreeMap::new();
    let hosts = chains
        .iter()
        .map(|h| {
            let agrees = h.may_agree() && h.compatible(winner);
            if h.answered && h.compatible(winner) {
                host_sync.insert(h.host.clone(), h.verified_nonce());
            }
            HostReport {
                host: h.host.clone(),
                answered: h.answered,
                error: h.error.clone(),
                verified_nonce: h.verified_nonce(),
                rejected: h.rejected.len(),
                agrees,
            }
        })
        .collect();
    Ok(Adoption {
        escrow_id: escrow_id.to_string(),
        diffs: winner.diffs.clone(),
        warm: winner.warm.clone(),
        weight,
        threshold,
        hosts,
        rejected,
        host_sync,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        escrow::adopt::{RejectReason, RejectedDiff},
        protocol::{
            crypto::{Address, SigningKey},
            diff::Diff,
        },
    };

    fn host(i: u32) -> Address {
        SigningKey::derive("adopt-choose", i).address().clone()
    }

    /// A host holding nonces `1..=len` of fork `fork`.
    fn chain(i: u32, len: u8, fork: u8) -> HostChain {
        HostChain {
            answered: true,
            diffs: (1..=len)
                .map(|n| Diff {
                    nonce: n.into(),
                    txs: vec![],
                    user_sig: vec![],
                    post_state_root: vec![n],
                })
                .collect(),
            hashes: (1..=len).map(|n| [n.wrapping_add(fork); 32]).collect(),
            ..HostChain::new(host(i), 1)
        }
    }

    #[test]
    fn the_longest_chain_its_prefixes_agree_with_wins() {
        let chains = vec![chain(0, 30, 0), chain(1, 28, 0), chain(2, 29, 0)];
        let a = choose("42", chains, 3).unwrap();
        assert_eq!((a.nonce(), a.weight), (30, 3));
        assert_eq!(a.host_sync.get(&host(1)), Some(&28));
        assert!(a.hosts.iter().all(|h| h.agrees));
    }

    #[test]
    fn a_host_that_served_a_rejected_diff_counts_for_nothing() {
        let mut liar = chain(3, 4, 0);
        liar.rejected.push(RejectedDiff {
            host: host(3),
            nonce: 5,
            reason: RejectReason::UserSig,
            detail: String::new(),
        });
        let chains = vec![chain(0, 10, 0), chain(1, 9, 0), chain(2, 10, 0), liar];
        // N = 4: quorum 2·4/3 + 1 = 3, reached without the liar.
        let a = choose("42", chains.clone(), 3).unwrap();
        assert_eq!(a.nonce(), 10);
        assert_eq!(a.rejected.len(), 1);
        assert!(!a.hosts[3].agrees);
        // With one more honest host missing, the liar cannot make up the quorum.
        let err = choose("42", chains[1..].to_vec(), 3).unwrap_err();
        assert!(matches!(err, AdoptError::NoQuorum { best: 2, .. }), "{err}");
    }

    #[test]
    fn forks_do_not_agree_and_unreachable_hosts_are_not_counted() {
        let mut gone = chain(2, 0, 0);
        gone.answered = false;
        let chains = vec![chain(0, 10, 0), chain(1, 10, 7), gone];
        let err = choose("42", chains, 2).unwrap_err();
        assert!(
            matches!(
                err,
                AdoptError::NoQuorum {
                    best: 1,
                    unreachable: 1,
                    ..
                }
            ),
            "{err}"
        );
        // A host without a session holds the empty chain: it agrees with any chain.
        let chains = vec![chain(0, 10, 0), chain(1, 10, 7), chain(2, 0, 0)];
        let a = choose("42", chains, 2).unwrap();
        assert_eq!((a.nonce(), a.weight), (10, 2));
    }
}
