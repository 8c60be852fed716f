//! Which escrows the checks follow. With `--max-nonce` the gateway rotates: it creates a
//! replacement before an escrow's serving limit, drains the old one and settles it. The lockstep
//! and settlement-deadline checks (invariants 1 and 4) follow every escrow that still serves or
//! drains; from finalizing on, the settlement's own checks take over (`payouts.rs`).

use serde_json::Value;

use super::{Checker, Report, Secrets};

/// Settlement states (`GET /v1/admin/escrows/{id}/settlement`) whose hosts the lockstep follows.
const FOLLOWED: [&str; 2] = ["active", "draining"];

impl Checker {
    /// Reads the gateway's escrows and keeps those still serving or draining; keeps the last
    /// list when the gateway cannot be read (it may be restarting after a `kill -9`).
    pub async fn refresh_escrows(
        &mut self,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) {
        let Some(list) = self
            .admin("GET", "/v1/admin/escrows", report, secrets)
            .await
        else {
            return;
        };
        let mut followed = Vec::new();
        for id in escrow_ids(&list) {
            let path = format!("/v1/admin/escrows/{id}/settlement");
            let Some(settlement) = self.admin("GET", &path, report, secrets).await else {
                return;
            };
            if settlement["state"]
                .as_str()
                .is_some_and(|s| FOLLOWED.contains(&s))
            {
                followed.push(id);
            }
        }
        self.escrows = followed;
    }
}

/// The ids in a `GET /v1/admin/escrows` answer.
pub fn escrow_ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["escrow_id"].as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_ids_of_the_admin_list_are_read_in_its_order() {
        let list = json!({"object": "list", "data": [
            {"escrow_id": "7", "snapshot": null}, {"escrow_id": "9"}, {"model": "no id"}]});
        assert_eq!(
            super::escrow_ids(&list),
            vec!["7".to_owned(), "9".to_owned()]
        );
    }
}
