"""The catalogue's sizes against what the primitives engine observes when it runs each
algorithm (`pqlab-engine kem|sig ... --no-samples`, record type "sizes").

This runs every OpenSSL-backed entry once through the catalogue's own `openssl` name and
`params`, so it also checks that the catalogue's backend convention is what the engine
accepts. liboqs-backed sizes are checked against liboqs's own report in
test_catalog_engine.py.
"""

from __future__ import annotations

import pytest

from pqlab import catalog, engine

FIELDS = ("public_key", "secret_key", "ciphertext", "shared_secret", "signature")


def _observe(alg: catalog.Algorithm, backend: str) -> dict:
    sub = "sig" if alg.kind == "sig" else "kem"
    args = [sub, "--backend", backend, "--alg", alg.backend_name(backend)]
    if backend == "openssl":
        for k, v in alg.params.items():
            args += ["--param", f"{k}={v}"]
    args += ["--iterations", "1", "--warmup", "0", "--no-samples"]
    records = engine.run(args, timeout=300)
    sizes = [r for r in records if r["type"] == "sizes"]
    assert len(sizes) == 1, f"{alg.name}: expected one sizes record, got {records}"
    return sizes[0]


@pytest.mark.parametrize(
    "alg", [a for a in catalog.all_algorithms() if a.openssl], ids=lambda a: a.name
)
def test_openssl_sizes_equal_the_catalogue(alg):
    observed = _observe(alg, "openssl")
    for field in FIELDS:
        want = alg.sizes.get(field)
        got = observed.get(field)
        if want is None:
            continue
        assert got is not None, f"{alg.name}: the engine reports no {field}"
        assert got["min"] == got["max"] == want, (
            f"{alg.name} {field}: catalogue {want}, OpenSSL {got['min']}..{got['max']}"
        )


@pytest.mark.parametrize(
    "alg",
    [a for a in catalog.all_algorithms() if a.openssl and a.liboqs],
    ids=lambda a: a.name,
)
def test_both_backends_of_one_algorithm_agree(alg):
    """ML-KEM and ML-DSA are one entry with two backends: their raw sizes must be equal."""
    ossl, oqs = _observe(alg, "openssl"), _observe(alg, "liboqs")
    for field in FIELDS:
        if alg.sizes.get(field) is not None:
            assert ossl[field] == oqs[field], f"{alg.name} {field}: {ossl[field]} vs {oqs[field]}"
