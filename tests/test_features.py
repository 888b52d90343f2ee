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


class _Store:
    """What `features.rows` reads: a query on a database holding handshake_phase."""

    def __init__(self, con):
        self.con = con

    def query(self, sql, params=()):
        cur = self.con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_a_phase_that_waited_for_a_retransmission_is_not_the_servers_timing():
    """On a lossy link one handshake's "Server Hello send -> Certificate send" waited 220 ms
    for a retransmission: the server's timing is that of the handshakes without one."""
    import duckdb

    con = duckdb.connect()
    con.execute(
        'CREATE TABLE handshake_phase (cell_id TEXT, "group" TEXT, server_sig TEXT, '
        "ca_sig TEXT, stack TEXT, view TEXT, phase TEXT, ns BIGINT, retransmissions INTEGER)"
    )
    rows = []
    for idx, (sh_cert, resent) in enumerate([(10_000, 0), (220_000_000, 1), (12_000, 0)]):
        for view, phase, ns, n in (
            ("server", features.SH_CERT, sh_cert, resent),
            ("server", features.CERT_CV, 10_000, 0),
            ("server", features.CV_FIN, 10_000, 0),
            ("server", features.CH_SH, 1_000_000 + idx, 0),
            ("client", features.FIN_FIN, 1_000_000, 0),
        ):
            rows.append(["c", "X25519", "ML-DSA-44", "ML-DSA-44", "openssl", view, phase, ns, n])
    con.executemany("INSERT INTO handshake_phase VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    found = {r["feature"]: r["cells_here"] for r in features.rows(_Store(con))}
    assert found[1] == 1 and found[2] == 0  # 0.011 + 0.01 + 0.01 ms: "almost no time"
