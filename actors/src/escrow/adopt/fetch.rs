//! `GET …/diffs` from one host, page by page (see the module docs of `adopt`).

use std::time::Duration;

use crate::{
    escrow::info::{EscrowInfo, HostEndpoint},
    host::{client, error::HostError},
    protocol::wire::DiffRecord,
};

/// Diffs asked per `GET …/diffs` call.
pub const PAGE: u64 = 500;

/// What a host answered.
#[derive(Debug, Clone, PartialEq)]
pub enum HostAnswer {
    /// Its diffs from nonce 1 on, in the order served.
    Diffs(Vec<DiffRecord>),
    /// 404: it holds no session of the escrow (nothing yet, or it lost its storage).
    NoSession,
    /// It could not be asked (transport, timeout, another status); the text says why.
    Failed(String),
}

/// Every diff `host` holds, up to the escrow's `max_nonce`, each page within `timeout`.
pub async fn fetch(info: &EscrowInfo, host: &HostEndpoint, timeout: Duration) -> HostAnswer {
    let mut all = Vec::new();
    let mut from = 1u64;
    while from <= info.max_nonce.max(1) {
        let to = from.saturating_add(PAGE - 1);
        let url = format!("{}?from={from}&to={to}", info.session_url(host, "diffs"));
        match client::get_diffs(&url, timeout).await {
            Ok(page) => {
                let full = u64::try_from(page.len()).unwrap_or(u64::MAX) >= PAGE;
                all.extend(page);
                if !full {
                    break;
                }
                from = to.saturating_add(1);
            }
            Err(HostError::Status { status: 404, .. }) if all.is_empty() => {
                return HostAnswer::NoSession
            }
            Err(e) => return HostAnswer::Failed(e.to_string()),
        }
    }
    HostAnswer::Diffs(all)
}
