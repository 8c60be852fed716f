//! `Secret`: a string that never shows itself. `Debug` and `Display` print `***`, so a secret
//! can sit in a config struct that is logged or debug-printed without leaking; the value is read
//! only through [`Secret::expose`], at the one place that needs it (key parsing, auth compare).

use std::fmt;

use serde::{Deserialize, Deserializer};

/// What `Debug`/`Display` print instead of the value.
pub const REDACTED: &str = "***";

/// A secret string (private key hex, admin key, API key).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value (surrounding whitespace is kept; callers trim where it matters).
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value. Call sites are few and obvious: keep it that way.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the value is empty or blank.
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// Constant-time equality of two secrets (and of their lengths): both sides are hashed with
/// SHA-256 first, then the digests are compared with a branch-free fold, so neither the position
/// of the first difference nor the expected length leaks through timing.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let da = Sha256::digest(a);
    let db = Sha256::digest(b);
    let diff = da
        .iter()
        .zip(db.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_are_redacted() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), REDACTED);
        assert_eq!(format!("{s}"), REDACTED);
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
