"""The throughput experiment's outside reference: wolfSSL's own `tls_bench`, run by pqlab
beside its measurement of the same groups and cipher suites (document 004's "wolfSSL
benchmark" tables), and tls_bench's binary size with and without the post-quantum
algorithms (document 004's "runtime binary size").

tls_bench runs a client and a server thread in one process over 127.0.0.1, for every TLS
1.3 group it has (`-g`), `--tls-bench-seconds` each: connection after connection, each a full
handshake (timed on the client: "Connect", the TCP connection already up) then an echo loop
of 16 KiB writes until 128 KiB went each way; "Tx" is the time spent in write calls, "Rx"
the time spent waiting in read calls for the echo. Its rows are kept as printed
(`throughput_tls_bench_raw`, both sides) and set beside pqlab's client handshake time and
Tx/Rx for the same group and suite on every stack of the run, with the ratio. The two
measure Tx and Rx differently (docs/throughput.md says how, and when tls_bench's Rx is
limited by something other than TLS).
"""

from __future__ import annotations

import html
import platform

from pqlab import catalog
from pqlab.report.section import Section
from pqlab.tls import wolfssl_tools

DDL = """
CREATE TABLE IF NOT EXISTS throughput_tls_bench_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, cipher_suite TEXT, tls_bench_suite TEXT,
    "group" TEXT, tls_bench_group TEXT, side TEXT, total_bytes BIGINT, connections INTEGER,
    rx_ms DOUBLE, tx_ms DOUBLE, rx_MiBps DOUBLE, tx_MiBps DOUBLE, connect_total_ms DOUBLE,
    connect_avg_ms DOUBLE, seconds INTEGER, with_pq_bytes BIGINT, without_pq_bytes BIGINT,
    with_pq_unstripped_bytes BIGINT, without_pq_unstripped_bytes BIGINT, machine TEXT)
"""
# RFC 8446 suite names -> tls_bench's (wolfSSL's cipher-list spelling).
SUITES = {
    "TLS_AES_128_GCM_SHA256": "TLS13-AES128-GCM-SHA256",
    "TLS_AES_256_GCM_SHA384": "TLS13-AES256-GCM-SHA384",
    "TLS_CHACHA20_POLY1305_SHA256": "TLS13-CHACHA20-POLY1305-SHA256",
}
MiB = 1 << 20
# An Rx wait per connection this long is a TCP stall (tls_bench's sockets keep Nagle's
# algorithm on; a record written behind an unacknowledged one waits for a delayed ACK),
# not TLS.
STALL_MS = 20.0


def _group_names() -> dict[str, str]:
    """tls_bench's group name -> the catalogue's."""
    out = {}
    for alg in catalog.all_algorithms("kem"):
        name = wolfssl_tools.TLS_BENCH_GROUPS.get(alg.tls_group) if alg.tls_group else None
        if name:
            out[name] = alg.name
    return out


def _rows(stack, suite: str, seconds: int, sizes: dict) -> list[dict]:
    names = _group_names()
    out = []
    for r in wolfssl_tools.tls_bench(stack, seconds, SUITES[suite]):
        out.append(
            {
                "stack": stack.name,
                "stack_impl": stack.implementation,
                "cipher_suite": suite,
                "tls_bench_suite": r["cipher"],
                "group": names.get(r["group"]),
                "tls_bench_group": r["group"],
                **{k: r[k] for k in wolfssl_tools.TLS_BENCH_COLUMNS[3:]},
                "side": r["side"],
                "seconds": seconds,
                **sizes,
                "machine": platform.node(),
            }
        )
    return out


def measure(plan, store, cells, done) -> None:
    """tls_bench once per stack that has it and suite of the plan (tls_bench knows it)."""
    for stack in plan.stacks:
        if not wolfssl_tools.has_tools(stack, "tls_bench"):
            continue
        sizes = (
            wolfssl_tools.binary_sizes(stack)
            if wolfssl_tools.has_tools(stack, "tls_bench_no_pq")
            else {}
        )
        for suite in plan.suites:
            cid = cells.auxiliary("tls_bench", stack.name, suite)
            if suite not in SUITES or cid in done:
                continue
            rows = [
                {"cell_id": str(cid), **r}
                for r in _rows(stack, suite, plan.tls_bench_seconds, sizes)
            ]
            with store.cell(cells.experiment, cid, {"seconds": plan.tls_bench_seconds}):
                store.insert_rows("throughput_tls_bench_raw", rows)


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def comparison(store, pqlab_rows: list[dict]) -> list[dict]:
    """tls_bench's client rows for the run's groups and suites, each beside pqlab's
    measurement of the same group and suite on every stack (long form), with ratios."""
    bench = store.query(
        """SELECT * FROM throughput_tls_bench_raw WHERE side = 'client' AND "group" IS NOT NULL
           ORDER BY cipher_suite, "group" """
    )
    out = []
    for b in bench:
        for p in pqlab_rows:
            if (p["group"], p["cipher_suite"]) != (b["group"], b["cipher_suite"]):
                continue
            if p.get("client_sig", "none") != "none":
                continue  # tls_bench authenticates the server only
            tx, rx = p["tx_MBps"] * 1e6 / MiB, p["rx_MBps"] * 1e6 / MiB
            tx_cpu = p["tx_cpu_MBps"] * 1e6 / MiB if p.get("tx_cpu_MBps") else None
            echo_tx, echo_rx = (
                p[k] * 1e6 / MiB if p.get(k) else None for k in ("echo_tx_MBps", "echo_rx_MBps")
            )
            out.append(
                {
                    "group": b["group"],
                    "document_004_group": _document_name(b["group"]),
                    "cipher_suite": b["cipher_suite"],
                    "tls_bench_connections": b["connections"],
                    "tls_bench_connect_avg_ms": b["connect_avg_ms"],
                    "tls_bench_tx_MiBps": b["tx_MiBps"],
                    "tls_bench_rx_MiBps": b["rx_MiBps"],
                    "tls_bench_rx_wait_ms_per_connection": round(
                        b["rx_ms"] / max(b["connections"], 1), 3
                    ),
                    "pqlab_stack_impl": p["stack_impl"],
                    "pqlab_handshake_ms": p["handshake_ms"],
                    "pqlab_handshake_mean_ms": p.get("handshake_mean_ms"),
                    "pqlab_tx_MiBps": round(tx, 1),
                    "pqlab_rx_MiBps": round(rx, 1),
                    "pqlab_tx_cpu_MiBps": round(tx_cpu, 1) if tx_cpu else None,
                    # tls_bench averages: a mean beside a mean.
                    "handshake_ratio": _ratio(p.get("handshake_mean_ms"), b["connect_avg_ms"]),
                    "tx_cpu_ratio": _ratio(tx_cpu, b["tx_MiBps"]),
                    "rx_ratio": _ratio(rx, b["rx_MiBps"]),
                    "pqlab_echo_tx_MiBps": round(echo_tx, 1) if echo_tx else None,
                    "pqlab_echo_rx_MiBps": round(echo_rx, 1) if echo_rx else None,
                    "echo_tx_ratio": _ratio(echo_tx, b["tx_MiBps"]),
                    "echo_rx_ratio": _ratio(echo_rx, b["rx_MiBps"]),
                }
            )
    return out


def _document_name(group: str) -> str | None:
    found = catalog.find(group, "kem")
    return found[0].document_004_name() if found else None


COMPARISON_COLUMNS = (
    "group",
    "document_004_group",
    "cipher_suite",
    "tls_bench_connections",
    "tls_bench_connect_avg_ms",
    "tls_bench_tx_MiBps",
    "tls_bench_rx_MiBps",
    "tls_bench_rx_wait_ms_per_connection",
    "pqlab_stack_impl",
    "pqlab_handshake_ms",
    "pqlab_handshake_mean_ms",
    "pqlab_tx_MiBps",
    "pqlab_rx_MiBps",
    "pqlab_tx_cpu_MiBps",
    "handshake_ratio",
    "tx_cpu_ratio",
    "rx_ratio",
    "pqlab_echo_tx_MiBps",
    "pqlab_echo_rx_MiBps",
    "echo_tx_ratio",
    "echo_rx_ratio",
)
SIZE_SQL = """
SELECT DISTINCT stack_impl, with_pq_bytes, without_pq_bytes,
       with_pq_bytes - without_pq_bytes AS pq_bytes, with_pq_unstripped_bytes,
       without_pq_unstripped_bytes
FROM throughput_tls_bench_raw WHERE with_pq_bytes IS NOT NULL
"""


def export(store, section: Section, pqlab_rows: list[dict]) -> None:
    """tls_bench's own table, the comparison and the binary sizes into the section."""
    if not store.has_table("throughput_tls_bench_raw"):
        return
    if not store.query("SELECT 1 FROM throughput_tls_bench_raw LIMIT 1"):
        return
    raw = store.export_table(
        "throughput_tls_bench_raw_rows",
        """SELECT stack_impl, tls_bench_suite, tls_bench_group, "group", side, total_bytes,
                  connections, rx_ms, tx_ms, rx_MiBps, tx_MiBps, connect_total_ms,
                  connect_avg_ms, seconds
           FROM throughput_tls_bench_raw ORDER BY tls_bench_suite, tls_bench_group, side""",
    )
    section.table(raw, "wolfSSL's tls_bench as it printed its rows, every group it has")
    rows = comparison(store, pqlab_rows)
    if rows:
        path = store.export_rows("throughput_tls_bench", rows, list(COMPARISON_COLUMNS))
        section.table(
            path,
            "tls_bench's client (connect time, Tx, Rx) beside pqlab's client handshake time "
            "and bulk Tx/Rx for the same group and suite, per stack; ratios pqlab / tls_bench "
            "(MiB = 2^20 bytes, as tls_bench prints)",
        )
        stalled = sorted(
            {r["group"] for r in rows if r["tls_bench_rx_wait_ms_per_connection"] > STALL_MS}
        )
        if stalled:
            section.text(
                "<p>tls_bench's Rx waited more than "
                f"{STALL_MS:.0f} ms per connection for "
                + html.escape(", ".join(stalled))
                + ": one delayed-ACK stall per connection (its sockets keep Nagle's algorithm "
                "on), not TLS. Its Rx rate here measures the stall.</p>"
            )
    sizes = store.query(SIZE_SQL)
    if sizes:
        path = store.export_table("wolfssl_binary_size", SIZE_SQL)
        section.table(
            path,
            "tls_bench's binary size with and without the post-quantum algorithms (bytes, "
            "stripped as document 004 measured it; the configure options are in the run's "
            "metadata)",
        )
