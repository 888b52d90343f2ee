"""Document 002's DHE per prime size (tables/tls12_dhe.csv): the RFC primes beside parameters
the server generated, with the private exponent length the server drew, the handshake time
with each, their ratio with a bootstrap interval, and each one's ratio to RSA key exchange
beside the document's. Derived from tls12's summary rows and raw handshakes."""

from __future__ import annotations

import html

from pqlab import stats

COLUMNS = [
    "dh_bits",
    "cert",
    "rfc_private_bits",
    "generated_private_bits",
    "rfc_n",
    "generated_n",
    "rfc_mean_ms",
    "generated_mean_ms",
    "rfc_median_ms",
    "generated_median_ms",
    "generated_over_rfc",
    "ci_low",
    "ci_high",
    "generated_costs_more",
    "expected",
    "rfc_ratio_vs_rsa",
    "generated_ratio_vs_rsa",
    "document_ratio_vs_rsa",
    "host_pair",
]

# Exponents this much longer make the generated parameters measurably dearer (the cost of a
# modular exponentiation grows with the exponent's length; 64 bits is a few per cent).
LONGER_BITS = 64


def _expected(rfc_bits: int | None, gen_bits: int | None) -> str:
    if rfc_bits is None or gen_bits is None:
        return "unknown (an exponent length is missing)"
    if gen_bits > rfc_bits + LONGER_BITS:
        return f"generated dearer ({gen_bits}- against {rfc_bits}-bit exponents)"
    return f"same cost ({rfc_bits}- and {gen_bits}-bit exponents)"


# Cells run one after another, so a shared machine's slower or faster minutes land on one of
# them: a difference smaller than this is not called one, whatever its interval.
MARGIN = 0.05


def _verdict(lo: float, hi: float) -> str:
    """From the bootstrap interval of generated/RFC - 1."""
    if lo > MARGIN:
        return "yes"
    if hi < -MARGIN:
        return "no (generated cheaper)"
    if -MARGIN <= lo and hi <= MARGIN:
        return "no difference (within 5 %)"
    return "unclear (the interval crosses the 5 % margin)"


def table(rows: list[dict]) -> list[dict]:
    """One row per (DHE size, certificate, host pair) measured with both kinds of parameters.
    `rows` are tls12's summary rows, each with its `host_pair` and its handshake times in
    milliseconds (`_ms`)."""
    dhe = {}
    for r in rows:
        if r["version"] != "1.2" or not r.get("n") or r.get("dh_params") is None:
            continue
        bits = int(r["kex"].removeprefix("DHE-").removesuffix("-generated"))
        dhe[(bits, r["cert"], r.get("host_pair"), r["dh_params"])] = r
    out = []
    for (bits, cert, pair, source), gen in sorted(dhe.items(), key=lambda kv: kv[0][:2]):
        rfc = dhe.get((bits, cert, pair, "rfc"))
        if source != "generated" or rfc is None:
            continue
        est, lo, hi = stats.bootstrap_ci(rfc["_ms"], gen["_ms"])
        out.append(
            {
                "dh_bits": bits,
                "cert": cert,
                "rfc_private_bits": rfc.get("dh_private_bits"),
                "generated_private_bits": gen.get("dh_private_bits"),
                "rfc_n": rfc["n"],
                "generated_n": gen["n"],
                "rfc_mean_ms": rfc["mean_ms"],
                "generated_mean_ms": gen["mean_ms"],
                "rfc_median_ms": rfc["median_ms"],
                "generated_median_ms": gen["median_ms"],
                "generated_over_rfc": round(1 + est, 3),
                "ci_low": round(1 + lo, 3),
                "ci_high": round(1 + hi, 3),
                "generated_costs_more": _verdict(lo, hi),
                "expected": _expected(rfc.get("dh_private_bits"), gen.get("dh_private_bits")),
                "rfc_ratio_vs_rsa": rfc.get("ratio_vs_rsa"),
                "generated_ratio_vs_rsa": gen.get("ratio_vs_rsa"),
                "document_ratio_vs_rsa": gen.get("document_ratio_vs_rsa"),
                "host_pair": pair,
            }
        )
    return out


CAPTION = (
    "Document 002's DHE per prime size: the private exponent the server drew (longest of the "
    "cell's handshakes) and the handshake time with the RFC primes and with parameters the "
    "server generated; generated_over_rfc is the ratio of median times with its 95 % "
    "bootstrap interval (ci_low-ci_high), generated_costs_more says whether the interval lies "
    "above 1.05 (cells measured one after another can differ by a few per cent on a shared "
    "machine), expected what the exponent lengths predict; the ratios to RSA key exchange are "
    "of means, as the document's"
)


def text(table_rows: list[dict]) -> str:
    """The report's explanation, with this run's numbers."""
    items = "".join(
        f"<li>DHE-{r['dh_bits']} ({html.escape(r['cert'])}): RFC prime "
        f"{r['rfc_median_ms']} ms with {r['rfc_private_bits']}-bit exponents, generated "
        f"{r['generated_median_ms']} ms with {r['generated_private_bits']}-bit exponents: "
        f"<b>{r['generated_over_rfc']}x</b> ({r['ci_low']}-{r['ci_high']}: "
        f"{html.escape(r['generated_costs_more'])}); "
        f"{r['generated_ratio_vs_rsa']}x RSA key exchange against the document's "
        f"{r['document_ratio_vs_rsa']}x</li>"
        for r in table_rows
    )
    return (
        "<h3>Why DHE cost so much in document 002: the private exponent</h3>"
        "<p>A DHE handshake costs the server two modular exponentiations (its key share and "
        "the shared secret), each as long as the private exponent. Document 002's nginx "
        "(OpenSSL 1.1.1) used parameters made by <code>openssl dhparam</code>, which match no "
        "named group, so every exponent was as long as the prime: DHE-2048 cost 4.75x and "
        "DHE-3072 10.85x RSA key exchange on its Raspberry Pi. OpenSSL 3 recognises the RFC "
        "3526 primes as named groups and draws exponents of twice the group's security "
        "strength instead (at most 225/275/325 bits for 2048/3072/4096), so the same prime "
        "sizes cost far less. OpenSSL has no named group for the RFC 2409 1024-bit prime, so "
        "pqlab's 1024-bit RFC parameters are RFC 5114's 1024-bit group with a 160-bit "
        "subgroup, which OpenSSL names <code>dh_1024_160</code> and draws 160-bit exponents "
        "for. The exponent lengths are the server's own, read from its "
        "ephemeral key in every handshake.</p><ul>" + items + "</ul>"
        "<p>The ratios to RSA key exchange come out larger here than in the document, for "
        "both kinds of parameters: the document timed whole <code>openssl s_client</code> "
        "processes against a Raspberry Pi (process start-up and a network path in every "
        "sample, a constant that pulls every ratio towards 1, and a desktop client whose half "
        "of the DH work was quick), while pqlab times the handshake alone with both ends on "
        "this machine, and a client given generated parameters draws full-length exponents "
        "too. Compare which kind costs more and how the cost grows with the prime, not the "
        "factors themselves; <code>--server-cpu</code> makes the server the slower end, as "
        "the Pi was.</p>"
    )
