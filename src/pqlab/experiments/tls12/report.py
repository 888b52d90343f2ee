"""The tls12 experiment's tables, figure and report section, beside document 002's ratios."""

from __future__ import annotations

import html

from pqlab import figures, stats
from pqlab.experiments.tls12 import dhe as tls12_dhe
from pqlab.experiments.tls12.plan import CERTS, KEX12, KEX13
from pqlab.report.section import Section, template

# Document 002's handshake time / RSA key exchange's, RSA-2048 and ECDSA P-256 certificates
# (OpenSSL 1.1.1 in nginx on a Raspberry Pi 2; its DHE used parameters the server
# generated, so full-length private exponents).
DOCUMENT_RATIOS = {
    ("RSA", "RSA-2048"): 1.0,
    ("DHE-1024", "RSA-2048"): 1.51,
    ("DHE-2048", "RSA-2048"): 4.75,
    ("DHE-3072", "RSA-2048"): 10.85,
    ("DHE-4096", "RSA-2048"): 22.16,
    ("ECDHE-P-256", "RSA-2048"): 0.96,
    ("ECDHE-P-384", "RSA-2048"): 2.44,
    ("ECDHE-P-521", "RSA-2048"): 4.24,
    ("ECDHE-X25519", "RSA-2048"): 0.95,
    ("ECDHE-X448", "RSA-2048"): 1.33,
    ("ECDHE-P-256", "ECDSA-P-256"): 0.40,
    ("ECDHE-P-384", "ECDSA-P-256"): 1.93,
    ("ECDHE-P-521", "ECDSA-P-256"): 3.89,
    ("ECDHE-X25519", "ECDSA-P-256"): 0.44,
    ("ECDHE-X448", "ECDSA-P-256"): 0.71,
}


def _summary_rows(store) -> list[dict]:
    cells = store.query("SELECT * FROM tls12_cells")
    samples: dict[str, list[int]] = {}
    for r in store.query(
        "SELECT cell_id, connect_to_handshake_ns AS ns, "
        "server_handshake_ns AS sns FROM tls12_handshakes"
    ):
        samples.setdefault(r["cell_id"], []).append(r)
    meta = {
        r["cell_id"]: r
        for r in store.query(
            "SELECT cell_id, any_value(sigalg) AS sigalg, any_value(grp) AS grp, "
            "any_value(cipher) AS cipher, any_value(peer_tmp_key_bits) AS tmp_bits, "
            "median(bytes_received) AS server_bytes, "
            "max(server_dh_private_bits) AS server_dh_bits "
            "FROM tls12_handshakes GROUP BY cell_id"
        )
    }
    bases = {}  # per host pair (None: this machine): the TLS 1.2 RSA / RSA-2048 cell
    for c in cells:
        if c["version"] == "1.2" and c["kex"] == "RSA" and c["cert"] == "RSA-2048" and c["n"]:
            bases[c.get("host_pair")] = stats.summarize([s["ns"] for s in samples[c["cell_id"]]])
    order = {("1.2", k.label): i for i, k in enumerate(KEX12)}
    order.update({("1.2", k.with_source("generated").label): i + 0.5 for i, k in enumerate(KEX12)})
    order.update({("1.3", k.label): 100 + i for i, k in enumerate(KEX13)})
    rows = []
    for c in sorted(
        cells,
        key=lambda c: (order.get((c["version"], c["kex"]), 999), list(CERTS).index(c["cert"])),
    ):
        row = {"version": c["version"], "kex": c["kex"], "cert": c["cert"], "n": c["n"]}
        row["host_pair"] = c.get("host_pair")
        row["dh_params"] = c.get("dh_params")
        # The longest exponent the server drew in the cell (older runs: what `dhparams`
        # drew with the same parameters).
        m = meta.get(c["cell_id"]) or {}
        row["dh_private_bits"] = m.get("server_dh_bits") or c.get("dh_private_bits")
        base_kex = c["kex"].removesuffix("-generated")
        row["document_ratio_vs_rsa"] = (
            DOCUMENT_RATIOS.get((base_kex, c["cert"])) if c["version"] == "1.2" else None
        )
        base = bases.get(c.get("host_pair"))
        s = samples.get(c["cell_id"])
        if s:
            row["_ms"] = [x["ns"] / 1e6 for x in s]
            summ = stats.summarize(row["_ms"])
            srv = [x["sns"] / 1e6 for x in s if x["sns"] is not None]
            m = meta[c["cell_id"]]
            row.update(
                {
                    "mean_ms": round(summ["mean"], 4),
                    "median_ms": round(summ["median"], 4),
                    "p90_ms": round(summ["p90"], 4),
                    "sd_ms": round(summ["sd"], 4),
                    "robust_cv": round(summ["robust_cv"], 4),
                    "ratio_vs_rsa": round(summ["mean"] / (base["mean"] / 1e6), 3) if base else None,
                    "median_ratio_vs_rsa": (
                        round(summ["median"] / (base["median"] / 1e6), 3) if base else None
                    ),
                    "server_median_ms": round(float(stats.percentiles(srv, (50,))["p50"]), 4)
                    if srv
                    else None,
                    "suite": m["cipher"],
                    "group": m["grp"] or (f"DH {m['tmp_bits']} bit" if m["tmp_bits"] else "-"),
                    "server_sigalg": m["sigalg"] or "-",
                    "bytes_from_server": int(m["server_bytes"]) if m["server_bytes"] else None,
                }
            )
        if c.get("server_cpu_ms") is not None and c.get("connections"):
            row["server_cpu_ms_per_handshake"] = round(c["server_cpu_ms"] / c["connections"], 4)
        row.update({"server_cpu": c["server_cpu"], "profile": c["profile"], "note": c["note"]})
        rows.append(row)
    return rows


COLUMNS = [
    "version",
    "kex",
    "cert",
    "n",
    "mean_ms",
    "median_ms",
    "p90_ms",
    "ratio_vs_rsa",
    "median_ratio_vs_rsa",
    "document_ratio_vs_rsa",
    "dh_params",
    "dh_private_bits",
    "sd_ms",
    "robust_cv",
    "server_median_ms",
    "suite",
    "group",
    "server_sigalg",
    "bytes_from_server",
    "server_cpu_ms_per_handshake",
    "server_cpu",
    "profile",
    "note",
]


def export(store) -> Section | None:
    if not store.has_table("tls12_cells") or not store.query("SELECT 1 FROM tls12_cells LIMIT 1"):
        return None
    rows = _summary_rows(store)
    csv_path = store.export_rows("tls12", rows, COLUMNS)
    cells = store.query(
        "SELECT DISTINCT server_cpu, cpu_mechanism, profile, link, "
        "client_security_level FROM tls12_cells WHERE n > 0"
    )
    section = Section(title="TLS 1.2 key exchange (and TLS 1.3 counterparts)")
    cpu = cells[0] if cells else {}
    limit = (
        f"limited to {cpu.get('server_cpu')} of one core by {cpu.get('cpu_mechanism')}"
        if cpu.get("server_cpu")
        else "not limited"
    )
    section.intro = template(
        "tls12_intro",
        server_cpu=html.escape(limit),
        link=html.escape(str(cpu.get("link", "?"))),
        profile=html.escape(str(cpu.get("profile", "none"))),
        level=html.escape(str(cpu.get("client_security_level"))),
    )
    section.table(csv_path, "Handshake time per key exchange and certificate (ms)")
    dhe = tls12_dhe.table(rows)
    if dhe:
        section.text(tls12_dhe.text(dhe))
        section.table(store.export_rows("tls12_dhe", dhe, tls12_dhe.COLUMNS), tls12_dhe.CAPTION)
    _figure(store, section, rows)
    return section


def _figure(store, section: Section, rows: list[dict]) -> None:
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.get("n")]
    if not measured:
        return
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(measured) + 1.2))
    labels = [f"TLS {r['version']} {r['kex']} / {r['cert']}" for r in measured]
    y = range(len(measured))
    colors = ["#4477aa" if r["cert"].startswith("RSA") else "#ee7733" for r in measured]
    ax.barh(list(y), [r["median_ms"] for r in measured], color=colors)
    ax.errorbar(
        [r["median_ms"] for r in measured],
        list(y),
        xerr=[[0] * len(measured), [max(0.0, r["p90_ms"] - r["median_ms"]) for r in measured]],
        fmt="none",
        ecolor="#333",
        capsize=2,
        linewidth=0.8,
    )
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("handshake time, connect to complete (ms): median, whisker to p90")
    png = figures.save(fig, store, "tls12_handshake_times")
    section.figure(
        png,
        "Median handshake time per key exchange (blue: RSA-2048 "
        "certificate, orange: ECDSA P-256), whiskers to the 90th percentile",
    )
