//! The end of a chaos run, after the schedule: faults cleared, load stopped; then the drain,
//! the bounded waits for ejections and background catch-ups, and the one judged final lockstep
//! (invariant 1's "at the end all converge").

use std::{cell::RefCell, rc::Rc, time::Duration};

use serde_json::json;

use super::{apply::Applier, checks::Checker, report::Report, secrets::Secrets};

/// Longest wait at the end for a host's ejection to end before the final lockstep (a second
/// ejection lasts 60 s ± 20 %).
const EJECTION_WAIT: Duration = Duration::from_secs(150);
/// Longest wait at the end for the background catch-ups the escrow reports: a host restarted
/// empty late in a long run lacks 100 000–200 000 diffs, sent at ≈ 1 600 a second per host on
/// 2 shared cores (the evening run of 2026-12-04 ended with all five so, and its judged
/// lockstep found none converged).
const CATCH_UP_WAIT: Duration = Duration::from_secs(600);

/// After the schedule: faults cleared, load stopped. Repairs are ticked, every open inference is
/// given its protocol deadline, then the hosts must all be in lockstep with nothing left open.
/// Invariant 6 follows (`payouts.rs`): the escrow is settled and the chain's payouts compared.
pub(super) async fn final_checks(
    checker: &mut Checker,
    applier: &Applier,
    report: &Rc<RefCell<Report>>,
    secrets: &Secrets,
) {
    applier.wait_hosts_up(Duration::from_secs(5)).await;
    checker.recovery(report, secrets).await;
    // Convergence attempts report into a scratch record: only the last lockstep counts.
    let scratch = RefCell::new(Report::scratch(report.borrow().seed));
    for _ in 0..6 {
        applier.trigger_repairs(&checker.gateway).await;
        if checker
            .lockstep(Duration::from_secs(10), true, &scratch, secrets)
            .await
            >= applier.hosts()
        {
            break;
        }
    }
    let granted = checker.last_nonce.clone();
    while let Some(left) = last_open_deadline(checker, &granted).await {
        report
            .borrow()
            .note("draining", json!({"seconds_to_last_deadline": left}));
        // A diff carries the timeout txs: keep one request a second flowing.
        checker.recovery(report, secrets).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // An ejected host gets no diffs until its ejection ends (a host's own fault may eject it
    // during the drain, e.g. seed 9457917586553865090); hosts restarted empty far behind are
    // caught up by the escrow in the background. The final lockstep is judged once neither is
    // left, each wait bounded (a catch-up that never ends still fails it).
    wait_with_traffic(checker, Until::NoEjection, EJECTION_WAIT, report, secrets).await;
    unquarantine_the_rest(checker, report, secrets).await;
    let catch_ups = Until::NoBackgroundCatchUp;
    wait_with_traffic(checker, catch_ups, CATCH_UP_WAIT, report, secrets).await;
    // Repairs of hosts that diverged during the drain take their own rounds (a debug build on a
    // loaded machine: several seconds each): give them the same bounded rounds as after the
    // schedule, unreported, before the one lockstep that is judged.
    for _ in 0..6 {
        applier.trigger_repairs(&checker.gateway).await;
        checker.quiesce(Duration::from_secs(10)).await;
        if checker
            .lockstep(Duration::from_secs(10), true, &scratch, secrets)
            .await
            >= applier.hosts()
        {
            break;
        }
    }
    let in_step = checker
        .lockstep(Duration::from_secs(20), true, report, secrets)
        .await;
    report.borrow().note(
        "final_lockstep",
        json!({"hosts_in_lockstep": in_step, "hosts": applier.hosts()}),
    );
    if in_step < applier.hosts() {
        report.borrow_mut().violation(1, format!(
            "only {in_step} of {} hosts converged to the gateway's nonce and root after the faults cleared and repairs ran",
            applier.hosts()
        ));
    }
}

/// Seconds to the last deadline of an inference granted by the last lockstep, over every escrow
/// followed; `None` once all have passed.
async fn last_open_deadline(
    checker: &Checker,
    granted: &std::collections::BTreeMap<String, u64>,
) -> Option<i64> {
    let mut last = None;
    for escrow in &checker.escrows {
        let nonce = granted.get(escrow).copied().unwrap_or(0);
        let left = checker.last_open_deadline(escrow, nonce).await;
        last = last.max(left.filter(|left| *left > 0));
    }
    last
}

/// Ends the ejections still running, as an operator does after an incident
/// (`POST /v1/admin/participants/unquarantine {"all": true}`: probation, so the escrows send
/// those hosts their diffs again). A host ejected for the sixth time sits out 30 s × 2⁶ ± 20 %:
/// the rotating hour-long run ended with three hosts ejected for another 20–28 minutes, beyond
/// any wait, so the final lockstep judged only two. Their state is what the final check is
/// about; ejection is routing, and invariant 3 judges it during the run.
async fn unquarantine_the_rest(checker: &Checker, report: &Rc<RefCell<Report>>, secrets: &Secrets) {
    let ejected = checker.ejected(report, secrets).await;
    if ejected.is_empty() {
        return;
    }
    let url = format!("{}/v1/admin/participants/unquarantine", checker.gateway);
    let all = json!({"all": true});
    let answer = checker.http.call("POST", &url, Some(&all)).await;
    report.borrow().note(
        "unquarantined",
        json!({"hosts": ejected, "ok": answer.is_ok()}),
    );
}

/// What a bounded wait at the end of a run waits for.
#[derive(Clone, Copy)]
enum Until {
    /// No participant ejected.
    NoEjection,
    /// No background catch-up reported by the escrow (a note `catching_up` a second meanwhile).
    NoBackgroundCatchUp,
}

/// Waits at most `bound` until `until` holds, one request a second flowing as in the drain.
async fn wait_with_traffic(
    checker: &Checker,
    until: Until,
    bound: Duration,
    report: &Rc<RefCell<Report>>,
    secrets: &Secrets,
) {
    let waited = tokio::time::Instant::now();
    while waited.elapsed() < bound {
        let done = match until {
            Until::NoEjection => checker.ejected(report, secrets).await.is_empty(),
            Until::NoBackgroundCatchUp => {
                let n = checker.background_catch_ups(report, secrets).await;
                if let Some(hosts) = n.filter(|n| *n > 0) {
                    let waited_s = waited.elapsed().as_secs();
                    let note = json!({"hosts": hosts, "waited_s": waited_s});
                    report.borrow().note("catching_up", note);
                }
                n == Some(0)
            }
        };
        if done {
            return;
        }
        checker.recovery(report, secrets).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
