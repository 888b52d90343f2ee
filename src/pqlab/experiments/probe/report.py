"""The probe's tables (probe.csv, probe_connections.csv, probe_messages.csv,
probe_chain.csv), its figure (each configuration's handshake as the client saw it) and its
report section and summary lines, from the database alone."""

from __future__ import annotations

from pqlab import figures
from pqlab.experiments.probe import scan_report, verdict
from pqlab.report.section import Section, template
from pqlab.report.summary import Summary

CONFIG_COLUMNS = """
    c.probe, c.target, c.stack, c.config, c.sig, c.connections AS n, c.outcome,
    any_value(r."group") FILTER (WHERE r."group" IS NOT NULL) AS "group",
    bool_or(r.post_quantum) AS post_quantum,
    any_value(r.sigalg) FILTER (WHERE r.sigalg IS NOT NULL) AS sigalg,
    bool_or(r.hello_retry) AS hello_retry,
    any_value(r.version) FILTER (WHERE r.version IS NOT NULL) AS version,
    any_value(r.cipher) FILTER (WHERE r.cipher IS NOT NULL) AS cipher,
    any_value(r.alert) FILTER (WHERE r.alert IS NOT NULL) AS alert,
    max(r.chain_certs) AS chain_certs, max(r.chain_der_bytes) AS chain_der_bytes,
    bool_and(r.verified) AS verified,
    max(r.session_tickets) AS session_tickets,
    max(r.client_hello_bytes) AS client_hello_bytes,
    max(r.hello_retry_bytes) AS hello_retry_bytes,
    median(r.server_flight_bytes) AS server_flight_bytes,
    median(r.server_flight_segments) AS server_flight_segments,
    median(r.round_trips) AS round_trips,
    sum(CASE WHEN r.ack_waits > 0 THEN 1 ELSE 0 END) AS connections_waiting_for_ack,
    median(r.ack_wait_ms) AS ack_wait_ms,
    median(r.tcp_rtt_ms) AS tcp_rtt_ms,
    median(r.server_wait_ms) AS server_wait_ms,
    median(r.ttfb_ms) AS ttfb_ms_p50, quantile_cont(r.ttfb_ms, 0.9) AS ttfb_ms_p90,
    median(r.ttlb_ms) AS ttlb_ms_p50, quantile_cont(r.ttlb_ms, 0.9) AS ttlb_ms_p90,
    any_value(r.messages_from) AS messages_from,
    c.verdict
"""


def export(store):
    if not store.has_table("probe_configs"):
        return None
    rows = store.query("SELECT count(*) AS n FROM probe_configs")
    if not rows or not rows[0]["n"]:
        return None
    section = Section("Probes of TLS servers", template("probe_intro"))
    csv = store.export_table(
        "probe",
        f"""
        SELECT {CONFIG_COLUMNS}
        FROM probe_configs c LEFT JOIN probe_raw r USING (cell_id)
        GROUP BY ALL ORDER BY c.probe, c.stack, c.config, c.sig""",
    )
    scan = scan_report.is_scan(store)
    if scan:  # a scan's targets first; a line and a figure row per target would drown them
        scan_report.add(store, section)
    section.table(
        csv,
        "One row per probe and client configuration: what the server did",
        max_rows=100 if scan else 60,
    )
    for line in [] if scan else _server_lines(store):
        section.text(f"<p><b>{_html(line)}</b></p>")
    png = None if scan else _figure(store)
    if png is not None:
        section.figure(
            png,
            "Each configuration's first connection as the client saw it: left, when each "
            "message left or arrived, from the client's SYN (a HelloRetryRequest and a flight "
            "that waited for an ACK each add a round trip; x: where a failed one ended); "
            "right, the bytes each way",
        )
    csv = store.export_table(
        "probe_messages",
        """SELECT probe, stack, config, sig, idx, seq, sender, message, type_code,
                  length_bytes, record_end, at_ms, source
           FROM probe_messages ORDER BY probe, stack, config, sig, idx, seq""",
    )
    section.table(csv, "Every handshake message of every connection (first rows)", max_rows=40)
    csv = store.export_table(
        "probe_chain",
        """SELECT DISTINCT probe, stack, config, sig, position, der_bytes, key_algorithm,
                  signature_algorithm, self_signed, not_after, subject, issuer, sha256
           FROM probe_chain ORDER BY probe, stack, config, sig, position""",
    )
    section.table(csv, "The certificates each server sent, leaf first")
    csv = store.export_table(
        "probe_connections",
        """SELECT * EXCLUDE (record) FROM probe_raw
           ORDER BY probe, stack, config, sig, idx""",
    )
    section.table(csv, "Every connection (first rows)", max_rows=30)
    return section


changes = scan_report.changes  # `pqlab compare`: the targets of two scans that changed


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _server_lines(store) -> list[str]:
    names = [r["probe"] for r in store.query("SELECT DISTINCT probe FROM probe_raw ORDER BY 1")]
    return [
        verdict.server_verdict(name, store.query("SELECT * FROM probe_raw WHERE probe = ?", [name]))
        for name in names
    ]


FIRST_CONNECTIONS = """
    SELECT * FROM probe_raw r
    WHERE r.idx = (SELECT min(idx) FROM probe_raw x WHERE x.cell_id = r.cell_id)
    ORDER BY r.probe, r.stack, r.config, r.sig"""


def _label(row: dict, several_probes: bool, several_stacks: bool) -> str:
    parts = [row["probe"]] if several_probes else []
    parts.append(row["config"] + ("" if row["sig"] == "default" else f" {row['sig']}"))
    if several_stacks:
        parts.append(f"({row['stack']})")
    return " ".join(parts)


def _figure(store):
    """Per configuration, its first connection: the messages on a time line (left) and the
    bytes each way (right)."""
    import matplotlib.pyplot as plt

    firsts = store.query(FIRST_CONNECTIONS)
    if not firsts:
        return None
    msgs = store.query(
        "SELECT cell_id, idx, sender, message, at_ms FROM probe_messages WHERE at_ms IS NOT NULL"
    )
    several = (len({r["probe"] for r in firsts}) > 1, len({r["stack"] for r in firsts}) > 1)
    fig, (ax, bx) = plt.subplots(
        1, 2, figsize=(11, 0.45 * len(firsts) + 1.6), sharey=True,
        gridspec_kw={"width_ratios": [3, 2]},
    )  # fmt: skip
    for y, r in enumerate(firsts):
        _timeline_row(
            ax, y, r, [m for m in msgs if (m["cell_id"], m["idx"]) == (r["cell_id"], r["idx"])]
        )
        _bytes_row(bx, y, r)
    ax.set_yticks(range(len(firsts)))
    ax.set_yticklabels([_label(r, *several) for r in firsts], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the client's SYN: | client sent, o server message arrived, x ended")
    bx.set_xlabel("bytes")
    widest = max(sum(r.get(k) or 0 for k, _, _ in BYTES) for r in firsts)
    bx.set_xlim(0, 1.35 * widest or 1)
    from matplotlib.patches import Patch

    bx.legend(
        handles=[Patch(color=c, label=n) for _, c, n in BYTES],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.6 / (len(firsts) + 2)),
        ncol=3,
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    return figures.save(fig, store, "probe_timeline")


def _timeline_row(ax, y: int, row: dict, msgs: list[dict]) -> None:
    for m in msgs:
        client = m["sender"] == "client"
        ax.plot(m["at_ms"], y, "|" if client else "o", color="tab:blue" if client else "tab:orange",
                markersize=10 if client else 5, alpha=0.8)  # fmt: skip
    if row["outcome"] not in ("accepted", "hello-retry"):
        at = row.get("failed_at_ms")
        if at is not None:
            ax.plot(at, y, "x", color="tab:red", markersize=8)
            ax.annotate(row["outcome"], (at, y), xytext=(5, -3), textcoords="offset points",
                        fontsize=7, color="tab:red")  # fmt: skip
    elif row.get("ack_waits"):
        ax.annotate(f"waited {row['ack_wait_ms']:.1f} ms for an ACK", (0, y), xytext=(0, 6),
                    textcoords="offset points", fontsize=6)  # fmt: skip


BYTES = (
    ("client_hello_bytes", "tab:blue", "ClientHello"),
    ("hello_retry_bytes", "tab:gray", "HelloRetryRequest + 2nd ClientHello"),
    ("server_flight_bytes", "tab:orange", "server flight"),
)


def _bytes_row(bx, y: int, row: dict) -> None:
    left = 0
    for key, color, _ in BYTES:
        width = row.get(key) or 0
        if width:
            bx.barh(y, width, left=left, color=color, height=0.6)
            left += width
    if row.get("server_flight_bytes"):
        segs = row.get("server_flight_segments")
        bx.annotate(f"{row['server_flight_bytes']:,} B" + (f", {segs} seg" if segs else ""),
                    (left, y), xytext=(3, -3), textcoords="offset points", fontsize=7)  # fmt: skip


def summarize(store) -> Summary | None:
    if not store.has_table("probe_raw"):
        return None
    lines = (
        [scan_report.summary_line(store)] if scan_report.is_scan(store) else _server_lines(store)
    )
    if not lines:
        return None
    return Summary(
        items=[_html(line) for line in lines],
        note="<p>Probes: what each server did with each client configuration, from the "
        "client's side (see the probe section).</p>",
    )
