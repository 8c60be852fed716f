//! The runner's only way to look at the system: HTTP to the gateway (public, admin and debug
//! routes) and to the simulator's control API. Every call has a deadline; every answer body is
//! handed to the secret scanner by the caller.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

/// Deadline of a control or admin call.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an idle pooled connection is reused: below the gateway's (actix-web's default 5 s)
/// keep-alive, so the runner never sends on a connection the server is closing at that moment —
/// awc's default of 15 s made such a request fail with "connector has been disconnected", which the
/// runner then counted against the gateway (a long run at 100 streams saw it).
pub const IDLE_REUSE: Duration = Duration::from_secs(3);

/// An HTTP failure (transport, timeout or an unreadable body).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(pub String);

/// awc client with the admin key for gateway admin routes.
#[derive(Clone)]
pub struct Http {
    client: awc::Client,
    admin_key: String,
}

impl Http {
    pub fn new(admin_key: &str, connections: usize) -> Http {
        Http {
            client: awc::Client::builder()
                .connector(
                    awc::Connector::new()
                        .limit(connections.max(16) * 2)
                        .conn_keep_alive(IDLE_REUSE),
                )
                .timeout(CALL_TIMEOUT)
                .disable_redirects()
                .finish(),
            admin_key: admin_key.to_owned(),
        }
    }

    pub fn client(&self) -> &awc::Client {
        &self.client
    }

    async fn send(
        &self,
        req: awc::ClientRequest,
        body: Option<&Value>,
    ) -> Result<(u16, Bytes), HttpError> {
        let sent = match body {
            Some(b) => req.send_json(b).await,
            None => req.send().await,
        };
        let mut resp = sent.map_err(|e| HttpError(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .body()
            .limit(64 << 20)
            .await
            .map_err(|e| HttpError(e.to_string()))?;
        Ok((status, bytes))
    }

    pub async fn get(&self, url: &str) -> Result<(u16, Bytes), HttpError> {
        self.send(self.client.get(url), None).await
    }

    /// A control-API call (`method` is GET, PUT, POST or DELETE) expecting a 2xx JSON answer.
    pub async fn call(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
    ) -> Result<Value, HttpError> {
        let req = match method {
            "PUT" => self.client.put(url),
            "POST" => self.client.post(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.get(url),
        };
        let req = req.insert_header(("Authorization", format!("Bearer {}", self.admin_key)));
        let (status, bytes) = self.send(req, body).await?;
        if !(200..300).contains(&status) {
            return Err(HttpError(format!(
                "{method} {url}: {status} {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| HttpError(format!("{method} {url}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_runner_reuses_a_connection_only_while_the_gateway_keeps_it() {
        assert!(
            super::IDLE_REUSE < crate::app::SERVER_KEEP_ALIVE,
            "a pooled connection must expire in the runner before the gateway closes it"
        );
    }
}
