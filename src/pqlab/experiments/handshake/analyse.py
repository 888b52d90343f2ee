"""From a cell's engine records and captures to per-handshake rows and phase rows.

`pair_records` pairs client and server records by client port; `read_captures` reads both
captures once and splits them into connections; `match_records` gives each pair's TLS
records (`callback_records`: from the stack's message events, `pqlab.tls.records`; the key
log is the other source); `analyse_cell` checks what every handshake negotiated
(`pqlab.tls.negotiation`), finds each connection in both captures and takes it apart
(`phases.analyse`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pqlab import pcap, procstat
from pqlab.errors import CheckError, EngineError
from pqlab.experiments.handshake import predicted, schema
from pqlab.net import clock
from pqlab.tls import flight, negotiation, records
from pqlab.tls import keylog as kl
from pqlab.tls import phases as hp
from pqlab.tls.records import TlsRecord

# Sizes reported per handshake (handshake message bytes, 4-byte header included).
SIZE_COLUMNS = [
    ("client", "ClientHello", "client_hello_bytes"),
    ("server", "ServerHello", "server_hello_bytes"),
    ("server", "EncryptedExtensions", "encrypted_extensions_bytes"),
    ("server", "Certificate", "certificate_bytes"),
    ("server", "CertificateVerify", "certificate_verify_bytes"),
    ("server", "Finished", "server_finished_bytes"),
    ("client", "Finished", "client_finished_bytes"),
    ("server", "CertificateRequest", "certificate_request_bytes"),
    ("client", "Certificate", "client_certificate_bytes"),
    ("client", "CertificateVerify", "client_certificate_verify_bytes"),
]


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def pair_records(client_recs: list[dict], server_recs: list[dict]) -> list[tuple[dict, dict]]:
    """Every client connection (warm-ups included, marked) with its server record, by client
    port, in the client's order: a port reused within a cell (its rounds' clients draw
    ports anew) pairs with its connections in turn."""
    by_port: dict[int, list[dict]] = {}
    for r in server_recs:
        by_port.setdefault(_port(r["peer"]), []).append(r)
    pairs = []
    for c in client_recs:
        lst = by_port.get(_port(c["local"]))
        if not lst:
            raise EngineError(f"client connection from {c['local']} has no server record")
        pairs.append((c, lst.pop(0)))
    return pairs


def measured(pairs: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
    """The pairs that are measured (not warm-ups), as analyse_cell's rows are."""
    return [(c, s) for c, s in pairs if not c.get("warmup")]


@dataclass
class Captures:
    """Both captures of a cell, each read once and split into connections (in the order of
    their SYNs): what the clock estimate and the analysis of every handshake read."""

    client: list[pcap.Connection]
    server: list[pcap.Connection]

    def by_client_port(self, side: str) -> dict[int, list[pcap.Connection]]:
        """One side's connections by client port, in order (a fresh dict each time: the
        analysis takes them in turn)."""
        out: dict[int, list[pcap.Connection]] = {}
        for conn in self.client if side == "client" else self.server:
            out.setdefault(conn.client[1], []).append(conn)
        return out

    def clock_samples(self) -> list:
        """The clock-offset samples of every connection seen in both captures
        (`pqlab.net.clock`)."""
        return clock.samples_from_connections(self.client, self.server)


def read_captures(client_pcap: Path, server_pcap: Path, port: int) -> Captures:
    """A cell's two captures (headers), split into the connections to `port`."""
    return Captures(pcap.connections(client_pcap, port), pcap.connections(server_pcap, port))


def check_pair(idx: int, crec: dict, srec: dict, expected, stack, expect_cc: str | None) -> None:
    """Both ends of handshake `idx` negotiated what was asked, on the socket the lab set up."""
    what = f"handshake {idx}"
    negotiation.check(crec, expected, stack, what=f"{what} (client)")
    negotiation.check(srec, expected, stack, what=f"{what} (server)")
    cc = srec.get("congestion_control")
    if expect_cc and cc and cc != expect_cc:
        raise CheckError(
            f"{what}: the server socket used congestion control {cc!r}, the lab set {expect_cc!r}"
        )


def handshake_row(idx: int, cport: int, h: hp.Handshake, crec: dict, srec: dict) -> dict:
    """One row of handshake_raw (without the cell's labels)."""
    f, p = h.flight, h.points
    sizes = f["message_sizes"]
    info = srec.get("tcp_info") or {}
    neg_c, neg_s = crec.get("negotiated", {}), srec.get("negotiated", {})
    row = {
        "idx": idx,
        "client_port": cport,
        "t_syn_ns": p["1"],
        "handshake_ns": h.handshake_ns,
        "total_ns": h.total_ns,
        "client_processing_ns": h.client_processing_ns,
        "sh_to_cert_ns": p["F"] - p["E"],
        "sh_to_fin_ns": p["H"] - p["E"],
        "server_flight_segments": f["segments"],
        "segments_sh_to_cv": f["segments_through_certificate_verify"],
        "server_flight_bytes": f["bytes"],
        "bytes_through_certificate": f["bytes_through_certificate"],
        "server_flight_retransmissions": f["retransmissions"],
        "writes_predicted": f["writes_predicted"],
        "flush_offsets_predicted": schema.json_ints(f["flush_offsets_predicted"]),
        "short_segment_ends": schema.json_ints(f["short_segment_ends"]),
        "split_by_write_buffer": f["split_by_write_buffer"],
        "document_case": f["document_case"],
        "cv_stall_predicted": f["cv_stall_predicted"],
        "cwnd_stalls": f["cwnd_stalls"],
        "cwnd_stall_wait_ns": f["cwnd_stall_wait_ns"],
        "client_hello_segments": f["client_hello_segments"],
        "server_hello_segments": f["server_hello_segments"],
        "client_bytes": f["client_wire_bytes"],
        "server_bytes": f["server_wire_bytes"],
        "negotiated_group": neg_c.get("group"),
        "negotiated_sigalg": neg_s.get("sigalg") or neg_c.get("sigalg"),
        "congestion_control": srec.get("congestion_control"),
        "server_snd_cwnd": info.get("snd_cwnd"),
        "server_total_retrans": info.get("total_retrans"),
        "server_snd_mss": info.get("snd_mss"),
        "points": schema.json_int_map({k: v - p["1"] for k, v in p.items()}),
        "order_disagreements": f["order_disagreements"],
        "server_writes": schema.json_ints(f["server_writes"]),
        "flight_rounds": f["flight_rounds"],
        "flight_max_in_flight": f["max_in_flight"],
        # the TCP handshake's round trip and one per round of the server's flight
        "round_trips": 1 + f["flight_rounds"] if f["flight_rounds"] is not None else None,
        "client_flight_bytes": f["client_flight_bytes"],
        "client_flight_segments": f["client_flight_segments"],
        # the whole connection (in mutual TLS the request and the response too), from the
        # client capture
        "client_payload_bytes": f["connection"]["client_payload"],
        "server_payload_bytes": f["connection"]["server_payload"],
        "client_connection_ip_bytes": f["connection"]["client_ip"],
        "server_connection_ip_bytes": f["connection"]["server_ip"],
        "negotiated_client_sigalg": neg_s.get("client_sigalg") or neg_c.get("client_sigalg"),
        "negotiated_cipher": neg_c.get("cipher_standard_name") or neg_c.get("cipher"),
        # the whole connection, each direction in its sender's capture
        "client_retransmissions": h.retransmitted["client"][0],
        "client_retransmitted_bytes": h.retransmitted["client"][1],
        "server_retransmissions": h.retransmitted["server"][0],
        "server_retransmitted_bytes": h.retransmitted["server"][1],
    }
    for side, name, col in SIZE_COLUMNS:
        row[col] = sizes.get(f"{side} {name}")
    return row


# handshake_phase's own columns, as `analyse_cell` gives them (one list per column).
PHASE_COLUMNS = ("idx", "view", "phase_order", "phase", "family", "ns", "retransmissions")


def add_phase_rows(phases: dict[str, list], idx: int, h: hp.Handshake) -> None:
    """Handshake `idx`'s rows of handshake_phase (a phase per view), appended to the
    columns `phases`."""
    for view, table in h.views.items():
        measured = h.phases[view]
        n = len(measured)
        phases["idx"] += [idx] * n
        phases["view"] += [view] * n
        phases["phase_order"] += range(n)
        phases["phase"] += [name for name, _ in measured]
        phases["family"] += [family for (_, _, _, family), _ in zip(table, measured, strict=True)]
        phases["ns"] += [ns for _, ns in measured]
        phases["retransmissions"] += h.phase_retransmissions[view]


def callback_records(crec: dict, srec: dict) -> list[TlsRecord]:
    """The TLS records both sides wrote, from the stack's own message events."""
    return records.from_events(crec, "client") + records.from_events(srec, "server")


def keylog_records(server_pcap: Path, keylog: Path, port: int):
    """`records_of` for the key-log source: both sides' records recovered from the server's
    capture decrypted with the server's key log (any TLS stack)."""

    by_port: dict[int, list] = {}
    for conn, client, server in kl.records_by_connection(server_pcap, keylog, port):
        by_port.setdefault(conn.client[1], []).append(client + server)

    def records_of(crec: dict, srec: dict) -> list[TlsRecord]:
        # Called for every connection of the cell in order, so a reused port's
        # connections are taken in turn.
        cport = _port(crec["local"])
        if not by_port.get(cport):
            raise EngineError(f"client port {cport} is not in the decrypted capture")
        return by_port[cport].pop(0)

    return records_of


def cross_checked_records(server_pcap: Path, keylog: Path, port: int):
    """`records_of` that uses the stack's callback and requires the key-log source to give
    exactly the same records (types, lengths, stream offsets) for every handshake."""
    from_keylog = keylog_records(server_pcap, keylog, port)

    def records_of(crec: dict, srec: dict) -> list[TlsRecord]:
        want = callback_records(crec, srec)
        got = from_keylog(crec, srec)
        if got != want:
            diff = next(
                (f"{w} vs {g}" for w, g in zip(want, got, strict=False) if w != g),
                f"{len(want)} vs {len(got)} records",
            )
            raise CheckError(
                f"client port {_port(crec['local'])}: the key log and the stack's callback "
                f"disagree on the TLS records ({diff})"
            )
        return want

    return records_of


def match_records(pairs: list[tuple[dict, dict]], records_of=callback_records) -> list:
    """The TLS records of every pair (warm-ups included), in order: `records_of(client
    record, server record)`, the stack's callback events or the key-log source."""
    return [records_of(crec, srec) for crec, srec in pairs]


def analyse_cell(
    captures: Captures,
    pairs: list[tuple[dict, dict]],
    initcwnd: int,
    expected,
    stack=None,
    expect_cc: str | None = None,
    records: list | None = None,
    clock_tolerance_ns: float = 0,
    writes_of=predicted.io_writes,
    model: predicted.CellModel | None = None,
):
    """Per-handshake rows and phase rows (columns: `PHASE_COLUMNS`) for one cell (without
    the cell's labels), for the
    measured pairs of `pairs` (all of the cell's connections in order, warm-ups included:
    each takes its connection from the captures, so a reused client port stays matched).
    `records[i]`: the TLS records both sides wrote in pair i (`match_records`; default the
    stack's callback events); `clock_tolerance_ns` how far the two captures' clocks may
    disagree (0: one clock); `writes_of(server_record)` the server's socket writes on the
    server capture's clock; `model` the cell's wire model, whose prediction each row
    carries."""
    if records is None:
        records = match_records(pairs)
    c_by_port = captures.by_client_port("client")
    s_by_port = captures.by_client_port("server")
    rows: list[dict] = []
    phases: dict[str, list] = {c: [] for c in PHASE_COLUMNS}
    idx = -1
    for (crec, srec), connection_records in zip(pairs, records, strict=True):
        warmup = bool(crec.get("warmup"))
        idx += 0 if warmup else 1
        what = "a warm-up handshake" if warmup else f"handshake {idx}"
        cport = _port(crec["local"])
        check_pair(idx, crec, srec, expected, stack, expect_cc)
        cl, sl = c_by_port.get(cport), s_by_port.get(cport)
        if not cl or not sl:
            raise EngineError(
                f"{what} (client port {cport}) is missing from the "
                f"{'client' if not cl else 'server'} capture"
            )
        cconn, sconn = cl.pop(0), sl.pop(0)
        if warmup:
            continue
        mss = int((srec.get("tcp_info") or {}).get("snd_mss") or 1448)
        writes = writes_of(srec)
        try:
            h = hp.analyse(
                cconn,
                sconn,
                connection_records,
                mss=mss,
                initcwnd=initcwnd,
                clock_tolerance_ns=clock_tolerance_ns,
                write_model=stack.write_model if stack is not None else flight.OPENSSL,
                writes=writes,
            )
        except hp.AnalysisError as e:
            raise EngineError(f"handshake {idx} (client port {cport}): {e}") from None
        row = handshake_row(idx, cport, h, crec, srec)
        if model is not None:
            row |= predicted.columns(model, h.points, writes, h.flight["bytes"])
        rows.append(row)
        add_phase_rows(phases, idx, h)
    return rows, phases


def load_rows(procs: dict, peaks: dict, wall_s: float, handshakes: int) -> list[dict]:
    """handshake_load rows (without the cell's labels) for the finished server and client
    processes: their CPU (rusage) and peak RSS (VmHWM samples, `pqlab.procstat`)."""

    rows = []
    for side, proc in procs.items():
        user, system = procstat.cpu_seconds(proc)
        rows.append(
            {
                "side": side,
                "handshakes": handshakes,
                "wall_s": wall_s,
                "cpu_user_s": user,
                "cpu_sys_s": system,
                "max_rss_kib": peaks.get(side),
            }
        )
    return rows
