"""The handshake experiment's tables, figures and report section, from the database alone
(the document's table 9 segment counts, phases in both views, message sizes, client
processing tables 10-12, stacked-bar figures 8 and 13-18, flight size figures 9-12)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from pqlab import catalog, figures
from pqlab.errors import UserError
from pqlab.experiments.handshake import (
    clocks,
    document000,
    features,
    prediction_report,
    wire_bytes,
)
from pqlab.experiments.handshake import summary as summary_part
from pqlab.experiments.handshake.analyse import SIZE_COLUMNS
from pqlab.experiments.handshake.plan import DEFAULT_GROUPS, DEFAULT_SIGS
from pqlab.report.section import Section, template
from pqlab.tls import flight, stacks
from pqlab.tls import phases as hp


def thresholds(model: flight.WriteModel) -> list[tuple[int, str]]:
    """Document 000's thresholds (section 4-3-2) for a stack's write model: the buffer ones
    for a buffering stack (OpenSSL: 4096 ... 14232), the bare initial window otherwise."""
    t = flight.thresholds(model)
    if not t:
        w = flight.DEFAULT_INITCWND * flight.DEFAULT_MSS
        return [(w, f"{w} B: {flight.DEFAULT_INITCWND} x {flight.DEFAULT_MSS} (initcwnd)")]
    b, mss = t["buffer"], flight.DEFAULT_MSS
    return [
        (b, f"{b} B: write buffer"),
        (t["two_buffers"], f"{t['two_buffers']} B: two buffers"),
        (t["nine_segments"], f"{t['nine_segments']} B: {b} + 6 x {mss} (9 segments)"),
        (t["cwnd_after_two_buffers"], f"{t['cwnd_after_two_buffers']} B: {2 * b} + 4 x {mss}"),
        (t["cwnd_after_one_buffer"], f"{t['cwnd_after_one_buffer']} B: {b} + 7 x {mss}"),
    ]


def _run_stacks(store) -> list[stacks.Stack]:
    """The stacks this run's handshake cells ran on (known to this engine build)."""
    names = [r["stack"] for r in store.query("SELECT DISTINCT stack FROM handshake_raw")]
    known = stacks.all_stacks()
    return [known[n] for n in sorted(n or stacks.DEFAULT_STACK for n in names) if n in known]


FAMILY_COLOURS = {
    "transmission": ["#00441b", "#1b7837", "#41ab5d", "#74c476", "#a1d99b", "#c7e9c0"],
    "tcp": ["#525252", "#969696"],
    "client": ["#08306b", "#2171b5", "#6baed6", "#c6dbef"],
    "server": ["#67000d", "#a50f15", "#ef3b2c", "#fc9272", "#fcbba1"],
    "waiting": ["#8c6d00", "#e6b800", "#ffe680"],
}
HATCHED = {"server", "waiting"}


def phase_colours() -> dict[str, tuple[str, str]]:
    """Colour and hatch of every phase name: one shade per phase within its family."""
    out: dict[str, tuple[str, str]] = {}
    used: dict[str, int] = {}
    for table in (hp.CLIENT_PHASES, hp.SERVER_PHASES, hp.CLIENT_FLIGHT_PHASES):
        for name, _, _, family in table:
            if name in out:
                continue
            i = used.get(family, 0)
            used[family] = i + 1
            shades = FAMILY_COLOURS[family]
            out[name] = (shades[i % len(shades)], "//" if family in HATCHED else "")
    return out


def _order_sql(store) -> None:
    """A temporary table giving each algorithm name its position (the documents' order
    first, then catalogue order), so every table lists cells the same way."""
    names = [
        r["n"]
        for r in store.query(
            'SELECT DISTINCT "group" AS n FROM handshake_raw UNION '
            "SELECT DISTINCT server_sig FROM handshake_raw UNION "
            "SELECT DISTINCT ca_sig FROM handshake_raw"
        )
    ]
    pref = []
    for name, kind in [(g, "kem") for g in DEFAULT_GROUPS] + [(x, "sig") for x in DEFAULT_SIGS]:
        try:
            pref.append(catalog.resolve(name, kind).name)  # canonical: "P-256" -> "ECDSA-P256"
        except UserError:
            pref.append(name)
    ranked = sorted(names, key=lambda n: (pref.index(n) if n in pref else len(pref), n))
    store.con.execute("CREATE OR REPLACE TEMP TABLE hs_order (name TEXT, pos INTEGER)")
    if ranked:
        store.con.executemany(
            "INSERT INTO hs_order VALUES (?, ?)", [[n, i] for i, n in enumerate(ranked)]
        )


ORDER_JOIN = """
JOIN hs_order og ON og.name = t."group" JOIN hs_order os ON os.name = t.server_sig
JOIN hs_order oc ON oc.name = t.ca_sig
"""


def export(store):

    section = Section("TLS 1.3 handshakes, message by message", intro=template("handshake_intro"))
    if not store.has_table("handshake_raw"):
        section.text("<p>No handshake cell finished.</p>")
        return section
    _order_sql(store)
    # The figures first: inside the export's rendering their workers draw them while the
    # tables below are written (they go into the section in their place, after the tables).
    drawn = _figures(store)
    section.table(
        _segment_table(store),
        "TCP segments the server sent from ServerHello through Finished (median), as table "
        "9 of the document: rows key exchange, columns CA / server signer",
    )
    section.table(
        _summary_table(store),
        "Per cell: handshake time (SYN sent to the server's Finished "
        "received at the client), server flight, bytes each way, write-buffer "
        "splits and congestion-window stalls (table 9 and more)",
    )
    if "client_payload_bytes" in store.columns("handshake_raw"):
        wire = wire_bytes.rows(store)
        if any(r.get("total_payload_bytes") for r in wire):
            section.table(
                store.export_rows("wire_bytes", wire, list(wire_bytes.COLUMNS)),
                "Document 004's TLS 1.3 data transmission size: the bytes of a mutually "
                "authenticated connection with its request and response (TCP payload each "
                "way, as the document summed tcp.len; IP bytes; the handshake's own IP bytes), "
                "beside the document's rows; rows no cell matched say why",
                max_rows=80,
            )
    prediction_report.extend_section(store, section)
    if {"client_hello_segments", "server_hello_segments"} <= store.columns("handshake_raw"):
        csv_path, text = _hello_table(store)
        section.text(text)
        section.table(
            csv_path,
            "TCP segments that carried the ClientHello (client capture) and the ServerHello "
            "(server capture), per key exchange: median and largest over every handshake",
        )
    section.table(
        _phase_table(store),
        "Mean and median of every phase of the legend, client and server view, and the TCP "
        "segments retransmitted (either way) while it ran, summed over the cell's handshakes",
        max_rows=48,
    )
    section.table(
        _size_table(store),
        "Handshake message sizes (bytes, 4-byte handshake header included) "
        "and where the stack's writes split the server flight (its write model)",
    )
    section.table(
        _processing_table(store),
        "Client processing time: ServerHello received to client "
        "Finished sent, mean ms, server signer x CA signer per group (tables 10-12)",
    )
    cells = document000.rows(store)
    if cells:
        section.table(
            store.export_rows(
                "handshake_client_processing_cells", cells, list(document000.COLUMNS)
            ),
            "Tables 10-12 cell by cell, beside the document's: the client's processing time, "
            "ServerHello + Certificate bytes and the document's shading (4096 to 8192 bytes: "
            "the rest of Certificate waits for CertificateVerify), the TCP segments from "
            "ServerHello to CertificateVerify and through Finished",
            max_rows=60,
        )
    if store.has_table("handshake_capture"):
        captures = store.export_table(
            "handshake_captures",
            "SELECT cell_id, side, handshakes, packets, kernel_packets, kernel_drops, "
            "userspace_timestamps, round(seconds, 3) AS seconds, pcap "
            "FROM handshake_capture ORDER BY cell_id, side",
        )
        section.text(_lab_text(store))
        section.table(
            captures,
            "Captures per cell and host: packets written, packets the kernel's filter "
            "saw, drops (must be 0), time the cell's handshakes took",
        )
    if store.has_table("handshake_load") and store.query("SELECT 1 FROM handshake_load LIMIT 1"):
        section.text(template("handshake_load"))
        section.table(
            _load_table(store),
            "CPU time and peak memory of the server and client processes per cell",
        )
    for png, caption in drawn:
        section.figure(png, caption)
    section.text(template("handshake_mechanisms"))
    section.text(_write_models_text(store))
    section.table(
        store.export_rows("handshake_features", features.rows(store)),
        "Document 000's features 1-6 of the server's timing: the rule that finds each, the "
        "document's examples and the cells of this run that show it",
    )
    clocks.extend_section(store, section)
    return section


MS = "/ 1e6"
STACK = stacks.STACK_SQL


def _q(text: str) -> str:
    return text.replace("'", "''")


def _summary_table(store) -> Path:
    ms = MS
    return store.export_table(
        "handshake_summary",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig, count(*) AS n,
          median(handshake_ns) {ms} AS median_ms, avg(handshake_ns) {ms} AS mean_ms,
          quantile_cont(handshake_ns, 0.9) {ms} AS p90_ms,
          median(server_flight_segments) AS server_flight_segments,
          median(server_flight_bytes) AS server_flight_bytes,
          median(client_bytes) AS client_bytes, median(server_bytes) AS server_bytes,
          median(total_ns) {ms} AS median_total_ms,
          median(client_processing_ns) {ms} AS median_client_processing_ms,
          median(bytes_through_certificate) AS bytes_through_certificate,
          median(server_hello_bytes) + median(certificate_bytes) AS server_hello_certificate_bytes,
          median(writes_predicted) AS flight_writes,
          avg(CASE WHEN split_by_write_buffer THEN 1 ELSE 0 END) AS flight_split_fraction,
          avg(CASE WHEN cwnd_stalls > 0 THEN 1 ELSE 0 END) AS cwnd_stall_fraction,
          avg(cwnd_stall_wait_ns) {ms} AS mean_cwnd_stall_wait_ms,
          avg(sh_to_cert_ns) {ms} AS mean_sh_to_cert_ms,
          avg(sh_to_fin_ns) {ms} AS mean_sh_to_fin_ms,
          sum(server_flight_retransmissions) AS retransmissions,
          median(server_snd_cwnd) AS server_snd_cwnd_after,
          any_value(t.stack) AS stack, any_value(t.chain_sent) AS chain_sent, t.cell_id,
          mode(document_case) AS document_case,
          avg(CASE WHEN cv_stall_predicted THEN 1 ELSE 0 END) AS cv_stall_predicted_fraction,
          any_value(t.client_sig) AS client_sig,
          median(client_flight_segments) AS client_flight_segments,
          median(client_flight_bytes) AS client_flight_bytes,
          sum(client_retransmissions) AS client_retransmissions,
          sum(client_retransmitted_bytes) AS client_retransmitted_bytes,
          sum(server_retransmissions) AS server_retransmissions,
          sum(server_retransmitted_bytes) AS server_retransmitted_bytes,
          count(*) FILTER (WHERE client_retransmissions + server_retransmissions > 0)
            AS handshakes_with_retransmissions
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t.cell_id, t."group", t.server_sig, t.ca_sig, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos, t.cell_id""",
    )


def _hello_table(store) -> tuple[Path, str]:
    """Document 000, section 4-1-2: the ClientHello and the ServerHello each fit in at most
    two TCP segments even with ML-KEM-1024. Per group, from every handshake's captures."""

    path = store.export_table(
        "handshake_hello_segments",
        f"""
        SELECT t."group", count(*) AS n,
          median(client_hello_bytes) AS client_hello_bytes,
          median(client_hello_segments) AS client_hello_segments,
          max(client_hello_segments) AS client_hello_segments_max,
          median(server_hello_bytes) AS server_hello_bytes,
          median(server_hello_segments) AS server_hello_segments,
          max(server_hello_segments) AS server_hello_segments_max,
          median(server_snd_mss) AS mss, {STACK} AS stack
        FROM handshake_raw t JOIN hs_order og ON og.name = t."group"
        GROUP BY t."group", stack, og.pos ORDER BY og.pos, stack""",
    )
    worst = store.query(
        'SELECT "group", max(client_hello_segments) AS ch, max(server_hello_segments) AS sh '
        'FROM handshake_raw GROUP BY "group" ORDER BY greatest(ch, sh) DESC, "group" LIMIT 1'
    )
    w = worst[0] if worst else {"group": "-", "ch": None, "sh": None}
    holds = w["ch"] is not None and max(w["ch"], w["sh"]) <= 2
    verdict = "holds in this run" if holds else "<b>does not hold in this run</b>"
    return path, template(
        "handshake_hello",
        verdict=verdict,
        group=html.escape(str(w["group"])),
        ch=w["ch"],
        sh=w["sh"],
    )


def _load_table(store) -> Path:
    cpu = "(cpu_user_s + cpu_sys_s)"
    side = "{fn}(CASE WHEN side = '{side}' THEN {expr} END)"  # one column per side

    def col(expr: str, s: str, name: str, fn: str = "any_value") -> str:
        return side.format(fn=fn, side=s, expr=expr) + f" AS {name}"

    return store.export_table(
        "handshake_load",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig, any_value(handshakes) AS handshakes,
          {col(f"{cpu} * 1e3 / handshakes", "server", "server_cpu_ms_per_handshake")},
          {col(f"handshakes / nullif({cpu}, 0)", "server", "server_handshakes_per_cpu_s")},
          {col(f"{cpu} * 1e3 / handshakes", "client", "client_cpu_ms_per_handshake")},
          {col(f"{cpu} / wall_s", "server", "server_cpu_per_wall")},
          {col("max_rss_kib / 1024.0", "server", "server_max_rss_mib")},
          {col("max_rss_kib / 1024.0", "client", "client_max_rss_mib")},
          any_value(wall_s) AS wall_s, any_value(t.stack) AS stack, t.cell_id
        FROM handshake_load t {ORDER_JOIN}
        GROUP BY t.cell_id, t."group", t.server_sig, t.ca_sig, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos, t.cell_id""",
    )


def _phase_table(store) -> Path:
    ms = MS
    # Figures 17 and 18's mechanism per cell: the document's mark (ServerHello +
    # Certificate of 4096 to 8192 bytes) and the segments from ServerHello to
    # CertificateVerify, from the cell's handshakes.
    marks, join = "", ""
    if "segments_sh_to_cv" in store.columns("handshake_raw"):
        marks = (
            ", any_value(m.server_hello_certificate_bytes) AS server_hello_certificate_bytes, "
            "any_value(m.server_hello_certificate_bytes) >= "
            f"{document000.SHADE_LOW} AND any_value(m.server_hello_certificate_bytes) < "
            f"{document000.SHADE_HIGH} AS shaded_4096_8192, "
            "any_value(m.segments_sh_to_cv) AS segments_sh_to_cv"
        )
        join = (
            " LEFT JOIN (SELECT cell_id, CAST(median(server_hello_bytes + certificate_bytes) "
            "AS BIGINT) AS server_hello_certificate_bytes, CAST(mode(segments_sh_to_cv) AS "
            "INTEGER) AS segments_sh_to_cv FROM handshake_raw GROUP BY cell_id) m "
            "ON m.cell_id = t.cell_id"
        )
    return store.export_table(
        "handshake_phases",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig, t.view, t.phase,
          avg(ns) {ms} AS mean_ms, median(ns) {ms} AS median_ms,
          sum(retransmissions) AS retransmissions,
          count(*) FILTER (WHERE retransmissions > 0) AS handshakes_with_retransmissions,
          t.phase_order, t.family, any_value(t.stack) AS stack, t.cell_id{marks}
        FROM handshake_phase t {ORDER_JOIN}{join}
        GROUP BY t.cell_id, t."group", t.server_sig, t.ca_sig, t.view, t.phase, t.phase_order,
          t.family, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos, t.cell_id, t.view, t.phase_order""",
    )


def _size_table(store) -> Path:
    return store.export_table(
        "handshake_message_sizes",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig,
          {", ".join(f"median({c}) AS {c}" for _, _, c in SIZE_COLUMNS)},
          median(bytes_through_certificate) AS bytes_through_certificate,
          median(server_flight_bytes) AS server_flight_bytes,
          median(server_flight_segments) AS server_flight_segments,
          mode(flush_offsets_predicted) AS flush_offsets_predicted,
          mode(short_segment_ends) AS short_segment_ends,
          any_value(t.stack) AS stack, any_value(t.chain_sent) AS chain_sent, t.cell_id
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t.cell_id, t."group", t.server_sig, t.ca_sig, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos, t.cell_id""",
    )


def _client(store) -> str:
    """The column that keeps mutually authenticated cells apart in the pivot tables."""
    if "client_sig" in store.columns("handshake_raw"):
        return "coalesce(t.client_sig, 'none')"
    return "'none'"


def _padded(store) -> str:
    """The column that keeps --chain-bytes cells apart from the algorithms' own chains in
    the pivot tables (runs made before it have none)."""
    if "chain_bytes_requested" in store.columns("handshake_raw"):
        return "t.chain_bytes_requested"
    return "CAST(NULL AS BIGINT)"


def _processing_table(store) -> Path:
    ms = MS
    cas = [
        r["ca_sig"]
        for r in store.query(
            "SELECT DISTINCT ca_sig, pos FROM handshake_raw JOIN hs_order ON name = ca_sig "
            "ORDER BY pos"
        )
    ]
    pivot = ", ".join(
        f"avg(CASE WHEN t.ca_sig = '{_q(c)}' THEN client_processing_ns END) {ms} AS \"CA {c}\""
        for c in cas
    )
    return store.export_table(
        "handshake_client_processing",
        f"""
        SELECT t."group", t.server_sig, {pivot}, t.stack, t.chain_sent,
          {_padded(store)} AS chain_bytes_requested, {_client(store)} AS client_sig
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", t.server_sig, t.stack, t.chain_sent, {_padded(store)},
          {_client(store)}, og.pos, os.pos
        ORDER BY og.pos, os.pos, t.stack, t.chain_sent, chain_bytes_requested, client_sig""",
    )


def _segment_table(store) -> Path:
    pairs = store.query(
        "SELECT DISTINCT ca_sig, server_sig, oc.pos AS cp, os.pos AS sp FROM handshake_raw "
        "JOIN hs_order oc ON oc.name = ca_sig JOIN hs_order os ON os.name = server_sig "
        "ORDER BY cp, sp"
    )
    seg_pivot = ", ".join(
        f"median(CASE WHEN t.ca_sig = '{_q(r['ca_sig'])}' AND t.server_sig = "
        f"'{_q(r['server_sig'])}' THEN server_flight_segments END) AS "
        f'"CA {r["ca_sig"]} / server {r["server_sig"]}"'
        for r in pairs
    )
    return store.export_table(
        "handshake_server_segments",
        f"""
        SELECT t."group", {seg_pivot}, t.stack, t.chain_sent,
          {_padded(store)} AS chain_bytes_requested, {_client(store)} AS client_sig
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", t.stack, t.chain_sent, {_padded(store)}, {_client(store)}, og.pos
        ORDER BY og.pos, t.stack, t.chain_sent, chain_bytes_requested, client_sig""",
    )


def _lab_text(store) -> str:
    """The link and TCP settings the cells ran with, from the stored topology."""

    rows = store.query("SELECT DISTINCT topology FROM handshake_capture")
    parts = []
    for r in rows:
        try:
            t = json.loads(r["topology"])
        except (TypeError, ValueError):
            continue
        server = t.get("sides", {}).get("server", {})
        offloads = ", ".join(f"{k} {v}" for k, v in server.get("offloads", {}).items())
        parts.append(
            f"link {t.get('link', {}).get('kind', '?')}, MTU {t.get('mtu')}, MSS payload "
            f"{t.get('mss_payload')} bytes, congestion control "
            f"{t.get('congestion_control')}, initcwnd {t.get('initcwnd') or 'kernel default'}"
            f"; server interface offloads: {offloads}"
        )
    if not parts:
        return ""
    return "<p><b>Lab:</b> " + "<br>".join(html.escape(p) for p in parts) + "</p>"


def _stacked(store, title: str, name: str, labels: list[str], rows: dict, views=hp.VIEWS) -> Path:
    """One stacked-bar figure: client view left, server view right, one bar per label
    (built by a figure worker during the export: `stacked_figure`)."""
    return figures.draw(store, name, stacked_figure, title, labels, rows, views)


def stacked_figure(title: str, labels: list[str], rows: dict, views):
    """The figure of `_stacked`: each phase's bars one collection of rectangles, as
    `barh` would draw them (a third less time to build than a patch per bar)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    plt = figures.plt
    colours = phase_colours()
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * len(labels) + 2.2), sharey=True)
    for ax, view in zip(axes, ("client", "server"), strict=True):
        table = views[view]
        left = [0.0] * len(labels)
        entries = []
        for pname, *_ in table:
            vals = [rows.get((lab, view, pname), 0.0) for lab in labels]
            colour, hatch = colours[pname]
            style = {"facecolor": colour, "hatch": hatch, "edgecolor": "white", "linewidth": 0.4}
            bars = [
                Rectangle((x, y - 0.4), w, 0.8)
                for y, (x, w) in enumerate(zip(left, vals, strict=True))
            ]
            phase = PatchCollection(bars, **style)
            phase.sticky_edges.x.append(0)  # as barh's: the axis starts at 0
            ax.add_collection(phase)
            entries.append((pname, style))
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.autoscale_view()
        ax.set_title(f"{view} view")
        ax.set_xlabel("mean time (ms)")
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        figures.legend_below(ax, entries)
    fig.suptitle(title)
    return fig


class _PhaseMeans:
    """Mean phase times of every cell, kept apart per stack, and the cells' axes in report
    order. A run whose cells ran on several stacks names the stack on every bar: the same
    (group, server, CA) on two stacks is two bars, never their average."""

    def __init__(self, store):
        # The document's figures show the algorithms' own chains, server authentication
        # only: cells of a --chain-bytes sweep and mutual TLS cells (their own figures) are
        # left out.
        own = (
            "cell_id NOT IN (SELECT cell_id FROM handshake_raw "
            "WHERE chain_bytes_requested IS NOT NULL "
            "OR coalesce(client_sig, 'none') <> 'none')"
            if "chain_bytes_requested" in store.columns("handshake_raw")
            else "TRUE"
        )
        data = store.query(
            f'SELECT {STACK} AS stack, "group", server_sig, ca_sig, view, phase, '
            f"avg(ns) / 1e6 AS ms FROM handshake_phase t WHERE {own} GROUP BY ALL"
        )
        cells = store.query(
            f'SELECT DISTINCT {STACK} AS stack, t."group", t.server_sig, t.ca_sig, og.pos AS gp, '
            f"os.pos AS sp, oc.pos AS cp FROM handshake_raw t {ORDER_JOIN} WHERE t.{own} "
            "ORDER BY gp, sp, cp, stack"
        )
        self.axes = {
            axis: list(dict.fromkeys(c[axis] for c in cells))
            for axis in ("group", "server_sig", "ca_sig")
        }
        self.stacks = sorted({c["stack"] for c in cells})
        self.present = {(c["stack"], c["group"], c["server_sig"], c["ca_sig"]) for c in cells}
        self.means: dict[tuple, dict] = {}
        for d in data:
            cell = (d["stack"], d["group"], d["server_sig"], d["ca_sig"])
            self.means.setdefault(cell, {})[(d["view"], d["phase"])] = d["ms"]

    def family(self, vary: str, fixed: dict) -> tuple[list[str], dict]:
        """One bar per value of `vary` and stack with the other two axes fixed: labels
        (the stack named when the run has several) and {(label, view, phase): mean ms}."""
        labels, rows = [], {}
        for v in self.axes[vary]:
            for stack in self.stacks:
                key = {**fixed, vary: v}
                cell = (stack, key["group"], key["server_sig"], key["ca_sig"])
                if cell not in self.present:
                    continue
                label = stack_label(v, stack, self.stacks)
                labels.append(label)
                for (view, phase), ms in self.means.get(cell, {}).items():
                    rows[(label, view, phase)] = ms
        return labels, rows


def stack_label(text: str, stack: str, run_stacks: list[str]) -> str:
    """A bar's or point's label: the stack named whenever the run holds more than one."""
    return f"{text} ({stack})" if len(run_stacks) > 1 else text


# The document's families of stacked-bar figures: (axis varied, the two fixed axes, file name
# prefix, title, caption, whether a single bar is drawn too).
FAMILIES = (
    (
        "server_sig",
        ("group", "ca_sig"),
        "group-{group}_ca-{ca_sig}",
        "group {group}, CA {ca_sig}: by server signature",
        "as figures 8, 13, 14",
        True,
    ),
    (
        "group",
        ("server_sig", "ca_sig"),
        "server-{server_sig}_ca-{ca_sig}",
        "server {server_sig}, CA {ca_sig}: by key exchange",
        "as figures 15, 16, 18",
        False,
    ),
    (
        "ca_sig",
        ("group", "server_sig"),
        "group-{group}_server-{server_sig}",
        "group {group}, server {server_sig}: by CA signature",
        "as figure 17",
        False,
    ),
)


def _figures(store) -> list[tuple[Path, str]]:

    means = _PhaseMeans(store)
    out = []
    for vary, (a, b), name, title, caption, single in FAMILIES:
        for va in means.axes[a]:
            for vb in means.axes[b]:
                fixed = {a: va, b: vb}
                labels, rows = means.family(vary, fixed)
                if len(labels) > (0 if single else 1):
                    text = title.format(**fixed)
                    png = _stacked(
                        store,
                        text,
                        figures.safe_name("handshake_phases_" + name.format(**fixed)),
                        labels,
                        rows,
                    )
                    out.append((png, f"Mean phases, {text} ({caption})"))
    out += _mutual_figures(store)
    out += _size_time_figures(store)
    return out


# Both kinds of bar in one figure: a handshake without a client certificate ends with
# "Finished rcv -> Finished send", one with a certificate with the client's three phases.
MUTUAL_FIGURE_VIEWS = {view: [*table, *hp.CLIENT_FLIGHT_PHASES] for view, table in hp.VIEWS.items()}


def _mutual_figures(store) -> list[tuple[Path, str]]:
    """Per (group, server, CA) with mutual TLS cells: a bar per client certificate (and one
    without, where the run has it), the client's Certificate and CertificateVerify phases in
    both views."""
    if "client_sig" not in store.columns("handshake_phase"):
        return []
    data = store.query(
        f'SELECT {STACK} AS stack, "group", server_sig, ca_sig, '
        "coalesce(client_sig, 'none') AS client_sig, view, phase, avg(ns) / 1e6 AS ms "
        f'FROM handshake_phase t WHERE ({STACK}, "group", server_sig, ca_sig) IN '
        f'(SELECT ({STACK}, "group", server_sig, ca_sig) FROM handshake_phase t '
        "WHERE coalesce(client_sig, 'none') <> 'none') GROUP BY ALL ORDER BY client_sig"
    )
    by_cell: dict[tuple, dict] = {}
    for d in data:
        cell = (d["stack"], d["group"], d["server_sig"], d["ca_sig"])
        by_cell.setdefault(cell, {})[(d["client_sig"], d["view"], d["phase"])] = d["ms"]
    several = len({cell[0] for cell in by_cell}) > 1
    out = []
    for (st, g, s, c), rows in by_cell.items():
        labels = sorted({k[0] for k in rows}, key=lambda x: (x != "none", x))
        on = f" on {st}" if several else ""
        text = f"group {g}, server {s}, CA {c}{on}: by client certificate (mutual TLS)"
        suffix = f"_stack-{st}" if several else ""
        png = _stacked(
            store,
            text,
            figures.safe_name(f"handshake_phases_mutual_group-{g}_server-{s}_ca-{c}{suffix}"),
            labels,
            rows,
            MUTUAL_FIGURE_VIEWS,
        )
        out.append((png, f"Mean phases, {text}: the client's Certificate and CertificateVerify"))
    return out


def _write_models_text(store) -> str:
    """How each stack of the run writes its flight, and what that does to features 1-6."""
    items = []
    for st in _run_stacks(store):
        m = st.write_model
        if m.kind == "buffer":
            effect = (
                "features 2-4 appear when a buffer fills before the flight ends, at the "
                "thresholds marked on the figures"
            )
        else:
            effect = (
                "every message of the flight leaves in the same write once CertificateVerify "
                "is signed and Finished made, so ServerHello-to-Finished is near zero in every "
                "cell (feature 1) and the signing time shows in ClientHello-to-ServerHello "
                "instead; features 2-4 can only come from the congestion window"
            )
        items.append(
            f"<li><b>{html.escape(st.name)}</b> ({html.escape(st.implementation)}): "
            f"{html.escape(m.describe())}; {effect}.</li>"
        )
    if not items:
        return ""
    return (
        "<h3>How each stack of this run writes its flight</h3><ul>"
        + "".join(items)
        + "</ul><p>The table below finds document 000's six features in this run's cells "
        "by explicit rules on the phases' means; <code>document_case</code> and "
        "<code>cv_stall_predicted_fraction</code> in the per-cell table are the document's "
        "cases 1-3 and conditions 1-3 computed for every cell from the measured message "
        "sizes and the stack's write model.</p>"
    )


def _size_time_figures(store) -> list[tuple[Path, str]]:
    rows = store.query(
        f'SELECT {STACK} AS stack, "group", server_sig, ca_sig, '
        "median(server_flight_bytes) AS flight, median(bytes_through_certificate) AS "
        "through_cert, avg(sh_to_fin_ns) / 1e6 AS sh_fin, avg(sh_to_cert_ns) / 1e6 AS sh_cert "
        "FROM handshake_raw t GROUP BY ALL ORDER BY ALL"
    )
    run_stacks = sorted({r["stack"] for r in rows})
    marks = sorted({m for st in _run_stacks(store) for m in thresholds(st.write_model)})
    out = []
    for key_x, key_y, name, xlabel, ylabel, zoom, caption in (
        (
            "flight",
            "sh_fin",
            "handshake_flight_size_vs_sh_to_fin",
            "server flight: bytes from ServerHello through Finished (TCP stream)",
            "ServerHello send -> Finished send, mean (ms)",
            0.1,
            "Server flight size against ServerHello-to-Finished time at the server "
            "(figures 9 and 10; right: zoomed to 0-0.1 ms)",
        ),
        (
            "through_cert",
            "sh_cert",
            "handshake_sh_cert_size_vs_sh_to_cert",
            "bytes from ServerHello through Certificate (TCP stream)",
            "ServerHello send -> Certificate send, mean (ms)",
            0.5,
            "ServerHello+Certificate size against ServerHello-to-Certificate time at the "
            "server (figures 11 and 12; right: zoomed to 0-0.5 ms)",
        ),
    ):
        points = [
            (
                r[key_x],
                r[key_y],
                stack_label(
                    f"{r['group']}/{r['server_sig']}/{r['ca_sig']}", r["stack"], run_stacks
                ),
            )
            for r in rows
        ]
        axis = (xlabel, ylabel, zoom)
        out.append((figures.draw(store, name, size_time_figure, points, marks, axis), caption))
    return out


def size_time_figure(points: list[tuple], marks: list[tuple], axis: tuple):
    """The figure of `_size_time_figures`: (x, y, cell label) points, the write model's
    thresholds marked, the whole range left and `zoom` (the y limit) right."""
    plt = figures.plt
    xlabel, ylabel, zoom = axis
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, limit in zip(axes, (None, zoom), strict=True):
        for x, y, label in points:
            ax.scatter(x, y, s=18)
            if len(points) <= 24:
                ax.annotate(label, (x, y), fontsize=5, alpha=0.7)
        for x, label in marks:
            ax.axvline(x, color="#888", linestyle="--", linewidth=0.8)
            ax.text(
                x,
                1.0,
                f" {label}",
                rotation=90,
                fontsize=6,
                va="top",
                transform=ax.get_xaxis_transform(),
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if limit is not None:
            ax.set_ylim(0, limit)
    return fig


def summarize(store):
    """The experiment's part of the report's summary (see its `summary` module)."""
    return summary_part.summarize(store)
