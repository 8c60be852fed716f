//! The chain's warm-key grants: `GET /productscience/inference/inference/grantees_by_message_type/
//! {validator}/{type_url}` → `{"grantees": [{"address", "pub_key"}]}` (LIFECYCLE.md §5).
//!
//! [`GrantsSource`] is the query as a trait (its futures are local: awc is `!Send`), and
//! [`RestGrants`] the real one over awc with a per-request timeout, so a slow chain costs at most
//! [`GRANTS_TIMEOUT`] per query and never blocks an actor (callers spawn it).

use std::{cell::RefCell, fmt, time::Duration};

use futures::future::LocalBoxFuture;
use serde::Deserialize;

use crate::protocol::crypto::Address;

/// Per-query timeout of [`RestGrants`].
pub const GRANTS_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest grants answer read.
const MAX_BODY: usize = 1024 * 1024;
/// REST path of the query, before `{validator}/{type_url}`.
const GRANTEES_PREFIX: &str = "/productscience/inference/inference/grantees_by_message_type";

/// Why the chain gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantsError {
    #[error("grants query {url} failed: {reason}")]
    Transport { url: String, reason: String },
    #[error("grants query {url} timed out")]
    Timeout { url: String },
    #[error("grants query {url} answered {status}")]
    Status { url: String, status: u16 },
    #[error("grants answer of {url} is not understood: {reason}")]
    Decode { url: String, reason: String },
}

/// A source of grant lists.
pub trait GrantsSource: fmt::Debug {
    /// The grantee addresses of `validator` for message type `type_url`.
    fn grantees(
        &self,
        validator: &Address,
        type_url: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<Address>, GrantsError>>;
}

/// `{prefix}/{validator}/{type_url with '/' as %2F}`.
pub fn grantees_path(validator: &Address, type_url: &str) -> String {
    format!(
        "{GRANTEES_PREFIX}/{validator}/{}",
        type_url.replace('/', "%2F")
    )
}

#[derive(Deserialize)]
struct Grantee {
    address: String,
}

#[derive(Deserialize)]
struct GranteesResponse {
    #[serde(default)]
    grantees: Option<Vec<Grantee>>,
}

/// Parses a grants answer (a missing or `null` list is empty).
pub fn parse_grantees(body: &[u8]) -> Result<Vec<Address>, String> {
    let r: GranteesResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(r.grantees
        .unwrap_or_default()
        .into_iter()
        .map(|g| Address::unchecked(g.address.to_ascii_lowercase()))
        .collect())
}

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

fn client() -> awc::Client {
    CLIENT.with(|c| {
        c.borrow_mut()
            .get_or_insert_with(|| awc::Client::builder().disable_redirects().finish())
            .clone()
    })
}

/// The chain REST API's grants query over awc.
#[derive(Debug, Clone)]
pub struct RestGrants {
    base_url: String,
    timeout: Duration,
}

impl RestGrants {
    /// `base_url` is the chain REST root (`http://host:port`, no trailing slash needed).
    pub fn new(base_url: impl Into<String>, timeout: Duration) -> RestGrants {
        RestGrants {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            timeout,
        }
    }
}

impl GrantsSource for RestGrants {
    fn grantees(
        &self,
        validator: &Address,
        type_url: &str,
    ) -> LocalBoxFuture<'static, Result<Vec<Address>, GrantsError>> {
        let url = format!("{}{}", self.base_url, grantees_path(validator, type_url));
        let timeout = self.timeout;
        Box::pin(async move {
            let sent = client()
                .get(&url)
                .timeout(timeout)
                .insert_header(("Accept", "application/json"))
                .send()
                .await;
            let mut res = match sent {
                Ok(r) => r,
                Err(awc::error::SendRequestError::Timeout) => {
                    return Err(GrantsError::Timeout { url })
                }
                Err(e) => {
                    return Err(GrantsError::Transport {
                        url,
                        reason: e.to_string(),
                    })
                }
            };
            let status = res.status().as_u16();
            let body = res
                .body()
                .limit(MAX_BODY)
                .await
                .map_err(|e| GrantsError::Transport {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            if !(200..300).contains(&status) {
                return Err(GrantsError::Status { url, status });
            }
            parse_grantees(&body).map_err(|reason| GrantsError::Decode { url, reason })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_escapes_the_type_url_and_answers_parse() {
        let v = Address::unchecked("gonka1v");
        assert_eq!(
            grantees_path(&v, "/inference.inference.MsgClaimRewards"),
            "/productscience/inference/inference/grantees_by_message_type/gonka1v/%2Finference.inference.MsgClaimRewards"
        );
        let body = br#"{"grantees":[{"address":"gonka1w","pub_key":"AAA"}]}"#;
        assert_eq!(
            parse_grantees(body).unwrap(),
            [Address::unchecked("gonka1w")]
        );
        assert!(parse_grantees(br#"{"grantees":null}"#).unwrap().is_empty());
        assert!(parse_grantees(b"{}").unwrap().is_empty());
        assert!(parse_grantees(b"not json").is_err());
    }
}
