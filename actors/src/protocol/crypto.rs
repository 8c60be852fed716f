//! secp256k1 signing and recovery, `gonka` bech32 addresses and SHA-256 (docs/protocol.md §0, §2).
//!
//! `sign(m)` is recoverable ECDSA over `sha256(m)` (RFC 6979, low-S) serialised as
//! `R(32) ‖ S(32) ‖ V(1)` with `V ∈ {0,1}`. Verification is always recover-and-compare; successful
//! recoveries are memoised ([`super::recovered`]).

use std::fmt;

use ripemd::Ripemd160;
use secp256k1::{
    ecdsa::{RecoverableSignature, RecoveryId},
    Message, PublicKey, SecretKey, SECP256K1,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::recovered;

/// Human-readable part of every address on the network.
pub const ADDRESS_HRP: &str = "gonka";
/// Length of a serialised recoverable signature.
pub const SIGNATURE_LEN: usize = 65;

/// Errors of key parsing, signing and recovery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("invalid private key: {0}")]
    InvalidPrivateKey(String),
    #[error("signature must be 65 bytes, got {0}")]
    BadSignatureLength(usize),
    #[error("invalid recovery id {0}")]
    BadRecoveryId(u8),
    #[error("recover address: {0}")]
    Recover(String),
    #[error("signature recovers to {recovered}, expected {expected}")]
    WrongSigner {
        recovered: Address,
        expected: Address,
    },
    #[error("invalid address: {0}")]
    InvalidAddress(String),
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A bech32 `gonka1…` account address.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Address(String);

impl Address {
    /// Address of a compressed (33-byte) public key: `bech32(gonka, ripemd160(sha256(pk)))`.
    pub fn from_public_key(pk: &PublicKey) -> Address {
        let sha = sha256(&pk.serialize());
        let rip: [u8; 20] = Ripemd160::digest(sha).into();
        Address::from_account_bytes(&rip)
    }

    fn from_account_bytes(bytes: &[u8; 20]) -> Address {
        // `Hrp::parse` of a constant lowercase ASCII string cannot fail; keep a typed fallback.
        match bech32::Hrp::parse(ADDRESS_HRP)
            .ok()
            .and_then(|hrp| bech32::encode::<bech32::Bech32>(hrp, bytes).ok())
        {
            Some(s) => Address(s),
            None => Address(format!("{ADDRESS_HRP}1invalid")),
        }
    }

    /// Parses and validates a `gonka1…` string (checksum and prefix).
    pub fn parse(s: &str) -> Result<Address, CryptoError> {
        let (hrp, data) =
            bech32::decode(s).map_err(|e| CryptoError::InvalidAddress(format!("{s}: {e}")))?;
        if hrp.as_str() != ADDRESS_HRP || data.len() != 20 {
            return Err(CryptoError::InvalidAddress(format!(
                "{s}: expected a {ADDRESS_HRP} address of 20 bytes"
            )));
        }
        Ok(Address(s.to_ascii_lowercase()))
    }

    /// Builds an address from a string without validation (for wire data compared verbatim).
    pub fn unchecked(s: impl Into<String>) -> Address {
        Address(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Short form for logs: the last 8 characters (as the reference gateway prints hosts).
    pub fn short(&self) -> &str {
        let n = self.0.len();
        self.0.get(n.saturating_sub(8)..).unwrap_or(&self.0)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({})", self.0)
    }
}

/// A 65-byte `R ‖ S ‖ V` signature.
pub type Signature = [u8; SIGNATURE_LEN];

/// A secp256k1 private key with its derived address. `Debug` never prints the secret.
#[derive(Clone)]
pub struct SigningKey {
    secret: SecretKey,
    public: PublicKey,
    address: Address,
}

impl SigningKey {
    /// From 32 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<SigningKey, CryptoError> {
        let secret = SecretKey::from_slice(bytes)
            .map_err(|e| CryptoError::InvalidPrivateKey(e.to_string()))?;
        let public = PublicKey::from_secret_key(SECP256K1, &secret);
        let address = Address::from_public_key(&public);
        Ok(SigningKey {
            secret,
            public,
            address,
        })
    }

    /// From hex (optionally `0x`-prefixed, surrounding whitespace ignored).
    pub fn from_hex(s: &str) -> Result<SigningKey, CryptoError> {
        let t = s.trim();
        let t = t.strip_prefix("0x").unwrap_or(t);
        let bytes = hex::decode(t)
            .map_err(|_| CryptoError::InvalidPrivateKey("not 64 hex characters".into()))?;
        if bytes.len() != 32 {
            return Err(CryptoError::InvalidPrivateKey(format!(
                "expected 32 bytes, got {}",
                bytes.len()
            )));
        }
        SigningKey::from_bytes(&bytes)
    }

    /// A deterministic key derived from a seed string and an index (simulator and tests).
    pub fn derive(seed: &str, index: u32) -> SigningKey {
        let mut counter: u32 = 0;
        loop {
            let mut h = Sha256::new();
            h.update(b"devshard-sim-key");
            h.update(seed.as_bytes());
            h.update(index.to_be_bytes());
            h.update(counter.to_be_bytes());
            let digest: [u8; 32] = h.finalize().into();
            if let Ok(k) = SigningKey::from_bytes(&digest) {
                return k;
            }
            counter = counter.wrapping_add(1);
        }
    }

    pub fn address(&self) -> &Address {
        &self.address
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Hex of the secret (for the simulator's printout only; never logged by the gateway).
    pub fn secret_hex(&self) -> String {
        hex::encode(self.secret.secret_bytes())
    }

    /// `sign(m)`: recoverable ECDSA over `sha256(m)`.
    pub fn sign(&self, message: &[u8]) -> Signature {
        self.sign_digest(sha256(message))
    }

    /// `sign(m)`, with the signature's recovery remembered ([`recovered`]) for a process that
    /// checks it again: the cost ledger replays the escrow's own diffs with their user signature
    /// verified. A recoverable signature this key made recovers to this key's address, so the
    /// memo's answer is the one recovery would give.
    pub fn sign_remembered(&self, message: &[u8]) -> Signature {
        let digest = sha256(message);
        let sig = self.sign_digest(digest);
        recovered::remember(digest, &sig, &self.address);
        sig
    }

    /// Signs a 32-byte digest as is.
    pub fn sign_digest(&self, digest: [u8; 32]) -> Signature {
        let sig = SECP256K1.sign_ecdsa_recoverable(&Message::from_digest(digest), &self.secret);
        let (recid, compact) = sig.serialize_compact();
        let mut out = [0u8; SIGNATURE_LEN];
        out[..64].copy_from_slice(&compact);
        out[64] = i32::from(recid) as u8;
        out
    }

    /// Cosmos-style signature over a 32-byte digest: 64 bytes `R ‖ S`, S normalised to low-S
    /// (no recovery byte; the verifier knows the public key from the tx's signer info).
    pub fn sign_digest_compact(&self, digest: [u8; 32]) -> [u8; 64] {
        let mut sig = SECP256K1.sign_ecdsa(&Message::from_digest(digest), &self.secret);
        sig.normalize_s();
        sig.serialize_compact()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.address)
    }
}

/// `recover(m, sig)`: the address whose key signed `sha256(m)`.
pub fn recover_address(message: &[u8], sig: &[u8]) -> Result<Address, CryptoError> {
    recover_address_digest(sha256(message), sig)
}

/// Recovery over a 32-byte digest.
pub fn recover_address_digest(digest: [u8; 32], sig: &[u8]) -> Result<Address, CryptoError> {
    if sig.len() != SIGNATURE_LEN {
        return Err(CryptoError::BadSignatureLength(sig.len()));
    }
    if let Some(signer) = recovered::lookup(digest, sig) {
        recovered::count(true);
        return Ok(signer);
    }
    recovered::count(false);
    let v = sig[64];
    let recid = RecoveryId::try_from(i32::from(v)).map_err(|_| CryptoError::BadRecoveryId(v))?;
    let rs = RecoverableSignature::from_compact(&sig[..64], recid)
        .map_err(|e| CryptoError::Recover(e.to_string()))?;
    let pk = SECP256K1
        .recover_ecdsa(&Message::from_digest(digest), &rs)
        .map_err(|e| CryptoError::Recover(e.to_string()))?;
    let signer = Address::from_public_key(&pk);
    recovered::remember(digest, sig, &signer);
    Ok(signer)
}

/// Recover-and-compare: `Ok` iff `sig` over `message` recovers to `expected`.
pub fn verify(message: &[u8], sig: &[u8], expected: &Address) -> Result<(), CryptoError> {
    let recovered = recover_address(message, sig)?;
    if &recovered == expected {
        Ok(())
    } else {
        Err(CryptoError::WrongSigner {
            recovered,
            expected: expected.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_signature_is_in_the_memo_and_recovers_to_its_signer_without_it() {
        let k = SigningKey::derive("remembered", 3);
        let message = b"a diff's signed content";
        let sig = k.sign_remembered(message);
        let digest = sha256(message);
        assert_eq!(recovered::lookup(digest, &sig), Some(k.address().clone()));
        let recid = RecoveryId::try_from(i32::from(sig[64])).unwrap();
        let rs = RecoverableSignature::from_compact(&sig[..64], recid).unwrap();
        let pk = SECP256K1
            .recover_ecdsa(&Message::from_digest(digest), &rs)
            .unwrap();
        assert_eq!(Address::from_public_key(&pk), *k.address());
        let plain = k.sign(b"a request digest");
        assert_eq!(recovered::lookup(sha256(b"a request digest"), &plain), None);
    }

    #[test]
    fn sign_then_recover_gives_the_signer() {
        let k = SigningKey::derive("t", 1);
        let sig = k.sign(b"hello");
        assert!(sig[64] <= 1);
        assert_eq!(recover_address(b"hello", &sig).unwrap(), *k.address());
        assert!(verify(b"hellp", &sig, k.address()).is_err());
    }

    #[test]
    fn address_round_trips_through_parse() {
        let k = SigningKey::derive("t", 2);
        assert_eq!(Address::parse(k.address().as_str()).unwrap(), *k.address());
        assert!(Address::parse("cosmos1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqnrql8a").is_err());
    }
}
