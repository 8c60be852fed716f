//! [`ShortBytes`]: a record's hash field held inline when it is 32 bytes or fewer (every hash
//! the protocol makes), on the heap otherwise (a diff may carry any length; the state machine
//! keeps what it was given, byte for byte, as upstream does).
//!
//! Issue 16: a `Vec<u8>` hash cost 24 bytes in the record plus a 32-byte heap block, twice per
//! live inference record; this is 40 bytes and no allocation. It serializes exactly as the
//! `Vec<u8>` it replaced (a sequence of numbers in JSON), so snapshots written before it load.

use std::{fmt, ops::Deref};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest byte string held inline.
const INLINE: usize = 32;

/// An immutable byte string, inline up to [`INLINE`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum ShortBytes {
    /// `bytes[..len]`; the rest is zero.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// Longer than [`INLINE`].
    Heap(Box<[u8]>),
}

impl ShortBytes {
    /// A copy of `b`.
    pub fn new(b: &[u8]) -> ShortBytes {
        match u8::try_from(b.len()) {
            Ok(len) if b.len() <= INLINE => {
                let mut bytes = [0u8; INLINE];
                bytes[..b.len()].copy_from_slice(b);
                ShortBytes::Inline { len, bytes }
            }
            _ => ShortBytes::Heap(b.into()),
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ShortBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            ShortBytes::Heap(b) => b,
        }
    }
}

impl Default for ShortBytes {
    fn default() -> ShortBytes {
        ShortBytes::Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

impl Deref for ShortBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Vec<u8>> for ShortBytes {
    fn from(b: Vec<u8>) -> ShortBytes {
        if b.len() <= INLINE {
            ShortBytes::new(&b)
        } else {
            ShortBytes::Heap(b.into_boxed_slice())
        }
    }
}

impl PartialEq<Vec<u8>> for ShortBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl fmt::Debug for ShortBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl Serialize for ShortBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ShortBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ShortBytes, D::Error> {
        Vec::<u8>::deserialize(d).map(ShortBytes::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_reads_back_and_serializes_as_the_vec_it_replaced() {
        for len in [0usize, 1, 31, 32, 33, 200] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let b = ShortBytes::new(&v);
            assert_eq!(b.as_slice(), v.as_slice(), "length {len}");
            assert_eq!(matches!(b, ShortBytes::Inline { .. }), len <= INLINE);
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(json, serde_json::to_string(&v).unwrap());
            assert_eq!(serde_json::from_str::<ShortBytes>(&json).unwrap(), b);
        }
        assert_eq!(ShortBytes::default(), ShortBytes::new(&[]));
    }

    #[test]
    fn it_is_smaller_than_a_vec_and_its_heap_block() {
        assert!(std::mem::size_of::<ShortBytes>() <= 40);
    }
}
