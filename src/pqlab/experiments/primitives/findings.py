"""Parts of the primitives report beyond the summary table (called by primitives.export):

- document 000's conclusions about primitives, recomputed from this run for each harness
  (the python harness, each engine backend, and the document's own mix: classical
  algorithms through Python `cryptography`, post-quantum ones through liboqs);
- the python harness next to the engine's OpenSSL: what the interpreter adds;
- what each measuring process cost the machine (CPU, peak memory), which document 000 calls
  negligible.

Everything is computed from the summaries of raw samples (`primitives.summaries`) and the
`primitive_resources` rows; prose lives in report/templates/primitives_*.html.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

from pqlab import stats
from pqlab.report.section import Section, template
from pqlab.report.summary import Summary, row
from pqlab.store import RunStore

PQ_FAMILIES = ("ML-KEM", "ML-DSA", "Kyber", "Dilithium", "Falcon", "SPHINCS+", "SLH-DSA")


@dataclass(frozen=True)
class Claim:
    """One of document 000's conclusions: `subject` against `reference` for an operation.
    test "faster-steadier": lower mean and lower robust CV (the document's own criteria);
    "ratio>X": subject mean / reference mean above X."""

    key: str
    text: str
    where: str
    subject: tuple[str, ...]  # algorithm names (canonical)
    subject_op: str
    reference: tuple[str, ...]
    reference_op: str
    test: str


CLAIMS = (
    Claim(
        "mlkem-keygen",
        "ML-KEM key generation is faster and steadier than X25519's",
        "section 4-1-2, table 2",
        ("ML-KEM-512", "ML-KEM-768", "ML-KEM-1024"),
        "keygen",
        ("X25519",),
        "keygen",
        "faster-steadier",
    ),
    Claim(
        "mldsa-verify",
        "ML-DSA-44 verification is faster and steadier than the classical signatures'",
        "section 4-2-2, table 8",
        ("ML-DSA-44",),
        "verify",
        ("RSA-2048", "RSA-3072", "ECDSA-P256"),
        "verify",
        "faster-steadier",
    ),
    Claim(
        "rsa-sign-vs-p256",
        "RSA signing takes more than 10 times as long as P-256's",
        "section 4-2-2, table 7",
        ("RSA-2048", "RSA-3072"),
        "sign",
        ("ECDSA-P256",),
        "sign",
        "ratio>10",
    ),
    Claim(
        "rsa-sign-vs-mldsa",
        "RSA signing takes more than 5 times as long as ML-DSA-44's",
        "section 4-2-2, table 7",
        ("RSA-2048", "RSA-3072"),
        "sign",
        ("ML-DSA-44",),
        "sign",
        "ratio>5",
    ),
)

DOC_MIX = "document 000's mix"


def _is_pq(row: dict) -> bool:
    return (row.get("family") or "").startswith(PQ_FAMILIES)


def _harnesses(by: dict) -> list[tuple[str, dict]]:
    """(label, {(algorithm, operation): summary row}) per harness: each backend on its own,
    then the document's mix (classical from python, post-quantum from liboqs)."""
    order = ("python", "openssl", "liboqs")
    backends = sorted(
        {b for (_, _, b) in by},
        key=lambda b: (b not in order, order.index(b) if b in order else 0, b),
    )
    out = [(b, {(a, o): r for (a, o, bb), r in by.items() if bb == b}) for b in backends]
    mix = {}
    for (a, o, b), r in by.items():
        if (b == "liboqs" and _is_pq(r)) or (b == "python" and not _is_pq(r)):
            mix[(a, o)] = r
    if {"python", "liboqs"} <= set(backends):
        out.append((DOC_MIX, mix))
    return out


NOISE_CV = 0.10  # the robust CV above which stats.noise_warnings calls a series noisy


def _noisy(row: dict) -> bool:
    """Whether a series' spread is the machine's noise (not the algorithm's own)."""

    inherent = stats.inherent_variance(row.get("family"), row["operation"])
    return row["robust_cv"] > NOISE_CV and inherent is None


def _judge(claim: Claim, s: dict, r: dict) -> dict:
    ratio = s["mean_us"] / r["mean_us"]
    if claim.test == "faster-steadier":
        faster = s["mean_us"] < r["mean_us"]
        steadier = s["robust_cv"] < r["robust_cv"]
        holds = faster and steadier
    else:
        threshold = float(claim.test.split(">", 1)[1])
        faster = steadier = None
        holds = ratio > threshold
    return {
        "ratio_of_means": ratio,
        "faster": faster,
        "steadier": steadier,
        "holds": holds,
        "noisy": _noisy(s) or _noisy(r),
    }


def claims(rows: list[dict]) -> list[dict]:
    """Every claim, for every harness that measured both sides, one row per pair."""
    by = {(r["algorithm"], r["operation"], r["backend"]): r for r in rows}
    out = []
    for claim in CLAIMS:
        for label, h in _harnesses(by):
            for subj in claim.subject:
                for ref in claim.reference:
                    s, r = h.get((subj, claim.subject_op)), h.get((ref, claim.reference_op))
                    if s is None or r is None:
                        continue
                    if label == DOC_MIX and s["backend"] == r["backend"]:
                        continue  # the same as that backend's own row
                    out.append(
                        {
                            "claim": claim.key,
                            "document_says": claim.text,
                            "harness": label,
                            "subject": f"{subj} {claim.subject_op} ({s['backend']})",
                            "subject_mean_us": s["mean_us"],
                            "subject_median_us": s["median_us"],
                            "subject_robust_cv": s["robust_cv"],
                            "reference": f"{ref} {claim.reference_op} ({r['backend']})",
                            "reference_mean_us": r["mean_us"],
                            "reference_median_us": r["median_us"],
                            "reference_robust_cv": r["robust_cv"],
                            **_judge(claim, s, r),
                        }
                    )
    return out


def _verdicts(table: list[dict]) -> str:
    """One list item per claim: with which harnesses it holds, and with which not."""
    items = []
    for claim in CLAIMS:
        rows = [r for r in table if r["claim"] == claim.key]
        if not rows:
            continue
        by_h: dict[str, list[bool]] = {}
        noisy = sorted({r["harness"] for r in rows if r["noisy"]})
        for r in rows:
            by_h.setdefault(r["harness"], []).append(bool(r["holds"]))
        holds = [h for h, v in by_h.items() if all(v)]
        fails = [h for h, v in by_h.items() if not any(v)]
        mixed = [h for h, v in by_h.items() if any(v) and not all(v)]
        parts = []
        if holds:
            parts.append(f"holds with {', '.join(holds)}")
        if mixed:
            parts.append(f"holds for some pairs only with {', '.join(mixed)}")
        if fails:
            parts.append(f"<b>does not hold</b> with {', '.join(fails)}")
        changes = " (<b>the conclusion changes with the harness</b>)" if holds and fails else ""
        caveat = (
            f" Measured with noise (robust CV above 10 %) in {', '.join(noisy)}: means and "
            "spreads there describe this machine's load as much as the algorithms; rerun on "
            "a quiet machine before relying on those."
            if noisy
            else ""
        )
        items.append(
            f"<li>&ldquo;{html.escape(claim.text)}&rdquo; ({html.escape(claim.where)}): "
            + "; ".join(parts)
            + changes
            + "."
            + caveat
            + "</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def python_vs_engine(rows: list[dict]) -> list[dict]:
    """The python harness against the engine's OpenSSL for every algorithm and operation
    both measured (medians)."""
    by = {(r["algorithm"], r["operation"], r["backend"]): r for r in rows}
    out = []
    for (alg, op, b), r in by.items():
        o = by.get((alg, op, "openssl"))
        if b != "python" or o is None:
            continue
        out.append(
            {
                "algorithm": alg,
                "operation": op,
                "python_median_us": r["median_us"],
                "openssl_median_us": o["median_us"],
                "python_minus_openssl_us": r["median_us"] - o["median_us"],
                "python_over_openssl": r["median_us"] / o["median_us"],
                "python_robust_cv": r["robust_cv"],
                "openssl_robust_cv": o["robust_cv"],
            }
        )
    return out


def resources(store: RunStore) -> list[dict]:
    """CPU and memory per measuring process, with the peak RSS above the lightest process of
    the same program (what the algorithm itself added)."""
    if not store.has_table("primitive_resources"):
        return []
    data = store.query(
        "SELECT algorithm, backend, program, wall_s, cpu_user_s, cpu_sys_s, max_rss_kib, "
        "samples, timer_overhead_ns FROM primitive_resources ORDER BY rowid"
    )
    lightest: dict[str, int] = {}
    for r in data:
        if r["max_rss_kib"] is not None:
            p = r["program"]
            lightest[p] = min(lightest.get(p, r["max_rss_kib"]), r["max_rss_kib"])
    out = []
    for r in data:
        cpu = (r["cpu_user_s"] or 0) + (r["cpu_sys_s"] or 0)
        rss = r["max_rss_kib"]
        out.append(
            {
                "algorithm": r["algorithm"],
                "backend": r["backend"],
                "program": r["program"],
                "wall_s": r["wall_s"],
                "cpu_s": cpu if r["cpu_user_s"] is not None else None,
                "cpu_per_wall": cpu / r["wall_s"] if r["wall_s"] else None,
                "max_rss_mib": rss / 1024 if rss is not None else None,
                "rss_over_lightest_mib": (rss - lightest[r["program"]]) / 1024
                if rss is not None
                else None,
                "samples": r["samples"],
                "timer_overhead_ns": r["timer_overhead_ns"],
            }
        )
    return out


def _harness_info(store: RunStore) -> dict | None:
    if not store.has_table("primitive_resources"):
        return None
    rows = store.query("SELECT harness FROM primitive_resources WHERE harness IS NOT NULL LIMIT 1")
    return json.loads(rows[0]["harness"]) if rows else None


def _small_ops(cmp: list[dict], limit_us: float = 10.0) -> str:
    small = [r for r in cmp if r["openssl_median_us"] < limit_us]
    if not small:
        return "none in this run"
    return ", ".join(
        f"{html.escape(r['algorithm'])} {r['operation']} ({r['openssl_median_us']:.2f} &rarr; "
        f"{r['python_median_us']:.2f} us, {r['python_over_openssl']:.1f}x)"
        for r in small
    )


def add_to(section: Section, store: RunStore, rows: list[dict]) -> None:
    """Append the claims, the python-harness comparison and the load tables to `section`."""
    table = claims(rows)
    if table:
        csv = store.export_rows("primitive_doc000_claims", table)
        section.text(template("primitives_claims", verdicts=_verdicts(table)))
        section.table(csv, "Document 000's conclusions recomputed per harness (us)")
    cmp = python_vs_engine(rows)
    info = _harness_info(store)
    if cmp and info:
        csv = store.export_rows("primitive_python_vs_engine", cmp)
        overhead = info.get("timer_overhead_ns")
        section.text(
            template(
                "primitives_python",
                python=html.escape(f"{info.get('implementation')} {info.get('python')}"),
                cryptography=html.escape(str(info.get("cryptography"))),
                openssl=html.escape(str(info.get("openssl"))),
                overhead_ns=f"{overhead}" if overhead is not None else "?",
                small_ops=_small_ops(cmp),
            )
        )
        section.table(csv, "The python harness against the engine's OpenSSL (medians, us)")
    load = resources(store)
    if load:
        csv = store.export_rows("primitive_load", load)
        section.text(template("primitives_load"))
        section.table(csv, "CPU and peak memory of each measuring process")


def summarize(store: RunStore) -> Summary | None:
    """The TLS library's per-handshake cryptography, OpenSSL medians: the key exchange on each
    side with X25519 and with the deployed hybrid X25519MLKEM768 (X25519's operations plus
    ML-KEM-768's), and the CertificateVerify signature (server) and its check (client) with
    ECDSA-P256 and ML-DSA-44."""
    if not store.has_table("primitive_samples"):
        return None
    med = {
        (r["algorithm"], r["operation"]): r["m"] / 1e6
        for r in store.query(
            "SELECT algorithm, operation, median(ns) AS m FROM primitive_samples "
            "WHERE backend = 'openssl' AND NOT dropped GROUP BY ALL"
        )
    }
    x25519 = (("X25519", "keygen"), ("X25519", "shared_secret"))
    pairs = (
        ("key exchange, client", "X25519", x25519, "X25519MLKEM768",
         (*x25519, ("ML-KEM-768", "keygen"), ("ML-KEM-768", "decaps"))),
        ("key exchange, server", "X25519", x25519, "X25519MLKEM768",
         (*x25519, ("ML-KEM-768", "encaps"))),
        ("CertificateVerify, server", "ECDSA-P256", (("ECDSA-P256", "sign"),), "ML-DSA-44",
         (("ML-DSA-44", "sign"),)),
        ("CertificateVerify, client", "ECDSA-P256", (("ECDSA-P256", "verify"),), "ML-DSA-44",
         (("ML-DSA-44", "verify"),)),
    )  # fmt: skip
    rows, parts = [], []
    for what, a, aops, b, bops in pairs:
        if not all(k in med for k in (*aops, *bops)):
            continue
        base, cand = sum(med[k] for k in aops), sum(med[k] for k in bops)
        ops = " + ".join(f"{alg} {op}" for alg, op in bops)
        rows.append(
            row(
                "cryptography per handshake", f"{a} -> {b} ({ops}; OpenSSL)", what, "ms", base, cand
            )
        )
        parts.append(
            f"{html.escape(what)}: {html.escape(a)} {base * 1e3:.0f} us &rarr; "
            f"{html.escape(b)} {cand * 1e3:.0f} us"
        )
    if not parts:
        return None
    return Summary(
        rows,
        [template("summary_primitives", details="; ".join(parts))],
        template("summary_note_primitives"),
    )
