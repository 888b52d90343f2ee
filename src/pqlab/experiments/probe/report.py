"""The probe's tables (probe.csv, probe_connections.csv, probe_messages.csv,
probe_chain.csv), its figure (each configuration's handshake as the client saw it) and its
report section and summary lines, from the database alone."""

from __future__ import annotations

from pqlab import figures
from pqlab.experiments.probe import verdict
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
    section.table(csv, "One row per probe and client configuration: what the server did")
    for line in _server_lines(store):
        section.text(f"<p><b>{_html(line)}</b></p>")
    png = _figure(store)
    if png is not None:
        section.figure(
            png,
            "Each configuration's first handshake as the client saw it: when each message "
            "left or arrived, from the client's SYN (a HelloRetryRequest and a flight that "
            "waited for an ACK each add a round trip)",
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
                  signature_algorithm, self_signed, subject, issuer, sha256
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


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _server_lines(store) -> list[str]:
    names = [r["probe"] for r in store.query("SELECT DISTINCT probe FROM probe_raw ORDER BY 1")]
    return [
        verdict.server_verdict(name, store.query("SELECT * FROM probe_raw WHERE probe = ?", [name]))
        for name in names
    ]


def _figure(store):
    """Per configuration, the first connection's messages on a time line."""
    import matplotlib.pyplot as plt

    msgs = store.query(
        """SELECT m.probe, m.stack, m.config, m.sig, m.sender, m.message, m.at_ms,
                  m.length_bytes
           FROM probe_messages m
           WHERE m.at_ms IS NOT NULL AND m.idx = (
               SELECT min(idx) FROM probe_messages x WHERE x.cell_id = m.cell_id)
           ORDER BY m.probe, m.stack, m.config, m.sig, m.seq"""
    )
    if not msgs:
        return None
    keys = list(dict.fromkeys((m["probe"], m["stack"], m["config"], m["sig"]) for m in msgs))
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(keys) + 1.4))
    colors = {"client": "tab:blue", "server": "tab:orange"}
    for y, key in enumerate(keys):
        mine = [m for m in msgs if (m["probe"], m["stack"], m["config"], m["sig"]) == key]
        for m in mine:
            ax.plot(m["at_ms"], y, "|" if m["sender"] == "client" else "o",
                    color=colors[m["sender"]], markersize=9)  # fmt: skip
        last = max(m["at_ms"] for m in mine)
        ax.annotate(
            ", ".join(
                f"{m['message']} {m['length_bytes']:,}" for m in mine if m["sender"] == "server"
            )[:110],
            (last, y),
            xytext=(6, -3),
            textcoords="offset points",
            fontsize=6,
        )
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(
        [f"{p} {c}" + ("" if s == "default" else f" {s}") + f" ({st})" for p, st, c, s in keys],
        fontsize=7,
    )
    ax.invert_yaxis()
    ax.set_xlabel("ms since the client's SYN (| sent by the client, o received from the server)")
    fig.tight_layout()
    return figures.save(fig, store, "probe_timeline")


def summarize(store) -> Summary | None:
    if not store.has_table("probe_raw"):
        return None
    lines = _server_lines(store)
    if not lines:
        return None
    return Summary(
        items=[_html(line) for line in lines],
        note="<p>Probes: what each server did with each client configuration, from the "
        "client's side (see the probe section).</p>",
    )
