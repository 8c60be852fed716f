//! Per-escrow signing keys: an escrow may name where its key is (`key_file` or `key_env`); the
//! default is the gateway key. Only the *reference* is persisted with the registration; the key
//! is read when the escrow's actor (or its settlement) starts. Neither the key nor its text is
//! ever logged, returned or put in an error message.

use std::{path::PathBuf, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::protocol::crypto::SigningKey;

/// Where an escrow's signing key is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// A file holding the hex secret key.
    File(PathBuf),
    /// An environment variable holding the hex secret key.
    Env(String),
}

/// Why a key could not be read (never carries the key's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key file {path} cannot be read: {reason}")]
    File { path: String, reason: String },
    #[error("environment variable {0} is not set")]
    EnvMissing(String),
    #[error("the key from {origin} is not a secp256k1 secret key in hex: {reason}")]
    Invalid { origin: String, reason: String },
}

impl KeySource {
    /// `key_file` / `key_env` of an admin call or a config entry; both set is an error.
    pub fn from_fields(
        key_file: Option<&str>,
        key_env: Option<&str>,
    ) -> Result<Option<KeySource>, &'static str> {
        let file = key_file.map(str::trim).filter(|s| !s.is_empty());
        let env = key_env.map(str::trim).filter(|s| !s.is_empty());
        match (file, env) {
            (Some(_), Some(_)) => Err("set key_file or key_env, not both"),
            (Some(f), None) => Ok(Some(KeySource::File(PathBuf::from(f)))),
            (None, Some(e)) => Ok(Some(KeySource::Env(e.to_owned()))),
            (None, None) => Ok(None),
        }
    }

    fn origin(&self) -> String {
        match self {
            KeySource::File(p) => format!("file {}", p.display()),
            KeySource::Env(n) => format!("environment variable {n}"),
        }
    }

    /// Reads the key.
    pub fn load(&self) -> Result<SigningKey, KeyError> {
        let text = match self {
            KeySource::File(path) => std::fs::read_to_string(path).map_err(|e| KeyError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?,
            KeySource::Env(name) => {
                std::env::var(name).map_err(|_| KeyError::EnvMissing(name.clone()))?
            }
        };
        // `from_hex` errors never echo the input.
        SigningKey::from_hex(text.trim()).map_err(|e| KeyError::Invalid {
            origin: self.origin(),
            reason: e.to_string(),
        })
    }
}

/// Store namespace of escrows' key references: key = escrow id, value = [`KeySource`].
pub const NS_ESCROW_KEYS: &str = "escrow_key";

/// The key reference stored with an escrow's registration, if it names one.
pub fn stored(store: &crate::store::SharedStore, escrow_id: &str) -> Option<KeySource> {
    stored_or_error(store, escrow_id).ok().flatten()
}

/// [`stored`], but a store that cannot answer is an error, never "no key of its own" (a respawn
/// during a database outage must not fall back to the gateway's key).
pub fn stored_or_error(
    store: &crate::store::SharedStore,
    escrow_id: &str,
) -> Result<Option<KeySource>, crate::store::StoreError> {
    Ok(store
        .get(NS_ESCROW_KEYS, escrow_id)?
        .and_then(|v| serde_json::from_value(v).ok()))
}

/// The key an escrow signs with: its own when it names one, else the gateway's.
pub fn escrow_key(
    source: Option<&KeySource>,
    gateway: &Arc<SigningKey>,
) -> Result<Arc<SigningKey>, KeyError> {
    match source {
        Some(s) => s.load().map(Arc::new),
        None => Ok(gateway.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_read_and_errors_never_show_the_text() {
        let dir = std::env::temp_dir().join(format!("devshard-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let good = dir.join("good");
        let key = SigningKey::derive("key-file-test", 0);
        std::fs::write(&good, format!("{}\n", key.secret_hex())).unwrap_or_default();
        let loaded = KeySource::File(good).load().map(|k| k.address().clone());
        assert_eq!(loaded, Ok(key.address().clone()));
        let bad = dir.join("bad");
        std::fs::write(&bad, "not-a-secret-zz").unwrap_or_default();
        let err = KeySource::File(bad).load().err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| !e.contains("not-a-secret-zz")),
            "{err:?}"
        );
        let missing = KeySource::Env("DEVSHARD_TEST_SURELY_UNSET_KEY".into()).load();
        assert_eq!(
            missing.err(),
            Some(KeyError::EnvMissing(
                "DEVSHARD_TEST_SURELY_UNSET_KEY".into()
            ))
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn both_fields_are_refused_and_none_means_the_gateway_key() {
        assert!(KeySource::from_fields(Some("a"), Some("B")).is_err());
        assert_eq!(KeySource::from_fields(None, Some(" ")), Ok(None));
        let gw = Arc::new(SigningKey::derive("gw", 0));
        let k = escrow_key(None, &gw).map(|k| k.address().clone());
        assert_eq!(k, Ok(gw.address().clone()));
    }
}
