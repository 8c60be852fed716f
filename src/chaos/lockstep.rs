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
    /// `None` when `v` holds no nonce: the admin view's `snapshot` is `null` when the escrow
    /// actor did not answer in time (busy, or respawning), which says nothing about its nonce.
    pub fn of(v: &Value) -> Option<GatewayAt> {
        Some(GatewayAt {
            nonce: v["nonce"].as_u64()?,
            root: v["state_root"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Invariant 1 across restarts: the gateway's nonce never goes back (a lower one means nonces
/// above it will be reused).
pub fn went_back(highest_seen: u64, now: u64) -> Option<String> {
    (now < highest_seen).then(|| {
        format!(
            "the gateway's nonce went back from {highest_seen} to {now}: nonces above {now} will be reused"
        )
    })
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

/// The participants the escrow withholds (`withheld` in its snapshot): it neither sends them
/// inference nor catches them up, so they may lag (e.g. ejected, then on probation before its
/// first paired attempt), but must not diverge.
pub fn withheld(snap: &Value) -> BTreeSet<String> {
    snap["withheld"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// The participants the escrow catches up in the background (`reach.catching_up` entries whose
/// carrier is `sync`, `escrow/reach/mod.rs`): they lack more diffs than a request may carry, and
/// the sync that carries them takes as long as they need, so they may lag, but must not diverge.
pub fn syncing(snap: &Value) -> BTreeSet<String> {
    snap["reach"]["catching_up"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["carrier"] == "sync")
        .filter_map(|c| c["host"].as_str().map(str::to_owned))
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

    /// Seed 12 ("the gateway's nonce went back from 2760 to 0", then every host "beyond the
    /// gateway's 0"): the escrow actor, busy with hundreds of timeout votes, did not answer the
    /// admin view in time, whose `snapshot` is then `null`, and the checker read that as nonce 0.
    /// A missing snapshot is no reading; a real one that went back is still reported.
    #[test]
    fn seed_12_an_escrow_too_busy_to_answer_is_not_a_nonce_gone_back() {
        assert_eq!(GatewayAt::of(&serde_json::Value::Null), None);
        assert_eq!(GatewayAt::of(&serde_json::json!({"repairs": []})), None);
        let read = GatewayAt::of(&serde_json::json!({"nonce": 0, "state_root": "r0"}));
        assert_eq!(read, Some(at(0, "r0")));
        let back = went_back(2760, 0);
        assert!(back.is_some_and(|p| p.contains("went back from 2760 to 0")));
        assert_eq!(went_back(2760, 2760), None);
        assert_eq!(went_back(2760, 2800), None);
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

    /// Seed `9e4a6cb226b5a38c2de19d5b67c7ac5484211a9e`, invariant 1 "host 3 at nonce 0 behind
    /// the gateway's 3788 after a sync": every host restarted empty; host 3 was ejected, then on
    /// probation, and the escrow still withheld it, so no sync caught it up — lagging, not
    /// diverged. The escrow's `withheld` list now makes such a host one that may lag (its root is
    /// still judged), like an ejected one.
    #[test]
    fn seed_9e4a6cb_a_host_the_escrow_withholds_may_lag_after_a_sync() {
        let snap = serde_json::json!({"withheld": ["gonka1a", "gonka1b"], "repairs": []});
        let w = withheld(&snap);
        assert!(w.contains("gonka1a") && w.contains("gonka1b") && w.len() == 2);
        assert!(withheld(&serde_json::json!({})).is_empty());
        let synced = at(3788, "r3788");
        let behind = host(3, 0, "");
        assert!(judge_host(&behind, 3788, &synced, &synced, false).is_some());
        assert!(judge_host(&behind, 3788, &synced, &synced, true).is_none());
    }

    /// A host restarted empty far behind is caught up by a background sync (issue 12: client
    /// attempts no longer carry it): the snapshot's `reach.catching_up` says so, and only that
    /// carrier makes it one that may lag.
    #[test]
    fn a_host_caught_up_in_the_background_may_lag() {
        let snap = serde_json::json!({"reach": {"catching_up": [
            {"host": "gonka1a", "carrier": "sync", "since_ms": 1},
            {"host": "gonka1b", "carrier": {"attempt": 12}, "since_ms": 1},
        ]}});
        let s = syncing(&snap);
        assert!(s.contains("gonka1a") && s.len() == 1);
        assert!(syncing(&serde_json::json!({})).is_empty());
    }
}
