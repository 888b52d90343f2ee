//! The same checks run against both backends: real operations, and wrappers that break one
//! step on purpose to show the measuring loop refuses to report numbers for it.

use super::backend::{Kem, KeySizes, SigSizes, Signature};
use super::measure::{self, Plan};
use super::*;
use serde_json::Value;

fn plan() -> Plan {
    Plan {
        iterations: 3,
        warmup: 1,
        max_seconds: None,
        seconds_per_op: None,
        emit_samples: false,
    }
}

fn p(list: &[(&str, &str)]) -> Params {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Flips a bit of every shared secret decapsulation returns.
struct BadDecaps<K>(K);
impl<K: Kem> Kem for BadDecaps<K> {
    type Key = K::Key;
    fn keygen(&self) -> Result<Self::Key> {
        self.0.keygen()
    }
    fn encaps(&self, key: &Self::Key) -> Result<(Vec<u8>, Vec<u8>)> {
        self.0.encaps(key)
    }
    fn decaps(&self, key: &Self::Key, ct: &[u8]) -> Result<Vec<u8>> {
        let mut s = self.0.decaps(key, ct)?;
        s[0] ^= 1;
        Ok(s)
    }
    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes> {
        self.0.key_sizes(key)
    }
    fn notes(&self) -> Value {
        Value::Null
    }
}

/// Corrupts every signature it makes.
struct BadSigner<S>(S);
impl<S: Signature> Signature for BadSigner<S> {
    type Key = S::Key;
    fn keygen(&self) -> Result<Self::Key> {
        self.0.keygen()
    }
    fn sign(&self, key: &Self::Key, m: &[u8]) -> Result<Vec<u8>> {
        let mut s = self.0.sign(key, m)?;
        let i = s.len() / 3;
        s[i] ^= 0x10;
        Ok(s)
    }
    fn verify(&self, key: &Self::Key, m: &[u8], s: &[u8]) -> Result<bool> {
        self.0.verify(key, m, s)
    }
    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes> {
        self.0.key_sizes(key)
    }
    fn signature_sizes(&self, s: &[u8]) -> Result<SigSizes> {
        self.0.signature_sizes(s)
    }
    fn notes(&self) -> Value {
        Value::Null
    }
}

fn kem_case<K: Kem>(name: &str, make: impl Fn() -> K) {
    assert!(
        measure::kem(&make(), &plan()).is_ok(),
        "{name}: a correct KEM must pass"
    );
    let err = measure::kem(&BadDecaps(make()), &plan()).expect_err(name);
    assert!(
        matches!(&err, Error::Check(m) if m.contains("check failed")),
        "{name}: {err:?}"
    );
}

#[test]
fn kem_checks_pass_and_catch_a_wrong_secret() {
    kem_case("openssl ML-KEM-768", || {
        ossl::OsslKem::new("ML-KEM-768", &Params::new()).unwrap()
    });
    kem_case("openssl X25519MLKEM768", || {
        ossl::OsslKem::new("X25519MLKEM768", &Params::new()).unwrap()
    });
    kem_case("liboqs ML-KEM-768", || {
        oqs::OqsKem::new("ML-KEM-768", &Params::new(), None).unwrap()
    });
}

#[test]
fn signature_checks_pass_and_reject_corrupted_signatures() {
    let cases: Vec<(&str, &str, Params)> = vec![
        ("openssl", "ML-DSA-44", Params::new()),
        ("openssl", "ED25519", Params::new()),
        ("openssl", "EC", p(&[("curve", "P-256")])),
        ("openssl", "RSA", p(&[("bits", "2048"), ("padding", "pss")])),
        (
            "openssl",
            "RSA",
            p(&[("bits", "2048"), ("padding", "pkcs1")]),
        ),
        ("liboqs", "ML-DSA-44", Params::new()),
        ("liboqs", "Falcon-512", Params::new()),
    ];
    // With and without the key generation phase (--skip-keygen): the checks are the same.
    for ((backend, alg, params), skip) in cases
        .iter()
        .flat_map(|c| [(c.clone(), false), (c.clone(), true)])
    {
        let what = format!("{backend} {alg} {params:?} skip_keygen={skip}");
        let (ok, bad) = if backend == "openssl" {
            (
                measure::sig(&ossl::OsslSig::new(alg, &params).unwrap(), &plan(), skip),
                measure::sig(
                    &BadSigner(ossl::OsslSig::new(alg, &params).unwrap()),
                    &plan(),
                    skip,
                ),
            )
        } else {
            (
                measure::sig(
                    &oqs::OqsSig::new(alg, &params, None).unwrap(),
                    &plan(),
                    skip,
                ),
                measure::sig(
                    &BadSigner(oqs::OqsSig::new(alg, &params, None).unwrap()),
                    &plan(),
                    skip,
                ),
            )
        };
        assert!(ok.is_ok(), "{what}: {:?}", ok.err());
        let err = bad.expect_err(&what);
        assert!(
            matches!(&err, Error::Check(m) if m.contains("check failed")),
            "{what}: {err:?}"
        );
    }
}

#[test]
fn fixed_time_mode_checks_every_output_too() {
    // Each operation timed for its own seconds, the finished one running untimed on reused
    // inputs: a wrong secret or a corrupted signature is still caught.
    let fixed = Plan {
        iterations: 1_000_000,
        warmup: 0,
        max_seconds: None,
        seconds_per_op: Some(0.02),
        emit_samples: false,
    };
    let kem = || ossl::OsslKem::new("ML-KEM-768", &Params::new()).unwrap();
    assert!(measure::kem(&kem(), &fixed).is_ok());
    let err = measure::kem(&BadDecaps(kem()), &fixed).expect_err("a wrong secret");
    assert!(
        matches!(&err, Error::Check(m) if m.contains("check failed")),
        "{err:?}"
    );
    let sig = || oqs::OqsSig::new("ML-DSA-44", &Params::new(), None).unwrap();
    assert!(measure::sig(&sig(), &fixed, false).is_ok());
    let err = measure::sig(&BadSigner(sig()), &fixed, false).expect_err("a corrupted signature");
    assert!(
        matches!(&err, Error::Check(m) if m.contains("check failed")),
        "{err:?}"
    );
    let x = ossl::OsslKex::new("X25519", &Params::new()).unwrap();
    assert!(measure::kex(&x, &fixed).is_ok());
}

#[test]
fn key_agreements_derive_equal_secrets() {
    for (alg, params) in [
        ("X25519", Params::new()),
        ("X448", Params::new()),
        ("EC", p(&[("curve", "P-384")])),
        ("DH", p(&[("group", "ffdhe2048")])),
    ] {
        let x = ossl::OsslKex::new(alg, &params).unwrap();
        measure::kex(&x, &plan()).unwrap_or_else(|e| panic!("{alg}: {e}"));
    }
}

#[test]
fn computed_spki_equals_openssls_for_ml_kem() {
    // The encoding used for liboqs-only algorithms, checked against OpenSSL's own encoder.
    use openssl::pkey::PKey;
    let k = ossl::OsslKem::new("ML-KEM-768", &Params::new()).unwrap();
    let key: PKey<_> = k.keygen().unwrap();
    let raw = key.raw_public_key().unwrap();
    let oid = der::oid("2.16.840.1.101.3.4.4.2").unwrap();
    assert_eq!(der::spki(&oid, &raw), key.public_key_to_der().unwrap());
}

#[test]
fn bad_names_and_parameters_are_refused() {
    assert!(ossl::OsslKem::new("ML-KEM-769", &Params::new()).is_err());
    assert!(ossl::OsslKem::new("ED25519", &Params::new()).is_err());
    assert!(oqs::OqsKem::new("NotAKem", &Params::new(), None).is_err());
    assert!(oqs::OqsSig::new("ML-DSA-44", &p(&[("bits", "1")]), None).is_err());
    assert!(ossl::OsslSig::new("RSA", &p(&[("bits", "2048")])).is_err()); // padding missing
    assert!(ossl::OsslSig::new("EC", &p(&[("curve", "P-999")])).is_err());
    assert!(ossl::OsslKex::new("DH", &p(&[("group", "ffdhe1234")])).is_err());
    assert!(ossl::OsslSig::new("ML-DSA-44", &p(&[("curve", "P-256")])).is_err());
    assert!(parse_params(&["bits".into()]).is_err());
    assert!(parse_params(&["bits=1".into(), "BITS=2".into()]).is_err());
}
