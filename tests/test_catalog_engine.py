"""The catalogue against the libraries the engine was built with (`pqlab-engine info`).

Needs the engine binary (make engine, or PQLAB_ENGINE=path). Sizes and levels come from
liboqs's own structures, code points from OpenSSL's provider capabilities and from the
ClientHello libssl writes, so a catalogue entry that disagrees with a library fails here.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_pqlab
from pqlab import catalog, engine


@pytest.fixture(scope="module")
def info() -> dict:
    return engine.info()


def _liboqs(info: dict, kind: str) -> dict[str, dict]:
    return {r["name"]: r for r in info["liboqs"]["kems" if kind == "kem" else "sigs"]}


@pytest.mark.parametrize("kind", ["kem", "sig"])
def test_every_liboqs_algorithm_is_catalogued_with_liboqs_sizes(info, kind):
    by_liboqs = {a.liboqs: a for a in catalog.all_algorithms(kind) if a.liboqs}
    fields = ("public_key", "secret_key", "ciphertext", "shared_secret")
    if kind == "sig":
        fields = ("public_key", "secret_key", "signature")
    reported = _liboqs(info, kind)
    assert len(reported) > 10, "the engine reports almost no liboqs algorithms"
    for name, rec in reported.items():
        assert name in by_liboqs, f"liboqs {kind} {name} is not in the catalogue"
        alg = by_liboqs[name]
        assert alg.nist_level == rec["nist_level"], name
        for f in fields:
            assert alg.sizes.get(f) == rec[f], (
                f"{alg.name} {f}: catalogue {alg.sizes.get(f)}, liboqs {rec[f]}"
            )


@pytest.mark.parametrize("kind", ["kem", "sig"])
def test_every_catalogued_liboqs_backend_exists_in_this_build(info, kind):
    reported = _liboqs(info, kind)
    missing = [
        a.name for a in catalog.all_algorithms(kind) if a.liboqs and a.liboqs not in reported
    ]
    assert not missing, f"catalogued with a liboqs backend this engine lacks: {missing}"


def _openssl_names(info: dict, group: str) -> set[str]:
    out = set()
    for m in info["openssl"][group]:
        out.update(n.lower() for n in m["names"])
    return out


def test_every_catalogued_openssl_backend_exists(info):
    keymgmt = _openssl_names(info, "keymgmt")
    kems = _openssl_names(info, "kems")
    sigs = _openssl_names(info, "signatures")
    # The signature operation each generic key type uses.
    sig_op = {"EC": "ECDSA", "RSA": "RSA", "ED25519": "ED25519", "ED448": "ED448"}
    for a in catalog.all_algorithms():
        if not a.openssl:
            continue
        assert a.openssl.lower() in keymgmt, f"{a.name}: OpenSSL has no key type {a.openssl}"
        if a.kind == "kem":
            assert a.openssl.lower() in kems, f"{a.name}: OpenSSL has no KEM {a.openssl}"
        if a.kind == "sig":
            op = sig_op.get(a.openssl, a.openssl)
            assert op.lower() in sigs, f"{a.name}: OpenSSL has no signature {op}"


def test_every_openssl_kem_and_pq_signature_is_catalogued(info):
    by_openssl = {a.openssl.lower() for a in catalog.all_algorithms() if a.openssl}
    # EC / RSA / X25519 / X448 as EVP KEMs are RFC 9180 DHKEM and RSASVE: not TLS KEMs.
    generic = {"ec", "rsa", "x25519", "x448"}
    for m in info["openssl"]["kems"]:
        if m["name"].lower() not in generic:
            assert m["name"].lower() in by_openssl, f"OpenSSL KEM {m['name']} not catalogued"
    for m in info["openssl"]["signatures"]:
        if m["name"].startswith(("ML-DSA", "SLH-DSA")):
            assert m["name"].lower() in by_openssl, f"OpenSSL {m['name']} not catalogued"


def test_tls_group_code_points_match_openssl(info):
    groups = {g["name"]: g for g in info["openssl"]["tls_groups"]}
    checked = 0
    for a in catalog.all_algorithms("kem"):
        if a.tls_registry != "iana":
            continue
        assert a.tls_name in groups, f"{a.name}: OpenSSL has no TLS group {a.tls_name}"
        g = groups[a.tls_name]
        assert g["id"] == a.tls_group, (
            f"{a.name}: catalogue {a.tls_group:#06x}, OpenSSL {g['id']:#06x}"
        )
        assert g["wire_id"] == [a.tls_group], f"{a.name}: ClientHello carries {g['wire_id']}"
        assert bool(g["is_kem"]) == (a.kind == "kem"), a.name
        checked += 1
    assert checked >= 14


def test_every_openssl_tls13_group_is_catalogued(info):
    by_tls = {a.tls_name for a in catalog.all_algorithms("kem") if a.tls_name}
    for g in info["openssl"]["tls_groups"]:
        tls13 = g["max_tls"] in (0, -1) or g["max_tls"] >= 0x0304
        if tls13 and not g["name"].startswith("brainpool") and not g["name"].startswith("P-"):
            assert g["name"] in by_tls, f"OpenSSL TLS 1.3 group {g['name']} is not catalogued"


def test_signature_scheme_code_points_match_openssl(info):
    sigalgs = {s["iana_name"]: s for s in info["openssl"]["tls_sigalgs"]}
    checked = 0
    for a in catalog.all_algorithms("sig"):
        if a.tls_registry != "iana":
            continue
        assert a.tls_name in sigalgs, f"{a.name}: OpenSSL has no signature scheme {a.tls_name}"
        s = sigalgs[a.tls_name]
        assert s["wire_code_point"] == [a.tls_sigscheme], (
            f"{a.name}: catalogue {a.tls_sigscheme:#06x}, ClientHello {s['wire_code_point']}"
        )
        if "code_point" in s:  # provider-defined schemes also report it directly
            assert s["code_point"] == a.tls_sigscheme, a.name
            assert s.get("oid") in (None, a.oid), a.name
        checked += 1
    assert checked >= 10


def test_pqlab_algorithms_lists_what_this_build_provides():
    proc = run_pqlab("algorithms", "--json", check=True, timeout=120)
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert len(rows) == len(catalog.all_algorithms())
    assert rows["ML-KEM-768"]["available"] == ["openssl", "liboqs"]
    assert rows["SNOVA-24-5-4"]["available"] == []
    assert rows["ECDSA-P256"]["params"] == {"curve": "P-256", "digest": "SHA256"}


def test_pqlab_algorithms_table_and_filters():
    proc = run_pqlab("algorithms", "--document", "000", "--kind", "sig", check=True, timeout=120)
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["algorithm", "kind", "family"]
    names = {line.split()[0] for line in lines[1:] if line and not line[0].isdigit()}
    assert {"ML-DSA-44", "RSA-3072", "MAYO-2", "SNOVA-25-8-3"} <= names
    assert "ML-KEM-768" not in names
    proc = run_pqlab("algorithms", "--backend", "liboqs", "--kind", "kem", "--json", check=True)
    got = {r["name"] for r in json.loads(proc.stdout)}
    assert "HQC-128" in got and "X25519" not in got


def test_pqlab_algorithms_unknown_name_is_one_line_and_exit_2():
    proc = run_pqlab("algorithms", "ML-KEM-769")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        and "did you mean ML-KEM-768" in proc.stderr
    )
    proc = run_pqlab("algorithms", "--document", "9")
    assert proc.returncode == 2 and "000, 001, 002, 003, 004" in proc.stderr


def test_classical_strength_matches_openssl_security_bits(info):
    """classical_bits (SP 800-57) must equal what OpenSSL's TLS layer assumes per group."""
    groups = {g["name"]: g for g in info["openssl"]["tls_groups"]}
    checked = 0
    for a in catalog.all_algorithms("kex"):
        if a.tls_registry == "iana" and a.classical_bits is not None:
            assert groups[a.tls_name]["sec_bits"] == a.classical_bits, a.name
            checked += 1
    assert checked >= 10


def test_nist_levels_match_openssl_security_bits(info):
    """OpenSSL gives PQ groups and schemes the AES strength of their NIST category."""
    bits = {1: 128, 2: 128, 3: 192, 4: 192, 5: 256}
    by_name = {g["name"]: g for g in info["openssl"]["tls_groups"]}
    by_name.update({s["iana_name"]: s for s in info["openssl"]["tls_sigalgs"]})
    checked = 0
    for a in catalog.all_algorithms():
        if a.nist_level is not None and a.tls_registry == "iana":
            assert by_name[a.tls_name]["sec_bits"] == bits[a.nist_level], a.name
            checked += 1
    assert checked >= 9  # 3 ML-KEM, 3 hybrids, 3 ML-DSA


def test_every_stack_code_point_is_a_catalogued_algorithm_with_that_code(info):
    """Every group and post-quantum signature scheme the rustls stacks list is in the
    catalogue under the same code point; for the oqs-provider code points the stack's name is the catalogue's
    tls_name too (the rustls provider and the catalogue hold the same table). OpenSSL's
    tables are checked against the catalogue above (its TLS 1.2-only curves are not
    catalogued)."""
    groups = {a.tls_group: a for a in catalog.all_algorithms() if a.tls_group is not None}
    sigs = {a.tls_sigscheme: a for a in catalog.all_algorithms("sig") if a.tls_sigscheme}
    rustls = [s for s in info["tls_stacks"] if s["name"].startswith("rustls")]
    assert len(rustls) == 2
    for stack in rustls:
        for kind, table, entries in (("group", groups, stack["groups"]), ("sigalg", sigs, stack["sigalgs"])):  # fmt: skip
            for e in entries:
                if kind == "sigalg" and e["code"] < 0x0900:
                    continue  # the classical schemes: several per catalogued key
                alg = table.get(e["code"])
                assert alg is not None, f"{stack['name']} {kind} {e['name']} {e['code']:#06x}"
                if alg.tls_registry == "oqs-provider":
                    assert e["name"].lower() == (alg.tls_name or "").lower(), (stack["name"], e)


@pytest.mark.parametrize(
    "name", ["MAYO-1", "CROSS-RSDP-128-balanced", "Falcon-512", "OV-Ip-pkc", "ML-DSA-44"]
)
def test_certificate_oids_are_the_catalogues(tmp_path, name):
    """The key OID the engine's certificate builder writes (read from the DER) is the
    catalogue's oid for the algorithm."""
    from cryptography import x509  # deferred import: only this test reads certificates

    alg = catalog.resolve(name, "sig")
    spec = alg.openssl or alg.liboqs
    records = engine.run(
        ["tls", "certs", "--ca-alg", spec, "--server-alg", spec, "--out-dir", str(tmp_path)]
    )
    assert records[-1]["type"] == "certs"
    cert = x509.load_der_x509_certificate((tmp_path / "server.crt.der").read_bytes())
    assert cert.signature_algorithm_oid.dotted_string == alg.oid
