"""Document 004's names, code points and OIDs in the catalogue, and `pqlab algorithms
--names`. The tables below are typed from document 004 ("コードポイントとOID": TLS 1.3
code points and the certificate OIDs wolfSSL used), independently of data/algorithms.toml,
so a wrong catalogue entry fails."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import run_pqlab
from pqlab import catalog

# Document 004, "TLS 1.3のための量子コードポイント" (decimal, as printed there).
DOC004_CODE_POINTS = {
    "FALCON_LEVEL1": 65035,
    "FALCON_LEVEL5": 65038,
    "DILITHIUM_LEVEL2": 65184,
    "DILITHIUM_LEVEL3": 65187,
    "DILITHIUM_LEVEL5": 65189,
    "KYBER_LEVEL1": 570,
    "KYBER_LEVEL3": 572,
    "KYBER_LEVEL5": 573,
    "P256_KYBER_LEVEL1": 12090,
    "P384_KYBER_LEVEL3": 12092,
    "P521_KYBER_LEVEL5": 12093,
}
# Document 004, "証明書の Post-Quantum OID".
DOC004_OIDS = {
    "FALCON_LEVEL1": "1.3.9999.3.1",
    "FALCON_LEVEL5": "1.3.9999.3.4",
    "DILITHIUM_LEVEL2": "1.3.6.1.4.1.2.267.7.4.4",
    "DILITHIUM_LEVEL3": "1.3.6.1.4.1.2.267.7.6.5",
    "DILITHIUM_LEVEL5": "1.3.6.1.4.1.2.267.7.8.7",
    "SPHINCS_FAST_LEVEL1": "1.3.9999.6.7.4",
    "SPHINCS_FAST_LEVEL3": "1.3.9999.6.8.3",
    "SPHINCS_FAST_LEVEL5": "1.3.9999.6.9.3",
    "SPHINCS_SMALL_LEVEL1": "1.3.9999.6.7.10",
    "SPHINCS_SMALL_LEVEL3": "1.3.9999.6.8.7",
    "SPHINCS_SMALL_LEVEL5": "1.3.9999.6.9.7",
}
# Document 004's naming table: wolfSSL name -> the submission's parameter set.
DOC004_NAMES = {
    "FALCON_LEVEL1": "Falcon-512",
    "FALCON_LEVEL5": "Falcon-1024",
    "DILITHIUM_LEVEL2": "Dilithium2",
    "DILITHIUM_LEVEL3": "Dilithium3",
    "DILITHIUM_LEVEL5": "Dilithium5",
    "SPHINCS_FAST_LEVEL1": "SPHINCS+-SHAKE-128f-simple",
    "SPHINCS_FAST_LEVEL3": "SPHINCS+-SHAKE-192f-simple",
    "SPHINCS_FAST_LEVEL5": "SPHINCS+-SHAKE-256f-simple",
    "SPHINCS_SMALL_LEVEL1": "SPHINCS+-SHAKE-128s-simple",
    "SPHINCS_SMALL_LEVEL3": "SPHINCS+-SHAKE-192s-simple",
    "SPHINCS_SMALL_LEVEL5": "SPHINCS+-SHAKE-256s-simple",
    "KYBER_LEVEL1": "Kyber512",
    "KYBER_LEVEL3": "Kyber768",
    "KYBER_LEVEL5": "Kyber1024",
    "P256_KYBER_LEVEL1": "P256-Kyber512",
    "P384_KYBER_LEVEL3": "P384-Kyber768",
    "P521_KYBER_LEVEL5": "P521-Kyber1024",
}


def _by_wolfssl() -> dict[str, catalog.Algorithm]:
    return {a.wolfssl: a for a in catalog.all_algorithms() if a.wolfssl}


@pytest.mark.parametrize("wolf,name", sorted(DOC004_NAMES.items()))
def test_wolfssl_names_map_to_the_right_entries(wolf, name):
    assert _by_wolfssl()[wolf].name == name


@pytest.mark.parametrize("wolf,code", sorted(DOC004_CODE_POINTS.items()))
def test_wolfssl_code_points_are_document_004s(wolf, code):
    assert _by_wolfssl()[wolf].wolfssl_code == code


@pytest.mark.parametrize("wolf,oid", sorted(DOC004_OIDS.items()))
def test_wolfssl_oids_are_document_004s(wolf, oid):
    a = _by_wolfssl()[wolf]
    if a.wolfssl_oid is None:
        assert a.oid == oid, f"{a.name}: wolfSSL's OID {oid} differs from {a.oid}; add wolfssl_oid"
    else:
        assert a.wolfssl_oid == oid
        assert a.oid != oid  # only recorded where it differs from oqs-provider's


def test_which_oids_differ_between_wolfssl_and_oqs_provider():
    differ = {a.name for a in catalog.all_algorithms() if a.wolfssl_oid}
    assert differ == {
        "Falcon-512",
        "Falcon-1024",
        *(f"SPHINCS+-SHAKE-{n}{v}-simple" for n in (128, 192, 256) for v in "sf"),
    }
    # oqs-provider's Falcon-512 OID (the catalogue's oid) is not wolfSSL's.
    assert catalog.resolve("Falcon-512").oid == "1.3.9999.3.11"


def test_a_bad_wolfssl_oid_is_refused():
    bad = catalog.Algorithm("X", "sig", "F", oid="1.2.3", wolfssl_oid="1.2.3")
    with pytest.raises(ValueError, match="wolfssl_oid"):
        catalog._check(bad)
    with pytest.raises(ValueError, match="wolfssl_oid"):
        catalog._check(catalog.Algorithm("X", "sig", "F", wolfssl_oid="FALCON"))


def test_names_view_shows_every_librarys_name():
    proc = run_pqlab("algorithms", "--names", "Falcon-512", "X25519MLKEM768", check=True)
    lines = proc.stdout.splitlines()
    header = lines[0].split()
    assert header[:2] == ["algorithm", "openssl"] and "liboqs" in header and "python" in header
    falcon = next(x for x in lines if x.startswith("Falcon-512"))
    for needle in ("falcon512 (oqs-provider)", "0xfed7*", "FALCON_LEVEL1", "65035 (0xfe0b) !="):
        assert needle in falcon, falcon
    assert "1.3.9999.3.11" in falcon and "1.3.9999.3.1 " in falcon + " "
    hybrid = next(x for x in lines if x.startswith("X25519MLKEM768"))
    assert "0x11ec" in hybrid and "0x11ec*" not in hybrid  # IANA, not oqs-provider
    assert "2 algorithms" in proc.stdout


def test_names_view_in_json_carries_the_new_fields():
    import json

    proc = run_pqlab("algorithms", "Falcon-512", "ML-KEM-768", "--json", check=True)
    got = {d["name"]: d for d in json.loads(proc.stdout)}
    assert got["Falcon-512"]["wolfssl_oid"] == "1.3.9999.3.1"
    assert got["ML-KEM-768"]["python"] == "MLKEM768"


@pytest.mark.parametrize(
    "name, shown",
    [
        ("ML-KEM-512", "KYBER_LEVEL1 (Kyber512, pre-standard)"),
        ("ML-KEM-1024", "KYBER_LEVEL5 (Kyber1024, pre-standard)"),
        ("ML-DSA-65", "DILITHIUM_LEVEL3 (Dilithium3, pre-standard)"),
        ("Falcon-1024", "FALCON_LEVEL5"),
        ("X25519MLKEM768", None),
    ],
)
def test_document_004_names_what_it_measured_in_todays_place(name, shown):
    """Document 004 predates ML-KEM and ML-DSA: its tables name Kyber and Dilithium. Every
    name shown is one of the document's own (DOC004_NAMES above)."""
    alg = catalog.find(name)[0]
    assert alg.document_004_name() == shown
    if shown:
        assert shown.split()[0] in DOC004_NAMES


def test_a_predecessor_must_be_an_entry_of_the_same_kind():
    good = catalog.Algorithm("Kyber512", "kem", "Kyber")
    bad = catalog.Algorithm("New", "kem", "ML-KEM", predecessor="Dilithium2")
    with pytest.raises(ValueError, match="predecessor"):
        catalog._check_references([good, bad, catalog.Algorithm("Dilithium2", "sig", "D")])
    with pytest.raises(ValueError, match="own predecessor"):
        catalog._check(catalog.Algorithm("X", "kem", "F", predecessor="X"))


def test_same_keys_as_must_name_an_entry_making_the_same_keys():
    """PKCS #1 v1.5 and PSS sign with one kind of RSA key: an entry may share its key
    generation only with one of the same kind, library and key parameters."""
    pss = catalog.Algorithm(
        "R", "sig", "RSA", openssl="RSA", params={"bits": 2048, "padding": "pss"}
    )
    pkcs1 = catalog.Algorithm(
        "P",
        "sig",
        "RSA",
        openssl="RSA",
        params={"bits": 2048, "padding": "pkcs1"},
        same_keys_as="R",
    )
    catalog._check_references([pss, pkcs1])
    bigger = dataclasses.replace(pkcs1, name="B", params={"bits": 3072, "padding": "pkcs1"})
    with pytest.raises(ValueError, match="same_keys_as 'R'"):
        catalog._check_references([pss, bigger])
    with pytest.raises(ValueError, match="same_keys_as 'Q'"):
        catalog._check_references([pss, dataclasses.replace(pkcs1, same_keys_as="Q")])
    for bits in (2048, 3072, 4096):
        assert catalog.resolve(f"RSA-{bits}-PKCS1").same_keys_as == f"RSA-{bits}"
