"""Document 000's features 1-6 found by their rules (pure logic, synthetic phase means)."""

from __future__ import annotations

from pqlab.experiments.handshake import features


def cell(name, stack="openssl", sh_cert=0.01, cert_cv=0.01, cv_fin=0.01, ch_sh=1.0, fin=1.0):
    return {
        "cell_id": name, "group": "X25519", "server_sig": name, "ca_sig": "RSA-2048",
        "stack": stack, "sh_cert": sh_cert, "cert_cv": cert_cv, "cv_fin": cv_fin,
        "ch_sh": ch_sh, "fin_fin": fin,
    }  # fmt: skip


def names(found, number):
    return sorted(c["server_sig"] for c in found[number])


def test_each_feature_is_found_by_its_own_rule():
    cells = [
        cell("RSA-2048", fin=0.3),  # everything at once; the client finishes fast
        cell("MAYO-2", sh_cert=0.5, ch_sh=0.2),  # a flushed buffer, then the signature
        cell("CROSS-balanced", cert_cv=0.9),
        cell("CROSS-fast", cv_fin=0.4),
        cell("ML-DSA-44", sh_cert=0.07, cert_cv=0.03),  # 0.11 ms: not "almost none"
    ]
    found = features.classify(cells)
    assert names(found, 1) == ["RSA-2048"]
    assert names(found, 2) == ["MAYO-2"]
    assert names(found, 3) == ["CROSS-balanced"]
    assert names(found, 4) == ["CROSS-fast"]
    assert names(found, 5) == ["MAYO-2"]
    assert names(found, 6) == ["RSA-2048"]


def test_short_is_relative_to_the_same_stack_only():
    cells = [
        cell("a", ch_sh=1.0),
        cell("b", ch_sh=1.0),
        cell("c", stack="rustls", ch_sh=0.1),
        cell("d", stack="rustls", ch_sh=0.1),
    ]
    assert names(features.classify(cells), 5) == []


def test_a_stand_out_needs_both_length_and_share():
    long_but_small_share = cell("x", sh_cert=0.2, cert_cv=0.5, cv_fin=0.5)
    assert names(features.classify([long_but_small_share]), 2) == []
