//! Invariant 1's judgement of one host (`Checker::lockstep` in `checks.rs` does the reads): the
//! gateway's nonce is read before the sync, in the sync's answer and after the hosts, because the
//! escrow keeps composing diffs on its own (a confirmed timeout is sequenced and sent at once),
//! so one read compared with hosts read later is a moment, not the invariant.

use std::collections::BTreeSet;

use serde_json::Value;

/// The gateway's nonce and root at one moment (a snapshot or a sync answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayAt {
    pub nonce: u64,
    pub root: String,
}

impl GatewayAt {
    pub fn of(v: &Value) -> GatewayAt {
        GatewayAt {
            nonce: v["nonce"].as_u64().unwrap_or(0),
            root: v["state_root"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// One host's nonce and root as the control API reported them.
#[derive(Debug, Clone, Copy)]
pub struct HostAt<'a> {
    pub index: usize,
    pub nonce: u64,
    pub root: &'a str,
}

/// Participants a snapshot says are under repair or given up (they may lag).
pub fn excused(snap: &Value) -> BTreeSet<String> {
    ["repairs", "repairs_given_up"]
        .iter()
        .flat_map(|k| snap[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// Invariant 1 for one host read between two reads of the gateway: `before` (its nonce before
/// the sync; the sync catches every routable host up to at least it), `synced` (the sync's
/// answer) and `latest` (read after the host). The gateway's nonce only grows, so a host beyond
/// `latest` holds a nonce the gateway never composed (reused or lost), and a host behind
/// `before` after a sync was not caught up (unless `lagging_ok`: not quiesced, or ejected).
/// Roots are compared where the host's nonce is one whose root we read.
pub fn judge_host(
    host: &HostAt<'_>,
    before: u64,
    synced: &GatewayAt,
    latest: &GatewayAt,
    lagging_ok: bool,
) -> Option<String> {
    let i = host.index;
    if host.nonce > latest.nonce {
        return Some(format!(
            "host {i} holds nonce {} beyond the gateway's {} (a nonce was reused or lost)",
            host.nonce, latest.nonce
        ));
    }
    for at in [synced, latest] {
        if host.nonce == at.nonce && host.root != at.root {
            return Some(format!(
                "host {i} at nonce {} has root {} ≠ the gateway's {}",
                at.nonce, host.root, at.root
            ));
        }
    }
    if host.nonce < before && !lagging_ok {
        return Some(format!(
            "host {i} at nonce {} behind the gateway's {before} after a sync",
            host.nonce
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(nonce: u64, root: &str) -> GatewayAt {
        GatewayAt {
            nonce,
            root: root.to_owned(),
        }
    }

    fn host(index: usize, nonce: u64, root: &str) -> HostAt<'_> {
        HostAt { index, nonce, root }
    }

    /// Seed 9457917586553865090 (README "Chaos and fuzzing"): after the sync answered nonce 353
    /// a confirmed timeout was sequenced as 354 and sent to hosts 0 and 4 before the checker read
    /// them, and host 2 held 352, the nonce before the sync (353 came with the timeout, not the
    /// sync). One read of the gateway reported "beyond" and "behind after a sync"; neither is.
    #[test]
    fn seed_9457917586553865090_a_timeout_diff_composed_during_the_check_is_not_a_lost_nonce() {
        let (synced, latest) = (at(353, "r353"), at(354, "r354"));
        assert_eq!(
            judge_host(&host(0, 354, "r354"), 352, &synced, &latest, false),
            None
        );
        assert_eq!(
            judge_host(&host(4, 354, "r354"), 352, &synced, &latest, false),
            None
        );
        assert_eq!(
            judge_host(&host(2, 352, "r352"), 352, &synced, &latest, false),
            None
        );
        assert_eq!(
            judge_host(&host(1, 353, "r353"), 352, &synced, &latest, false),
            None
        );
    }

    #[test]
    fn a_reused_skipped_or_forked_nonce_is_still_reported() {
        let (synced, latest) = (at(353, "r353"), at(354, "r354"));
        let beyond = judge_host(&host(0, 355, "x"), 352, &synced, &latest, false);
        assert!(beyond.is_some_and(|p| p.contains("beyond the gateway's 354")));
        let behind = judge_host(&host(2, 351, "x"), 352, &synced, &latest, false);
        assert!(behind.is_some_and(|p| p.contains("behind the gateway's 352")));
        assert_eq!(
            judge_host(&host(2, 351, "x"), 352, &synced, &latest, true),
            None
        );
        let other_root = judge_host(&host(3, 353, "forked"), 352, &synced, &latest, true);
        assert!(other_root.is_some_and(|p| p.contains("has root forked")));
        let other_root = judge_host(&host(3, 354, "forked"), 352, &synced, &latest, true);
        assert!(other_root.is_some_and(|p| p.contains("≠ the gateway's r354")));
    }
}
