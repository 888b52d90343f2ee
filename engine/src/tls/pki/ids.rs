//! TLS identifiers of the liboqs algorithms pqlab carries into handshakes: the code points
//! and OIDs oqs-provider 0.10.0 uses (its ALGORITHMS.md), ML-KEM and ML-DSA on their IANA
//! code points and NIST OIDs. The certificate builder takes the OIDs from here, the rustls
//! stack the code points; the lab's catalogue holds the same values, and
//! tests/test_catalog_engine.py checks that the two agree.

/// A liboqs signature algorithm as TLS names it.
#[derive(Clone, Copy, Debug)]
pub struct SigAlg {
    /// The name the stack lists and `--sigalgs` takes (oqs-provider's TLS name).
    pub name: &'static str,
    /// liboqs's method name (also the key spec of `tls certs`).
    pub liboqs: &'static str,
    pub code: u16,
    /// The OID of the key and of the signature (oqs-provider uses one for both).
    pub oid: &'static str,
}

/// A liboqs KEM as a TLS group.
#[derive(Clone, Copy, Debug)]
pub struct KemAlg {
    pub name: &'static str,
    pub liboqs: &'static str,
    pub code: u16,
}

macro_rules! sigs {
    ($($name:literal, $liboqs:literal, $code:literal, $oid:literal;)*) => {
        &[$(SigAlg { name: $name, liboqs: $liboqs, code: $code, oid: $oid }),*]
    };
}

/// Every liboqs signature the stack carries: ML-DSA on its IANA code points, the
/// candidates on oqs-provider 0.10.0's (ALGORITHMS.md of that release).
pub const SIGS: &[SigAlg] = sigs![
    "mldsa44", "ML-DSA-44", 0x0904, "2.16.840.1.101.3.4.3.17";
    "mldsa65", "ML-DSA-65", 0x0905, "2.16.840.1.101.3.4.3.18";
    "mldsa87", "ML-DSA-87", 0x0906, "2.16.840.1.101.3.4.3.19";
    "falcon512", "Falcon-512", 0xfed7, "1.3.9999.3.11";
    "falcon1024", "Falcon-1024", 0xfeda, "1.3.9999.3.14";
    "falconpadded512", "Falcon-padded-512", 0xfedc, "1.3.9999.3.16";
    "falconpadded1024", "Falcon-padded-1024", 0xfedf, "1.3.9999.3.19";
    "sphincssha2128fsimple", "SPHINCS+-SHA2-128f-simple", 0xfeb3, "1.3.9999.6.4.13";
    "sphincssha2128ssimple", "SPHINCS+-SHA2-128s-simple", 0xfeb6, "1.3.9999.6.4.16";
    "sphincssha2192fsimple", "SPHINCS+-SHA2-192f-simple", 0xfeb9, "1.3.9999.6.5.10";
    "sphincssha2192ssimple", "SPHINCS+-SHA2-192s-simple", 0xfebb, "1.3.9999.6.5.12";
    "sphincssha2256fsimple", "SPHINCS+-SHA2-256f-simple", 0xfebd, "1.3.9999.6.6.10";
    "sphincssha2256ssimple", "SPHINCS+-SHA2-256s-simple", 0xfec0, "1.3.9999.6.6.12";
    "sphincsshake128fsimple", "SPHINCS+-SHAKE-128f-simple", 0xfec2, "1.3.9999.6.7.13";
    "sphincsshake128ssimple", "SPHINCS+-SHAKE-128s-simple", 0xfec5, "1.3.9999.6.7.16";
    "sphincsshake192fsimple", "SPHINCS+-SHAKE-192f-simple", 0xfec8, "1.3.9999.6.8.10";
    "sphincsshake192ssimple", "SPHINCS+-SHAKE-192s-simple", 0xfeca, "1.3.9999.6.8.12";
    "sphincsshake256fsimple", "SPHINCS+-SHAKE-256f-simple", 0xfecc, "1.3.9999.6.9.10";
    "sphincsshake256ssimple", "SPHINCS+-SHAKE-256s-simple", 0xfece, "1.3.9999.6.9.12";
    "mayo1", "MAYO-1", 0xff32, "1.3.9999.8.1.3";
    "mayo2", "MAYO-2", 0xff33, "1.3.9999.8.2.3";
    "mayo3", "MAYO-3", 0xff34, "1.3.9999.8.3.3";
    "mayo5", "MAYO-5", 0xff35, "1.3.9999.8.5.3";
    "CROSSrsdp128balanced", "cross-rsdp-128-balanced", 0xff22, "1.3.6.1.4.1.62245.2.1.1.2";
    "CROSSrsdp128fast", "cross-rsdp-128-fast", 0xff23, "1.3.6.1.4.1.62245.2.1.2.2";
    "CROSSrsdp128small", "cross-rsdp-128-small", 0xff24, "1.3.6.1.4.1.62245.2.1.3.2";
    "CROSSrsdp192balanced", "cross-rsdp-192-balanced", 0xff25, "1.3.6.1.4.1.62245.2.1.4.2";
    "CROSSrsdp192fast", "cross-rsdp-192-fast", 0xff26, "1.3.6.1.4.1.62245.2.1.5.2";
    "CROSSrsdp192small", "cross-rsdp-192-small", 0xff27, "1.3.6.1.4.1.62245.2.1.6.2";
    "CROSSrsdp256small", "cross-rsdp-256-small", 0xff28, "1.3.6.1.4.1.62245.2.1.9.2";
    "CROSSrsdpg128balanced", "cross-rsdpg-128-balanced", 0xff29, "1.3.6.1.4.1.62245.2.1.10.2";
    "CROSSrsdpg128fast", "cross-rsdpg-128-fast", 0xff2a, "1.3.6.1.4.1.62245.2.1.11.2";
    "CROSSrsdpg128small", "cross-rsdpg-128-small", 0xff2b, "1.3.6.1.4.1.62245.2.1.12.2";
    "CROSSrsdpg192balanced", "cross-rsdpg-192-balanced", 0xff2c, "1.3.6.1.4.1.62245.2.1.13.2";
    "CROSSrsdpg192fast", "cross-rsdpg-192-fast", 0xff2d, "1.3.6.1.4.1.62245.2.1.14.2";
    "CROSSrsdpg192small", "cross-rsdpg-192-small", 0xff2e, "1.3.6.1.4.1.62245.2.1.15.2";
    "CROSSrsdpg256balanced", "cross-rsdpg-256-balanced", 0xff2f, "1.3.6.1.4.1.62245.2.1.16.2";
    "CROSSrsdpg256fast", "cross-rsdpg-256-fast", 0xff30, "1.3.6.1.4.1.62245.2.1.17.2";
    "CROSSrsdpg256small", "cross-rsdpg-256-small", 0xff31, "1.3.6.1.4.1.62245.2.1.18.2";
    "OV_Is", "OV-Is", 0xff0a, "1.3.9999.9.1.1";
    "OV_Ip", "OV-Ip", 0xff0b, "1.3.9999.9.2.1";
    "OV_III", "OV-III", 0xff0c, "1.3.9999.9.3.1";
    "OV_V", "OV-V", 0xff0d, "1.3.9999.9.4.1";
    "OV_Is_pkc", "OV-Is-pkc", 0xff0e, "1.3.9999.9.5.1";
    "OV_Ip_pkc", "OV-Ip-pkc", 0xff0f, "1.3.9999.9.6.1";
    "OV_III_pkc", "OV-III-pkc", 0xff10, "1.3.9999.9.7.1";
    "OV_V_pkc", "OV-V-pkc", 0xff11, "1.3.9999.9.8.1";
    "OV_Is_pkc_skc", "OV-Is-pkc-skc", 0xff12, "1.3.9999.9.9.1";
    "OV_Ip_pkc_skc", "OV-Ip-pkc-skc", 0xff13, "1.3.9999.9.10.1";
    "OV_III_pkc_skc", "OV-III-pkc-skc", 0xff14, "1.3.9999.9.11.1";
    "OV_V_pkc_skc", "OV-V-pkc-skc", 0xff15, "1.3.9999.9.12.1";
];

/// Every liboqs KEM the stack carries as a group on its own: ML-KEM on the IANA code
/// points, BIKE and FrodoKEM on oqs-provider's. (Classic McEliece keys of 261 KB and more
/// do not fit a TLS key share, whose length field is 16 bits; HQC is not enabled in the
/// vendored liboqs 0.13 build.)
pub const KEMS: &[KemAlg] = &[
    KemAlg {
        name: "MLKEM512",
        liboqs: "ML-KEM-512",
        code: 0x0200,
    },
    KemAlg {
        name: "MLKEM768",
        liboqs: "ML-KEM-768",
        code: 0x0201,
    },
    KemAlg {
        name: "MLKEM1024",
        liboqs: "ML-KEM-1024",
        code: 0x0202,
    },
    KemAlg {
        name: "bikel1",
        liboqs: "BIKE-L1",
        code: 0xfe10,
    },
    KemAlg {
        name: "bikel3",
        liboqs: "BIKE-L3",
        code: 0xfe13,
    },
    KemAlg {
        name: "bikel5",
        liboqs: "BIKE-L5",
        code: 0xfe16,
    },
    KemAlg {
        name: "frodo640aes",
        liboqs: "FrodoKEM-640-AES",
        code: 0xfe00,
    },
    KemAlg {
        name: "frodo640shake",
        liboqs: "FrodoKEM-640-SHAKE",
        code: 0xfe03,
    },
    KemAlg {
        name: "frodo976aes",
        liboqs: "FrodoKEM-976-AES",
        code: 0xfe06,
    },
    KemAlg {
        name: "frodo976shake",
        liboqs: "FrodoKEM-976-SHAKE",
        code: 0xfe09,
    },
    KemAlg {
        name: "frodo1344aes",
        liboqs: "FrodoKEM-1344-AES",
        code: 0xfe0c,
    },
    KemAlg {
        name: "frodo1344shake",
        liboqs: "FrodoKEM-1344-SHAKE",
        code: 0xfe0f,
    },
];
