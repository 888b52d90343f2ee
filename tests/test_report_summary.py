"""The report's summary and warning grouping on small databases written for the purpose
(pure logic; the real thing in a browser is tests/test_report_browser.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pqlab.experiments.handshake import schema
from pqlab.experiments.handshake import summary as hs_summary
from pqlab.report import summary, warnings
from pqlab.stats import Cause, Warning_
from pqlab.store import RunStore


@pytest.fixture
def store(tmp_path):
    s = RunStore.create(tmp_path / "run", "")
    yield s
    s.close()


def _handshakes(store, cells: dict[tuple[str, str, str], float], n: int = 40):
    """Handshake rows whose times are `ms` with a little spread, bytes grow with PQ."""
    schema.ensure(store)
    rng = np.random.default_rng(1)
    rows = []
    for (g, s, c), ms in cells.items():
        pq_bytes = (1200 if "MLKEM" in g else 0) + (3700 if "ML-DSA" in s else 0)
        for i in range(n):
            rows.append(
                {
                    "cell_id": f"{g}|{s}|{c}",
                    "group": g,
                    "server_sig": s,
                    "ca_sig": c,
                    "idx": i,
                    "handshake_ns": int(ms * 1e6 * (1 + 0.02 * rng.standard_normal())),
                    "client_bytes": 530 + (1200 if "MLKEM" in g else 0),
                    "server_bytes": 1100 + pq_bytes,
                    "server_flight_segments": 1 + pq_bytes // 1448,
                    "client_hello_segments": 1,
                    "cwnd_stalls": 0,
                }
            )
    store.insert_rows("handshake_raw", rows)


def test_the_three_comparisons_pick_classical_against_pq_with_everything_else_equal(store):
    _handshakes(
        store,
        {
            ("X25519", "ECDSA-P256", "ECDSA-P256"): 0.40,
            ("X25519MLKEM768", "ECDSA-P256", "ECDSA-P256"): 0.60,
            ("X25519", "ML-DSA-44", "ECDSA-P256"): 1.20,
            ("X25519MLKEM768", "ML-DSA-44", "ECDSA-P256"): 1.40,
            ("X25519", "RSA-2048", "ECDSA-P256"): 0.90,
        },
    )
    part = hs_summary.summarize(store)
    rows, items = part.rows, part.items
    time = {r["topic"]: r for r in rows if r["metric"] == "handshake time (median)"}
    assert set(time) == {"key exchange", "certificate chain", "both"}
    assert time["key exchange"]["comparison"] == (
        "X25519 + ECDSA-P256 (CA ECDSA-P256) -> X25519MLKEM768 + ECDSA-P256 (CA ECDSA-P256)"
    )
    # ECDSA-P256 is preferred over RSA-2048 as the classical chain.
    assert time["certificate chain"]["comparison"].startswith("X25519 + ECDSA-P256")
    assert time["both"]["change_pct"] == pytest.approx(250, abs=10)
    lo, hi = time["key exchange"]["ci_low_pct"], time["key exchange"]["ci_high_pct"]
    assert lo < time["key exchange"]["change_pct"] < hi and lo > 30
    assert "X25519 &rarr; X25519MLKEM768 (server ECDSA-P256, CA ECDSA-P256)" in items[0]
    assert "no extra round trip" in items[0]


def test_no_pq_choice_means_no_comparison(store):
    _handshakes(store, {("X25519", "ECDSA-P256", "ECDSA-P256"): 0.4})
    part = hs_summary.summarize(store)
    assert part.rows == [] and part.items == []
    html_text, rows = summary.build(store)
    assert rows == [] and "no experiment the summary draws on" in html_text


def test_describe_names_what_changes_and_what_stays():
    a = hs_summary.Cell("X25519", "RSA-2048", "RSA-2048")
    b = hs_summary.Cell("X25519MLKEM768", "ML-DSA-44", "RSA-2048")
    assert hs_summary.describe(a, b) == (
        "X25519 + RSA-2048 &rarr; X25519MLKEM768 + ML-DSA-44 (CA RSA-2048)"
    )
    # Every axis changes: nothing shared, and no empty parentheses after the change.
    c = hs_summary.Cell("X25519MLKEM768", "ML-DSA-44", "ML-DSA-44")
    assert hs_summary.describe(a, c) == (
        "X25519 + RSA-2048 + RSA-2048 &rarr; X25519MLKEM768 + ML-DSA-44 + ML-DSA-44"
    )


def test_warnings_are_one_group_per_cause_and_ml_dsa_signing_is_inherent(store):
    noisy = Warning_(Cause.NOISY, "X25519 (openssl) keygen", "robust CV 20% is above 10%", "close")
    stored_before = Warning_(  # how a run made before this pqlab stored ML-DSA's spread
        Cause.NOISY, "ML-DSA-44 (openssl) sign", "robust CV 80% is above 10%", "close"
    )
    outl = Warning_(Cause.OUTLIERS, "ML-DSA-44 (openssl) sign", "sd over half the mean", "rely")
    store.add_warnings("primitives", "a", [noisy, stored_before, outl])
    store.add_warnings("handshake", "b", [Warning_(Cause.NOISY, "handshake x", "cv", "close")])
    groups = warnings.grouped(store)
    assert list(groups) == ["noisy", "inherent-variance"]
    assert [w["subject"] for w in groups["noisy"]] == ["handshake x", "X25519 (openssl) keygen"]
    (mldsa,) = groups["inherent-variance"]  # noisy + outliers of one series: one line
    assert mldsa["subject"] == "ML-DSA-44 (openssl) sign" and "FIPS 204" in mldsa["message"]
    text = warnings.html_grouped(store)
    assert text.count("<details class=") == 2 and "Variance by design" in text


def test_every_warning_cause_has_a_code_title_and_advice():
    codes = [c.code for c in Cause]
    assert len(set(codes)) == len(codes)
    assert all(c.title and c.advice for c in Cause)
    assert Cause.of("noisy") is Cause.NOISY and Cause.of("no-such") is None
    with pytest.raises(TypeError):
        Warning_("noisy", "x", "y")  # a cause is the enum, never a bare string
    assert Warning_(Cause.BUDGET, "x", "y").advice == Cause.BUDGET.advice


def test_a_code_this_pqlab_does_not_know_is_listed_first_under_its_code(store):
    store.add_warnings("primitives", "a", [Warning_(Cause.NOISY, "x", "y")])
    store.con.execute(
        "INSERT INTO warnings VALUES ('handshake', 'b', 'from-the-future', 's', 'm', 'a')"
    )
    assert list(warnings.grouped(store)) == ["from-the-future", "noisy"]
