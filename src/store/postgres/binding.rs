//! `tls-server-end-point` channel binding (RFC 5929 §4.1): the hash of the server's certificate,
//! with the hash function of the certificate's signature algorithm (SHA-256 for MD5 and SHA-1).
//! SCRAM-SHA-256-PLUS binds the authentication to this TLS session, so a man in the middle that
//! terminates TLS with another certificate cannot relay the exchange.
//!
//! The signature algorithm is read from the certificate's DER (`Certificate ::= SEQUENCE {
//! tbsCertificate, signatureAlgorithm AlgorithmIdentifier, … }`) by a few lines of TLV walking;
//! an algorithm without a defined hash (Ed25519, RSASSA-PSS with its hash in the parameters)
//! gives no binding, and tokio-postgres then authenticates without it.

use sha2::{Digest, Sha256, Sha384, Sha512};

/// The binding data of the certificate `der`, if its signature algorithm names a hash.
pub fn tls_server_end_point(der: &[u8]) -> Option<Vec<u8>> {
    let (cert, _) = tlv(der, SEQUENCE)?;
    let (_, rest) = tlv(cert, SEQUENCE)?;
    let (alg, _) = tlv(rest, SEQUENCE)?;
    let (oid, _) = tlv(alg, OID)?;
    Some(match hash_of(oid)? {
        Hash::Sha256 => Sha256::digest(der).to_vec(),
        Hash::Sha384 => Sha384::digest(der).to_vec(),
        Hash::Sha512 => Sha512::digest(der).to_vec(),
    })
}

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;

enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

/// The hash of a signature algorithm's OID (its DER content bytes).
fn hash_of(oid: &[u8]) -> Option<Hash> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
    let (prefix, last) = oid.split_at(oid.len().checked_sub(1)?);
    match (prefix, last) {
        // md5WithRSA (4), sha1WithRSA (5), sha256WithRSA (11), sha384 (12), sha512 (13).
        (RSA, [4 | 5 | 11]) => Some(Hash::Sha256),
        (RSA, [12]) => Some(Hash::Sha384),
        (RSA, [13]) => Some(Hash::Sha512),
        // ecdsa-with-SHA256 (2), SHA384 (3), SHA512 (4).
        (ECDSA, [2]) => Some(Hash::Sha256),
        (ECDSA, [3]) => Some(Hash::Sha384),
        (ECDSA, [4]) => Some(Hash::Sha512),
        // ecdsa-with-SHA1 (1.2.840.10045.4.1).
        ([0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04], [1]) => Some(Hash::Sha256),
        _ => None,
    }
}

/// The content of the DER element at the start of `input` with tag `tag`, and what follows it.
fn tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    if t != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ecdsa_sha256_certificate_binds_with_the_sha256_of_its_der() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = cert.der().to_vec();
        assert_eq!(
            tls_server_end_point(&der),
            Some(Sha256::digest(&der).to_vec())
        );
        assert_eq!(tls_server_end_point(&der[..der.len() / 2]), None);
        assert_eq!(tls_server_end_point(b"\x30\x00"), None);
    }

    #[test]
    fn hashes_follow_the_signature_algorithm() {
        let rsa = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
        let with = |last: u8| [&rsa[..], &[last]].concat();
        assert!(matches!(hash_of(&with(11)), Some(Hash::Sha256)));
        assert!(matches!(hash_of(&with(5)), Some(Hash::Sha256)));
        assert!(matches!(hash_of(&with(12)), Some(Hash::Sha384)));
        assert!(matches!(hash_of(&with(13)), Some(Hash::Sha512)));
        // RSASSA-PSS (10) and Ed25519 (1.3.101.112): no defined hash, no binding.
        assert!(hash_of(&with(10)).is_none());
        assert!(hash_of(&[0x2b, 0x65, 0x70]).is_none());
        assert!(hash_of(&[]).is_none());
    }
}
