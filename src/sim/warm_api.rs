//! The HTTP side of the simulator's warm keys (`super::warm`): the chain's grants query
//! (`GET {GRANTEES_PREFIX}{validator}/{type_url}`, through [`super::warm::GrantsFault`]) and the
//! `/sim/warm/…` control routes listed in `super::warm`'s header.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use devshard_actors::protocol::{crypto::Address, warm::TYPE_URL_CLAIM_REWARDS};

use super::{
    chain::pubkey_b64,
    network::NetCore,
    server::{self, Resp},
    warm::*,
};

/// `GET {GRANTEES_PREFIX}{validator}/{type_url}` through the grants fault, logged.
pub(crate) async fn serve_grantees(core: &NetCore, path: &str, client: &str) -> Resp {
    let fault = core.warm.fault();
    if let Some(ms) = fault.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    core.chain.serve("chain", path, client, || {
        if fault.unreachable {
            // Headers, then the connection is cut before any byte of the body.
            let (tx, body) = server::channel_body();
            let _ = tx.try_send(Err(std::io::Error::other("grants endpoint unreachable")));
            return server::response(StatusCode::OK, "application/json", body);
        }
        if let Some(status) = fault.status {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return server::json(status, &json!({"code": 14, "message": "unavailable"}));
        }
        let rest = path.strip_prefix(GRANTEES_PREFIX).unwrap_or_default();
        let Some((validator, type_url)) = rest.split_once('/') else {
            return server::json(
                StatusCode::BAD_REQUEST,
                &json!({"code": 3, "message": "expected {validator}/{type_url}"}),
            );
        };
        let type_url = type_url.replace("%2F", "/").replace("%2f", "/");
        let list: Vec<_> = core
            .warm
            .grantees(&Address::unchecked(validator), &type_url)
            .into_iter()
            .map(|g| json!({"address": g.grantee, "pub_key": g.pub_key}))
            .collect();
        server::json(StatusCode::OK, &json!({ "grantees": list }))
    })
}

/// Selects grants by host index or by addresses.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Selector {
    host: Option<usize>,
    validator: Option<Address>,
    grantee: Option<Address>,
    type_url: Option<String>,
    pub_key: Option<String>,
    expires_in_ms: Option<u64>,
    in_ms: Option<u64>,
}

impl Selector {
    /// `(validator, grantee, grantee pub key, type url)`.
    fn resolve(&self, core: &NetCore) -> Result<(Address, Address, String, String), String> {
        if let Some(i) = self.host {
            let host = core.hosts.get(i).ok_or(format!("unknown host {i}"))?;
            let key = warm_key(&core.cfg.seed, i);
            return Ok((
                host.key.address().clone(),
                key.address().clone(),
                pubkey_b64(&key.public_key().serialize()),
                self.type_url
                    .clone()
                    .unwrap_or_else(|| default_type_url(i).to_owned()),
            ));
        }
        match (&self.validator, &self.grantee) {
            (Some(v), Some(g)) => Ok((
                v.clone(),
                g.clone(),
                self.pub_key.clone().unwrap_or_default(),
                self.type_url
                    .clone()
                    .unwrap_or_else(|| TYPE_URL_CLAIM_REWARDS.to_owned()),
            )),
            _ => Err("give \"host\" or both \"validator\" and \"grantee\"".into()),
        }
    }
}

/// `/sim/warm/…`.
pub(crate) async fn control(
    core: &NetCore,
    method: &Method,
    rest: &[&str],
    req: Request<Incoming>,
) -> Resp {
    let bad = |e: String| server::message(StatusCode::BAD_REQUEST, &e);
    match (method, rest) {
        (&Method::GET, ["grants"]) => grants_json(core),
        (&Method::GET, ["faults"]) => server::json(StatusCode::OK, &core.warm.fault()),
        (&Method::DELETE, ["faults"]) => {
            core.warm.set_fault(GrantsFault::default());
            server::json(StatusCode::OK, &core.warm.fault())
        }
        (&Method::PUT, ["faults"]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            match serde_json::from_slice::<GrantsFault>(&body) {
                Ok(f) => {
                    core.warm.set_fault(f);
                    server::json(StatusCode::OK, &core.warm.fault())
                }
                Err(e) => bad(e.to_string()),
            }
        }
        (&Method::POST, ["grants", action @ ..]) => {
            let body = match server::read_body(req).await {
                Ok(b) => b,
                Err(reject) => return reject.into_response(),
            };
            let sel: Selector = match serde_json::from_slice(&body) {
                Ok(s) => s,
                Err(e) => return bad(e.to_string()),
            };
            let (validator, grantee, pub_key, type_url) = match sel.resolve(core) {
                Ok(t) => t,
                Err(e) => return bad(e),
            };
            let changed = match action {
                [] => {
                    let expires_at_ms = sel.expires_in_ms.map(|ms| {
                        core.warm
                            .now_ms()
                            .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
                    });
                    core.warm.add(Grant {
                        validator,
                        grantee,
                        pub_key,
                        type_url,
                        expires_at_ms,
                        revoked: false,
                    });
                    1
                }
                ["revoke"] => core.warm.revoke(&validator, &grantee),
                ["expire"] => core
                    .warm
                    .expire(&validator, &grantee, sel.in_ms.unwrap_or(0)),
                _ => return server::message(StatusCode::NOT_FOUND, "Not Found"),
            };
            server::json(StatusCode::OK, &json!({ "changed": changed }))
        }
        _ => server::message(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn grants_json(core: &NetCore) -> Resp {
    let now = core.warm.now_ms();
    let list: Vec<_> = core
        .warm
        .all()
        .into_iter()
        .map(|g| {
            let active = g.active(now);
            json!({"grant": g, "active": active})
        })
        .collect();
    server::json(StatusCode::OK, &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_mode_parses_and_covers() {
        assert_eq!("all".parse::<WarmMode>().unwrap(), WarmMode::All);
        assert_eq!("none".parse::<WarmMode>().unwrap(), WarmMode::None);
        assert_eq!("3".parse::<WarmMode>().unwrap(), WarmMode::Count(3));
        assert!("some".parse::<WarmMode>().is_err());
        assert!(WarmMode::Count(3).covers(2, 7) && !WarmMode::Count(3).covers(3, 7));
        assert!(WarmMode::All.covers(6, 7) && !WarmMode::None.covers(0, 7));
        assert_eq!(WarmMode::mixed(7), WarmMode::Count(4));
    }
}
