//! Serde helpers for Go `[]byte` JSON fields: standard base64 with `=` padding (docs/protocol.md §0).
//!
//! Decoding follows Go `encoding/json`: `null` decodes to empty bytes, padding is required, and
//! non-zero trailing bits are tolerated (Go's `StdEncoding` is not strict). Optional byte fields
//! decode `null` and `""` to `None`, because every upstream consumer tests `len(x) > 0`.
//!
//! Use with `#[serde(with = "b64::bytes")]` (and `opt_bytes`, `seq`, `opt_map`).

use std::{collections::BTreeMap, fmt};

use base64::{
    alphabet,
    engine::{
        general_purpose::{GeneralPurpose, GeneralPurposeConfig},
        DecodePaddingMode,
    },
    Engine,
};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// Standard alphabet, padded output, padding required on input, trailing bits tolerated.
const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Standard padded base64 of `bytes` (Go `base64.StdEncoding.EncodeToString`).
pub fn encode(bytes: &[u8]) -> String {
    ENGINE.encode(bytes)
}

/// Decodes standard padded base64.
pub fn decode(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    ENGINE.decode(s)
}

/// Serialises borrowed bytes as one base64 string.
struct B64Ref<'a>(&'a [u8]);

impl Serialize for B64Ref<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(self.0))
    }
}

/// Deserialises one base64 string, `null` giving empty bytes.
struct B64Buf(Vec<u8>);

impl<'de> Deserialize<'de> for B64Buf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(B64Visitor).map(B64Buf)
    }
}

struct B64Visitor;

impl<'de> de::Visitor<'de> for B64Visitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a standard base64 string or null")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        decode(v).map_err(|e| E::custom(format_args!("invalid base64: {e}")))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Vec<u8>, E> {
        Ok(Vec::new())
    }

    fn visit_none<E: de::Error>(self) -> Result<Vec<u8>, E> {
        Ok(Vec::new())
    }
}

/// `Vec<u8>` ⇄ base64 string (`null` → empty).
pub mod bytes {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        B64Ref(v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        B64Buf::deserialize(d).map(|b| b.0)
    }
}

/// `Option<Vec<u8>>` ⇄ base64 string; `null`, `""` and a missing field decode to `None`.
/// Pair with `skip_serializing_if = "b64::is_absent"` to get Go's `omitempty`.
pub mod opt_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => B64Ref(b).serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let b = B64Buf::deserialize(d)?.0;
        Ok((!b.is_empty()).then_some(b))
    }
}

/// `Vec<Vec<u8>>` ⇄ array of base64 strings (`null` → empty).
pub mod seq {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|b| B64Ref(b)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let items = Option::<Vec<B64Buf>>::deserialize(d)?.unwrap_or_default();
        Ok(items.into_iter().map(|b| b.0).collect())
    }
}

/// `Option<BTreeMap<u32, Vec<u8>>>` ⇄ object with decimal-string keys and base64 values
/// (Go `map[uint32][]byte`); `null` ⇄ `None`.
pub mod opt_map {
    use super::*;

    pub fn serialize<S: Serializer>(
        v: &Option<BTreeMap<u32, Vec<u8>>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(m) => s.collect_map(m.iter().map(|(k, b)| (k, B64Ref(b)))),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<u32, Vec<u8>>>, D::Error> {
        let m = Option::<BTreeMap<u32, B64Buf>>::deserialize(d)?;
        Ok(m.map(|m| m.into_iter().map(|(k, b)| (k, b.0)).collect()))
    }
}

/// `skip_serializing_if` predicate for optional byte fields (Go `omitempty` on `[]byte`).
pub fn is_absent(v: &Option<Vec<u8>>) -> bool {
    v.as_ref().is_none_or(|b| b.is_empty())
}

/// `deserialize_with` for fields where Go writes `null` for an empty slice or map.
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_pads() {
        assert_eq!(encode(b"ab"), "YWI=");
        assert_eq!(decode("YWI=").unwrap(), b"ab");
        assert!(decode("YWI").is_err(), "padding is required");
        assert!(decode("YW-=").is_err(), "url alphabet is rejected");
        // Non-canonical trailing bits are accepted like Go's StdEncoding.
        assert_eq!(decode("YWJ=").unwrap(), b"ab");
    }
}
