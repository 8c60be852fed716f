//! Devshard protocol versions (docs/versions.md): which rules an escrow's hosts run.
//!
//! From v4 on three things share the chain's approved version name: the host route
//! `/devshard/<name>`, the session's bind and the tag hashed into every state root. Older
//! binaries stamped the tag `"v2"` and served the legacy route `/v1/devshard`.
//!
//! This project implements two of them:
//! - [`ProtocolVersion::V2`]: tag `"v2"`, route `/v1/devshard`, no settlement drain;
//! - [`ProtocolVersion::V4_1`]: tag `"v4.1"`, route `/devshard/v4.1`, and the settlement drain
//!   (Started records paid their reservation, Pending records refunded).
//!
//! Every other name (v1, v3, v4, v5 height sync, v6, the Ristretto live-sum line…) is refused by
//! [`ProtocolVersion::parse`] with an error naming it and the supported ones: an escrow on a
//! version we do not implement must never run with silently diverging roots.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The legacy route prefix of the v2 binaries.
pub const LEGACY_ROUTE_PREFIX: &str = "/v1/devshard";
/// Route prefix of the versioned binaries: `/devshard/<name>`.
pub const VERSIONED_ROUTE_ROOT: &str = "/devshard/";

/// A protocol version this gateway implements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProtocolVersion {
    /// The legacy protocol (tag `"v2"`, route `/v1/devshard`).
    #[default]
    V2,
    /// Release v4.1 (tag `"v4.1"`, route `/devshard/v4.1`, settlement drain).
    V4_1,
}

/// Every implemented version, oldest first.
pub const SUPPORTED_VERSIONS: [ProtocolVersion; 2] = [ProtocolVersion::V2, ProtocolVersion::V4_1];

/// A version name this gateway does not implement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "devshard protocol version {name:?} is not implemented by this gateway (supported: {})",
    supported_list()
)]
pub struct UnsupportedVersion {
    pub name: String,
}

/// `"v2, v4.1"`.
pub fn supported_list() -> String {
    SUPPORTED_VERSIONS
        .iter()
        .map(|v| v.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl ProtocolVersion {
    /// The approved version name, which is also the tag hashed into the state root.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolVersion::V2 => "v2",
            ProtocolVersion::V4_1 => "v4.1",
        }
    }

    /// `StateRootAndProtocolVersion`: the tag bound into every state root.
    pub fn root_tag(self) -> &'static str {
        self.name()
    }

    /// The host route prefix of this version's binary.
    pub fn route_prefix(self) -> String {
        match self {
            ProtocolVersion::V2 => LEGACY_ROUTE_PREFIX.to_string(),
            v => format!("{VERSIONED_ROUTE_ROOT}{}", v.name()),
        }
    }

    /// Whether the Finalizing → Settlement transition drains live records first (v4.1 on).
    pub fn drains_at_settlement(self) -> bool {
        matches!(self, ProtocolVersion::V4_1)
    }

    /// Parses a version name (`"v2"`, `"v4.1"`; surrounding spaces ignored).
    pub fn parse(name: &str) -> Result<Self, UnsupportedVersion> {
        let n = name.trim();
        SUPPORTED_VERSIONS
            .into_iter()
            .find(|v| v.name() == n)
            .ok_or_else(|| UnsupportedVersion {
                name: n.to_string(),
            })
    }

    /// The version a route prefix names: `/v1/devshard` is v2, `/devshard/<name>` is `<name>`.
    /// Any other prefix (a proxy path) names none and gives `Ok(None)`.
    pub fn from_route_prefix(prefix: &str) -> Result<Option<Self>, UnsupportedVersion> {
        let p = prefix.trim().trim_end_matches('/');
        if p == LEGACY_ROUTE_PREFIX {
            return Ok(Some(ProtocolVersion::V2));
        }
        match p.strip_prefix(VERSIONED_ROUTE_ROOT) {
            Some(name) if !name.is_empty() && !name.contains('/') => Self::parse(name).map(Some),
            _ => Ok(None),
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ProtocolVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::parse(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_routes_and_tags() {
        assert_eq!(ProtocolVersion::V2.route_prefix(), "/v1/devshard");
        assert_eq!(ProtocolVersion::V4_1.route_prefix(), "/devshard/v4.1");
        assert_eq!(ProtocolVersion::V4_1.root_tag(), "v4.1");
        assert_eq!(ProtocolVersion::parse(" v4.1 "), Ok(ProtocolVersion::V4_1));
        assert!(!ProtocolVersion::V2.drains_at_settlement());
        assert!(ProtocolVersion::V4_1.drains_at_settlement());
    }

    #[test]
    fn unsupported_versions_are_named_with_the_supported_ones() {
        for bad in ["v5", "v6", "v4", "v1", "ristretto", ""] {
            let e = ProtocolVersion::parse(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("supported: v2, v4.1"), "{msg}");
        }
        assert!(ProtocolVersion::from_route_prefix("/devshard/v5").is_err());
    }

    #[test]
    fn route_prefixes_name_their_version() {
        let p = ProtocolVersion::from_route_prefix;
        assert_eq!(p("/v1/devshard"), Ok(Some(ProtocolVersion::V2)));
        assert_eq!(p("/devshard/v4.1/"), Ok(Some(ProtocolVersion::V4_1)));
        assert_eq!(p("/proxy/devshard"), Ok(None));
    }

    #[test]
    fn serde_uses_the_name_and_refuses_unknown_ones() {
        let s = serde_json::to_string(&ProtocolVersion::V4_1).unwrap();
        assert_eq!(s, "\"v4.1\"");
        assert_eq!(
            serde_json::from_str::<ProtocolVersion>(&s).unwrap(),
            ProtocolVersion::V4_1
        );
        assert!(serde_json::from_str::<ProtocolVersion>("\"v5\"").is_err());
    }
}
