//! Invariant 4's judgement of one host's open inferences, pure: which are past their protocol
//! deadline (execution from the confirmation of a started one, refusal from the start of one
//! not yet confirmed) by more than the slack.

use serde_json::Value;

use super::Deadlines;

/// An open inference past its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overdue {
    pub id: u64,
    /// Its status on the host (`started`, `pending`, …).
    pub status: String,
    /// Seconds past the deadline (the slack included).
    pub late_s: i64,
    /// `execution` or `refusal`.
    pub deadline: &'static str,
}

/// The inferences of `open` (a host's open inference records) past their deadline at `now_s`.
pub fn overdue(open: &[Value], now_s: i64, d: Deadlines) -> Vec<Overdue> {
    open.iter()
        .filter_map(|r| {
            let status = r["status"].as_str().unwrap_or("?");
            let (due, deadline) = match status {
                "started" => (
                    r["confirmed_at"].as_i64().unwrap_or(0) + d.execution_s,
                    "execution",
                ),
                _ => (
                    r["started_at"].as_i64().unwrap_or(0) + d.refusal_s,
                    "refusal",
                ),
            };
            (now_s > due + d.slack_s).then(|| Overdue {
                id: r["id"].as_u64().unwrap_or(0),
                status: status.to_owned(),
                late_s: now_s - due,
                deadline,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const D: Deadlines = Deadlines {
        refusal_s: 60,
        execution_s: 300,
        slack_s: 30,
    };

    #[test]
    fn a_started_inference_is_due_at_execution_and_a_pending_one_at_refusal_plus_the_slack() {
        let open = [
            json!({"id": 7, "status": "started", "started_at": 1_000, "confirmed_at": 1_010}),
            json!({"id": 8, "status": "pending", "started_at": 1_000}),
        ];
        // Pending: due 1 060, judged after 1 090. Started: due 1 310, judged after 1 340.
        assert!(overdue(&open, 1_090, D).is_empty(), "within the slack");
        assert_eq!(
            overdue(&open, 1_091, D),
            [Overdue {
                id: 8,
                status: "pending".to_owned(),
                late_s: 31,
                deadline: "refusal",
            }]
        );
        let both = overdue(&open, 1_341, D);
        assert_eq!(both.len(), 2);
        assert_eq!(
            (both[0].id, both[0].deadline, both[0].late_s),
            (7, "execution", 31)
        );
    }

    #[test]
    fn a_started_inference_is_not_held_to_the_refusal_deadline() {
        let open = [json!({"id": 1, "status": "started", "started_at": 0, "confirmed_at": 200})];
        assert!(
            overdue(&open, 300, D).is_empty(),
            "confirmed at 200: due at 500"
        );
        assert_eq!(overdue(&open, 531, D).len(), 1);
    }
}
