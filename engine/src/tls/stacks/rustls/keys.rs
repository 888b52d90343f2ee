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
use crate::primitives::der::read as element;
use crate::tls::pki::certkey::pkcs8_parts;
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
