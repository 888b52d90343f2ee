//! Reading the PEM files `tls certs` writes into what rustls needs: certificate chains, and
//! private keys as rustls signing keys (the provider's own loader for the keys it knows;
//! liboqs for the rest, from the PKCS#8 structure found by the algorithm's OID).
//!
//! PKCS#8 private keys of liboqs algorithms (RFC 5958 OneAsymmetricKey): the privateKey
//! OCTET STRING holds liboqs's raw secret key, and the optional publicKey [1] its raw
//! public key. ML-DSA keys written by OpenSSL hold, inside that OCTET STRING, the seed and
//! the expanded key (`SEQUENCE { OCTET STRING seed, OCTET STRING expanded }`, or the
//! expanded key alone): the expanded key is FIPS 204's secret key encoding, which is what
//! liboqs signs with.

use super::oqs::{self, OqsSigningKey};
use crate::out::Result;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::SigningKey;
use std::path::Path;
use std::sync::Arc;

pub fn certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| crate::err!(Io, "cannot read {flag} {}: {e}", path.display()))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            crate::err!(
                Usage,
                "{flag} {}: not PEM certificates: {e}",
                path.display()
            )
        })?;
    if certs.is_empty() {
        crate::bail!(Usage, "{flag} {} holds no certificate", path.display());
    }
    Ok(certs)
}

pub fn private_key(path: &Path, flag: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| crate::err!(Io, "cannot read {flag} {}: {e}", path.display()))
}

/// A DER element: (tag, contents, the rest after it).
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The parts of a PKCS#8 key pqlab reads: algorithm OID contents, privateKey contents, and
/// publicKey contents when present.
type Pkcs8Parts<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>);

fn pkcs8_parts(der: &[u8]) -> Option<Pkcs8Parts<'_>> {
    let (0x30, body, _) = element(der)? else {
        return None;
    };
    let (0x02, _version, rest) = element(body)? else {
        return None;
    };
    let (0x30, alg, rest) = element(rest)? else {
        return None;
    };
    let (0x06, oid, _) = element(alg)? else {
        return None;
    };
    let (0x04, private, mut rest) = element(rest)? else {
        return None;
    };
    let mut public = None;
    while let Some((tag, contents, more)) = element(rest) {
        if tag == 0x81 {
            // [1] IMPLICIT BIT STRING: the unused-bits byte first.
            public = contents.split_first().map(|(_, key)| key);
        }
        rest = more;
    }
    Some((oid, private, public))
}

/// The raw secret key inside a PKCS#8 privateKey of `alg`.
fn secret_bytes(alg: &oqs::SigAlg, private: &[u8]) -> Vec<u8> {
    if alg.liboqs.starts_with("ML-DSA-") {
        // OpenSSL's encodings: SEQUENCE { seed, expanded } or the expanded key alone.
        if let Some((0x30, both, _)) = element(private) {
            if let Some((0x04, _seed, rest)) = element(both) {
                if let Some((0x04, expanded, _)) = element(rest) {
                    return expanded.to_vec();
                }
            }
        }
        if let Some((0x04, expanded, _)) = element(private) {
            return expanded.to_vec();
        }
    }
    private.to_vec()
}

/// A liboqs signing key, if this PKCS#8 key is of an algorithm of the liboqs table.
pub fn oqs_signing_key(key: &PrivateKeyDer<'_>) -> Result<Option<Arc<dyn SigningKey>>> {
    let PrivateKeyDer::Pkcs8(pkcs8) = key else {
        return Ok(None);
    };
    let Some((oid, private, public)) = pkcs8_parts(pkcs8.secret_pkcs8_der()) else {
        crate::bail!(
            Usage,
            "the private key is not a PKCS#8 structure pqlab can read"
        );
    };
    for alg in oqs::SIGS {
        let want = crate::primitives::der::oid(alg.oid)?;
        if want.get(2..) == Some(oid) {
            let secret = secret_bytes(alg, private);
            let key = OqsSigningKey::new(*alg, secret, public.unwrap_or_default().to_vec())?;
            return Ok(Some(Arc::new(key)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs8_parts_reads_key_and_optional_public_key() {
        let oid = crate::primitives::der::oid("1.3.9999.8.1.3").unwrap();
        let plain = crate::primitives::der::pkcs8(&oid, b"secret");
        let (o, sk, pk) = pkcs8_parts(&plain).unwrap();
        assert_eq!((o, sk, pk), (&oid[2..], &b"secret"[..], None));
        // With a [1] public key appended (OneAsymmetricKey v2).
        let mut body = plain[2..].to_vec();
        body.extend_from_slice(&[0x81, 4, 0, b'p', b'u', b'b']);
        let mut v2 = vec![0x30, body.len() as u8];
        v2.extend(body);
        assert_eq!(pkcs8_parts(&v2).unwrap().2, Some(&b"pub"[..]));
        assert!(pkcs8_parts(b"\x30\x05garbage").is_none());
    }
}
