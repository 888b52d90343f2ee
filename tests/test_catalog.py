"""The catalogue's data against the standards' own tables, and name resolution.

The FIPS tables below are typed from the standards (FIPS 203 table 3, FIPS 204 table 2,
FIPS 205 table 2), independently of data/algorithms.toml, so a wrong catalogue entry fails.
"""

from __future__ import annotations

import re

import pytest

from pqlab import catalog
from pqlab.errors import UserError

# FIPS 203, table 3: encapsulation key, decapsulation key, ciphertext, shared secret (bytes).
FIPS_203 = {
    "ML-KEM-512": (1, 800, 1632, 768, 32),
    "ML-KEM-768": (3, 1184, 2400, 1088, 32),
    "ML-KEM-1024": (5, 1568, 3168, 1568, 32),
}
# FIPS 204, table 2 (and table 1 for the category): public key, private key, signature.
FIPS_204 = {
    "ML-DSA-44": (2, 1312, 2560, 2420),
    "ML-DSA-65": (3, 1952, 4032, 3309),
    "ML-DSA-87": (5, 2592, 4896, 4627),
}
# FIPS 205, table 2: n, security category, public key (2n), private key (4n), signature.
FIPS_205 = {
    "128s": (16, 1, 7856),
    "128f": (16, 1, 17088),
    "192s": (24, 3, 16224),
    "192f": (24, 3, 35664),
    "256s": (32, 5, 29792),
    "256f": (32, 5, 49856),
}
# OIDs from NIST's Computer Security Objects Register (2.16.840.1.101.3.4.{4,3}.x).
FIPS_OIDS = {
    "ML-KEM-512": "2.16.840.1.101.3.4.4.1",
    "ML-KEM-768": "2.16.840.1.101.3.4.4.2",
    "ML-KEM-1024": "2.16.840.1.101.3.4.4.3",
    "ML-DSA-44": "2.16.840.1.101.3.4.3.17",
    "ML-DSA-65": "2.16.840.1.101.3.4.3.18",
    "ML-DSA-87": "2.16.840.1.101.3.4.3.19",
    "SLH-DSA-SHA2-128s": "2.16.840.1.101.3.4.3.20",
    "SLH-DSA-SHA2-128f": "2.16.840.1.101.3.4.3.21",
    "SLH-DSA-SHA2-192s": "2.16.840.1.101.3.4.3.22",
    "SLH-DSA-SHA2-192f": "2.16.840.1.101.3.4.3.23",
    "SLH-DSA-SHA2-256s": "2.16.840.1.101.3.4.3.24",
    "SLH-DSA-SHA2-256f": "2.16.840.1.101.3.4.3.25",
    "SLH-DSA-SHAKE-128s": "2.16.840.1.101.3.4.3.26",
    "SLH-DSA-SHAKE-128f": "2.16.840.1.101.3.4.3.27",
    "SLH-DSA-SHAKE-192s": "2.16.840.1.101.3.4.3.28",
    "SLH-DSA-SHAKE-192f": "2.16.840.1.101.3.4.3.29",
    "SLH-DSA-SHAKE-256s": "2.16.840.1.101.3.4.3.30",
    "SLH-DSA-SHAKE-256f": "2.16.840.1.101.3.4.3.31",
}
# IANA TLS registries (RFC 8446, RFC 7919, draft-ietf-tls-mlkem / -ecdhe-mlkem, ML-DSA draft).
IANA_GROUPS = {
    "X25519": 0x001D, "X448": 0x001E, "ECDH-P256": 0x0017, "ECDH-P384": 0x0018,
    "ECDH-P521": 0x0019, "FFDHE-2048": 0x0100, "FFDHE-3072": 0x0101, "FFDHE-4096": 0x0102,
    "ML-KEM-512": 0x0200, "ML-KEM-768": 0x0201, "ML-KEM-1024": 0x0202,
    "SecP256r1MLKEM768": 0x11EB, "X25519MLKEM768": 0x11EC, "SecP384r1MLKEM1024": 0x11ED,
}  # fmt: skip
IANA_SIGSCHEMES = {
    "RSA-2048": 0x0804, "RSA-2048-PKCS1": 0x0401, "ECDSA-P256": 0x0403, "ECDSA-P384": 0x0503,
    "ECDSA-P521": 0x0603, "Ed25519": 0x0807, "Ed448": 0x0808, "ML-DSA-44": 0x0904,
    "ML-DSA-65": 0x0905, "ML-DSA-87": 0x0906,
}  # fmt: skip


def test_ml_kem_sizes_are_fips_203():
    for name, (level, ek, dk, ct, ss) in FIPS_203.items():
        a = catalog.resolve(name)
        assert a.nist_level == level, name
        assert a.sizes == {"public_key": ek, "secret_key": dk, "ciphertext": ct,
                           "shared_secret": ss}, name  # fmt: skip


def test_ml_dsa_sizes_are_fips_204():
    for name, (level, pk, sk, sig) in FIPS_204.items():
        a = catalog.resolve(name)
        assert a.nist_level == level, name
        assert a.sizes == {"public_key": pk, "secret_key": sk, "signature": sig}, name


def test_all_twelve_slh_dsa_sets_are_fips_205():
    slh = [a for a in catalog.all_algorithms("sig") if a.family == "SLH-DSA"]
    assert sorted(a.name for a in slh) == sorted(
        f"SLH-DSA-{h}-{p}" for h in ("SHA2", "SHAKE") for p in FIPS_205
    )
    for a in slh:
        n, level, sig = FIPS_205[a.name.rsplit("-", 1)[1]]
        assert a.nist_level == level, a.name
        assert a.sizes == {"public_key": 2 * n, "secret_key": 4 * n, "signature": sig}, a.name
        assert a.openssl == a.name and a.liboqs is None, a.name


def test_fips_oids():
    for name, oid in FIPS_OIDS.items():
        assert catalog.resolve(name).oid == oid, name


def test_iana_code_points():
    for name, code in IANA_GROUPS.items():
        a = catalog.resolve(name, "kem")
        assert (a.tls_group, a.tls_registry) == (code, "iana"), name
    for name, code in IANA_SIGSCHEMES.items():
        a = catalog.resolve(name, "sig")
        assert (a.tls_sigscheme, a.tls_registry) == (code, "iana"), name


def test_classical_sizes_follow_from_the_parameters():
    for a in catalog.all_algorithms():
        if a.family in ("ECDH", "ECDSA") and "curve" in a.params:
            n = {"P-256": 32, "P-384": 48, "P-521": 66}[a.params["curve"]]
            assert a.sizes["public_key"] == 2 * n + 1 and a.sizes["secret_key"] == n, a.name
            assert a.sizes.get("signature", 2 * n) == 2 * n, a.name
        if a.family == "RSA" and a.kind == "sig":
            assert a.sizes == {"public_key": a.params["bits"] // 8,
                               "signature": a.params["bits"] // 8}, a.name  # fmt: skip
        if a.family == "FFDH" and a.name.startswith("FFDHE"):
            bits = int(a.params["group"].removeprefix("ffdhe"))
            assert a.sizes == {"public_key": bits // 8, "shared_secret": bits // 8}, a.name


def test_hybrid_sizes_are_the_sum_of_their_parts():
    parts = {
        "X25519MLKEM768": ("X25519", "ML-KEM-768"),
        "SecP256r1MLKEM768": ("ECDH-P256", "ML-KEM-768"),
        "SecP384r1MLKEM1024": ("ECDH-P384", "ML-KEM-1024"),
        "X448MLKEM1024": ("X448", "ML-KEM-1024"),
    }
    for name, (ecdh, mlkem) in parts.items():
        h, e, m = (catalog.resolve(n, "kem") for n in (name, ecdh, mlkem))
        assert h.sizes["public_key"] == e.sizes["public_key"] + m.sizes["public_key"], name
        # The server's share is its ECDH public value plus the ML-KEM ciphertext.
        assert h.sizes["ciphertext"] == e.sizes["public_key"] + m.sizes["ciphertext"], name
        assert h.sizes["shared_secret"] == e.sizes["shared_secret"] + 32, name
        assert h.nist_level == m.nist_level, name


def test_every_algorithm_the_issue_requires_is_catalogued():
    required = [
        "X25519", "X448", "ECDH P-256", "ECDH P-384", "ECDH P-521", "FFDHE-2048",
        "FFDHE-3072", "FFDHE-4096", "ML-KEM-512", "ML-KEM-768", "ML-KEM-1024",
        "X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024", "HQC-128", "HQC-192",
        "HQC-256", "BIKE-L1", "BIKE-L3", "FrodoKEM-640-AES", "FrodoKEM-640-SHAKE",
        "Classic-McEliece-348864", "sntrup761",
        "RSA-2048", "RSA-3072", "RSA-4096", "RSA-2048-PKCS1", "RSA-3072-PKCS1",
        "RSA-4096-PKCS1", "ECDSA P-256", "ECDSA P-384", "ECDSA P-521", "Ed25519", "Ed448",
        "ML-DSA-44", "ML-DSA-65", "ML-DSA-87", "Falcon-512", "Falcon-1024", "MAYO-1",
        "MAYO-2", "MAYO-3", "MAYO-5", "OV-Is", "OV-Ip", "OV-III", "OV-V", "OV-Is-pkc",
        "OV-Is-pkc-skc", "SPHINCS+-SHA2-128f-simple",
    ]  # fmt: skip
    for name in required:
        catalog.resolve(name)
    cross = [a for a in catalog.all_algorithms("sig") if a.family == "CROSS"]
    assert len(cross) == 18  # rsdp/rsdpg x 128/192/256 x balanced/fast/small
    uov = [a for a in catalog.all_algorithms("sig") if a.family == "UOV"]
    assert len(uov) == 12


def test_document_000_algorithms_are_tagged():
    doc000 = {a.name for a in catalog.all_algorithms() if "000" in a.documents}
    expected = {
        "X25519", "ML-KEM-512", "ML-KEM-768", "ML-KEM-1024", "X25519MLKEM768",
        "RSA-2048", "RSA-3072", "ECDSA-P256", "ML-DSA-44", "MAYO-1", "MAYO-2",
        "OV-Is-pkc", "OV-Ip-pkc", "OV-Is-pkc-skc", "OV-Ip-pkc-skc",
        *(f"CROSS-{v}-128-{t}" for v in ("RSDP", "RSDPG") for t in ("balanced", "fast", "small")),
        *(f"SNOVA-{s}" for s in ("24-5-4", "24-5-4-SHAKE", "24-5-4-esk", "24-5-4-SHAKE-esk",
                                  "37-17-2", "25-8-3")),
    }  # fmt: skip
    assert expected <= doc000, sorted(expected - doc000)
    snova = catalog.resolve("SNOVA_24_5_4")
    assert snova.backends == () and "liboqs 0.13" in snova.note


def test_conventions_for_generic_openssl_names():
    for a in catalog.all_algorithms():
        if a.openssl == "EC":
            assert a.params["curve"] in ("P-256", "P-384", "P-521"), a.name
            if a.kind == "sig":
                assert a.params["digest"] in ("SHA256", "SHA384", "SHA512"), a.name
        if a.openssl == "DH":
            assert re.fullmatch(r"ffdhe\d+|dh_1024_160", a.params["group"]), a.name
        if a.openssl == "RSA":
            assert a.params["bits"] in (2048, 3072, 4096), a.name
            assert a.params["padding"] in ("pss", "pkcs1"), a.name
            assert a.params["digest"] == "SHA256", a.name
        if not a.backends:
            assert a.note, f"{a.name} has no backend and no note saying why"


def test_names_are_unique_per_class():
    """Every spelling names at most one key exchange and at most one signature."""
    seen: dict[tuple[str, str], str] = {}
    for a in catalog.all_algorithms():
        cls = "sig" if a.kind == "sig" else "kem"
        for n in a.names:
            key = (cls, catalog.normalize(n))
            assert seen.setdefault(key, a.name) == a.name, f"{n!r}: {seen[key]} and {a.name}"
    assert len({a.name for a in catalog.all_algorithms()}) == len(catalog.all_algorithms())


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("P-256", "sig", "ECDSA-P256"),
        ("secp256r1", "sig", "ECDSA-P256"),
        ("prime256v1", "sig", "ECDSA-P256"),
        ("P-256", "kem", "ECDH-P256"),
        ("prime256v1", "kem", "ECDH-P256"),
        ("RSA-2048", None, "RSA-2048"),
        ("rsa2048", None, "RSA-2048"),
        ("2048-bit RSA", None, "RSA-2048"),
        ("3072-bit RSA", "sig", "RSA-3072"),
        ("ML-KEM 768", None, "ML-KEM-768"),
        ("mlkem768", "kem", "ML-KEM-768"),
        ("MLKEM768", None, "ML-KEM-768"),  # OpenSSL TLS group name
        ("ML-DSA 44", "sig", "ML-DSA-44"),  # document 000's spelling
        ("mldsa44", "sig", "ML-DSA-44"),
        ("x25519mlkem768", "kem", "X25519MLKEM768"),
        ("cross-rsdp-128-balanced", "sig", "CROSS-RSDP-128-balanced"),  # liboqs
        ("CROSS rsdpg 128 small", "sig", "CROSS-RSDPG-128-small"),  # document 000
        ("OV Ip pkc skc", "sig", "OV-Ip-pkc-skc"),
        ("MAYO 2", "sig", "MAYO-2"),
        ("SNOVA_37_17_2", "sig", "SNOVA-37-17-2"),
        ("SLH-DSA-SHAKE-256f", "sig", "SLH-DSA-SHAKE-256f"),
        ("FALCON_LEVEL5", "sig", "Falcon-1024"),  # wolfSSL (document 004)
        ("DILITHIUM_LEVEL2", "sig", "Dilithium2"),
        ("KYBER_LEVEL3", "kem", "Kyber768"),
        ("SPHINCS+-SHAKE256-128f-simple", "sig", "SPHINCS+-SHAKE-128f-simple"),
        ("ffdhe3072", "kem", "FFDHE-3072"),
        ("secp384r1", "kex", "ECDH-P384"),
        ("ecdsa_secp384r1_sha384", "sig", "ECDSA-P384"),
        ("rsa_pkcs1_sha256", None, None),  # shared by three RSA sizes: names none
    ],
)
def test_resolution_examples(name, kind, expected):
    if expected is None:
        with pytest.raises(UserError):
            catalog.resolve(name, kind)
    else:
        assert catalog.resolve(name, kind).name == expected


def test_a_name_of_both_classes_needs_a_kind():
    with pytest.raises(UserError, match="ECDH-P256.*ECDSA-P256"):
        catalog.resolve("P-256")


def test_wrong_kind_says_what_the_name_is():
    with pytest.raises(UserError, match="key exchange"):
        catalog.resolve("X25519", "sig")
    with pytest.raises(UserError, match="signature"):
        catalog.resolve("ML-DSA-44", "kem")


@pytest.mark.parametrize(
    ("name", "kind", "close"),
    [
        ("ML-KEM-769", None, "ML-KEM-768"),
        ("mlkem", "kem", "ML-KEM-512"),
        ("RSA-2049", "sig", "RSA-2048"),
        ("Falcon-513", "sig", "Falcon-512"),
        ("secp256k1", "kem", "ECDH-P256"),
        ("cross-rsdp-128-balance", "sig", "CROSS-RSDP-128-balanced"),
    ],
)
def test_unknown_names_list_the_closest(name, kind, close):
    with pytest.raises(UserError) as err:
        catalog.resolve(name, kind)
    msg = str(err.value)
    assert msg.startswith("unknown ") and repr(name) in msg and "did you mean" in msg
    assert close in msg, msg


def test_resolve_list_keeps_order_and_drops_duplicates():
    algs = catalog.resolve_list(["ML-KEM-768", "X25519", "mlkem768"], "kem")
    assert [a.name for a in algs] == ["ML-KEM-768", "X25519"]


def test_backend_name_explains_a_missing_backend():
    assert catalog.resolve("ML-KEM-768").backend_name("liboqs") == "ML-KEM-768"
    with pytest.raises(UserError, match="provided by openssl"):
        catalog.resolve("X25519").backend_name("liboqs")


def test_code_points_do_not_collide():
    """One code point per group; one per signature scheme except RSA key sizes (TLS names
    the scheme, not the modulus: RSA-2048/3072/4096 all use rsa_pss_rsae_sha256)."""
    groups: dict[int, str] = {}
    schemes: dict[int, set[str]] = {}
    for a in catalog.all_algorithms():
        if a.tls_group is not None:
            assert groups.setdefault(a.tls_group, a.name) == a.name, f"{a.tls_group:#06x}"
        if a.tls_sigscheme is not None:
            schemes.setdefault(a.tls_sigscheme, set()).add(
                a.family if a.family == "RSA" else a.name
            )
    shared = {f"{c:#06x}": n for c, n in schemes.items() if len(n) > 1}
    assert not shared, shared
    for a in catalog.all_algorithms():
        if a.tls_registry == "oqs-provider":
            assert 0xFE00 <= a.tls_code <= 0xFFFF, f"{a.name}: not in the private-use range"


def test_availability_from_an_engine_info_record():
    from pqlab.commands.algorithms import available_backends, provided

    info = {
        "openssl": {"keymgmt": [{"name": "X25519", "names": ["X25519", "1.3.101.110"]}]},
        "liboqs": {"kems": [{"name": "ML-KEM-768"}], "sigs": []},
    }
    have = provided(info)
    assert available_backends(catalog.resolve("X25519"), have) == ["openssl"]
    assert available_backends(catalog.resolve("ML-KEM-768"), have) == ["liboqs"]
    assert available_backends(catalog.resolve("HQC-128"), have) == []
    # An engine whose info predates the OpenSSL listing: trust the catalogue for OpenSSL.
    old = provided({"openssl": {"version_text": "OpenSSL 3.5.4"}, "liboqs": info["liboqs"]})
    assert available_backends(catalog.resolve("ML-KEM-768"), old) == ["openssl", "liboqs"]
