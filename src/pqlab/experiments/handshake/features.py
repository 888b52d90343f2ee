"""Document 000's six features of the server's timing (section 4-3-2), found in this run's
cells: which cells show each one, by explicit rules on the phases' means, and which stack's
write model explains them (pqlab.tls.flight).

The document lists them with examples:
1. ServerHello send to Finished send takes almost no time (RSA, P-256, ML-DSA-44);
2. ServerHello send to Certificate send stands out (MAYO-2, SNOVA-25-8-3, UOV);
3. Certificate send to CertificateVerify send stands out (CROSS rsdp 128, SNOVA-37-17-2);
4. CertificateVerify send to Finished send stands out (CROSS rsdp 128 fast);
5. ClientHello received to ServerHello send is short (MAYO-2, UOV, SNOVA);
6. the client's Finished received to Finished send is short (RSA, CROSS rsdp 128, SNOVA).
"""

from __future__ import annotations

from dataclasses import dataclass

# A phase "stands out" when its mean is at least this long and this share of the server's
# ServerHello-to-Finished time; "almost no time" is below NEGLIGIBLE_MS; "short" is below
# SHORT_SHARE of the median of the same phase over the run's cells on the same stack.
STANDS_OUT_MS = 0.1
STANDS_OUT_SHARE = 0.3
NEGLIGIBLE_MS = 0.1
SHORT_SHARE = 0.5

SH_CERT = "Server Hello send -> Certificate send"
CERT_CV = "Certificate send -> Certificate Verify send"
CV_FIN = "Certificate Verify send -> Finished send"
CH_SH = "Client Hello rcv -> Server Hello send"
FIN_FIN = "Finished rcv -> Finished send"


@dataclass(frozen=True)
class Feature:
    number: int
    text: str
    document_examples: str
    rule: str


FEATURES = (
    Feature(
        1,
        "ServerHello send to Finished send takes almost no time",
        "RSA, P-256, ML-DSA-44",
        f"server view: ServerHello send to Finished send under {NEGLIGIBLE_MS} ms",
    ),
    Feature(
        2,
        "ServerHello send to Certificate send stands out",
        "MAYO-2, SNOVA-25-8-3, UOV",
        f"'{SH_CERT}' at least {STANDS_OUT_MS} ms and {STANDS_OUT_SHARE:.0%} of "
        "ServerHello-to-Finished",
    ),
    Feature(
        3,
        "Certificate send to CertificateVerify send stands out",
        "CROSS rsdp 128, SNOVA-37-17-2",
        f"'{CERT_CV}' at least {STANDS_OUT_MS} ms and {STANDS_OUT_SHARE:.0%}",
    ),
    Feature(
        4,
        "CertificateVerify send to Finished send stands out",
        "CROSS rsdp 128 fast",
        f"'{CV_FIN}' at least {STANDS_OUT_MS} ms and {STANDS_OUT_SHARE:.0%}",
    ),
    Feature(
        5,
        "ClientHello received to ServerHello send is short",
        "MAYO-2, UOV, SNOVA-37-17-2 / 25-8-3",
        f"'{CH_SH}' under {SHORT_SHARE:.0%} of its median over the stack's cells",
    ),
    Feature(
        6,
        "the client's Finished received to Finished send is short",
        "RSA, CROSS rsdp 128 balanced / fast, SNOVA",
        f"client view '{FIN_FIN}' under {SHORT_SHARE:.0%} of its median over the stack's cells",
    ),
)

# Each phase's mean over the handshakes in which no segment was retransmitted while it ran:
# on a lossy link a server phase may wait for a recovery, which is the link's, not the
# server's timing.
PHASES_SQL = """
SELECT cell_id, any_value("group") AS "group", any_value(server_sig) AS server_sig,
       any_value(ca_sig) AS ca_sig, any_value(stack) AS stack,
       avg(ns) FILTER (WHERE view = 'server' AND phase = ? AND clean) / 1e6 AS sh_cert,
       avg(ns) FILTER (WHERE view = 'server' AND phase = ? AND clean) / 1e6 AS cert_cv,
       avg(ns) FILTER (WHERE view = 'server' AND phase = ? AND clean) / 1e6 AS cv_fin,
       avg(ns) FILTER (WHERE view = 'server' AND phase = ? AND clean) / 1e6 AS ch_sh,
       avg(ns) FILTER (WHERE view = 'client' AND phase = ? AND clean) / 1e6 AS fin_fin
FROM (SELECT *, coalesce(retransmissions, 0) = 0 AS clean FROM handshake_phase)
GROUP BY cell_id ORDER BY cell_id
"""


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else 0.0


def _stands_out(part: float, whole: float) -> bool:
    return part >= STANDS_OUT_MS and whole > 0 and part / whole >= STANDS_OUT_SHARE


def classify(cells: list[dict]) -> dict[int, list[dict]]:
    """Feature number -> the cells (rows of PHASES_SQL) that show it."""
    out: dict[int, list[dict]] = {f.number: [] for f in FEATURES}
    by_stack: dict[str, list[dict]] = {}
    for c in cells:
        by_stack.setdefault(c["stack"] or "", []).append(c)
    for same in by_stack.values():
        ch_med = _median([c["ch_sh"] for c in same if c["ch_sh"] is not None])
        fin_med = _median([c["fin_fin"] for c in same if c["fin_fin"] is not None])
        for c in same:
            parts = [c["sh_cert"], c["cert_cv"], c["cv_fin"]]
            if any(p is None for p in parts):
                continue
            flight = sum(parts)
            if flight < NEGLIGIBLE_MS:
                out[1].append(c)
            for number, part in ((2, parts[0]), (3, parts[1]), (4, parts[2])):
                if _stands_out(part, flight):
                    out[number].append(c)
            if c["ch_sh"] is not None and c["ch_sh"] < SHORT_SHARE * ch_med:
                out[5].append(c)
            if c["fin_fin"] is not None and c["fin_fin"] < SHORT_SHARE * fin_med:
                out[6].append(c)
    return out


def rows(store) -> list[dict]:
    """One row per feature: its rule, the document's examples and this run's cells."""
    cells = store.query(PHASES_SQL, [SH_CERT, CERT_CV, CV_FIN, CH_SH, FIN_FIN])
    found = classify(cells)
    out = []
    for f in FEATURES:
        shown = found[f.number]
        out.append(
            {
                "feature": f.number,
                "description": f.text,
                "document_examples": f.document_examples,
                "rule": f.rule,
                "cells_here": len(shown),
                "cells": "; ".join(
                    f"{c['group']} / {c['server_sig']} / CA {c['ca_sig']} ({c['stack']})"
                    for c in shown
                ),
            }
        )
    return out
