"""The handshake experiment's analysis and export on synthetic captures and engine records:
engine events -> TLS records, pairing, per-handshake rows, tables and figures from the DB."""

from __future__ import annotations

import csv
import json

import matplotlib.colors
import pytest

from pqlab import catalog, figures, pcap
from pqlab.errors import EngineError
from pqlab.experiments.handshake import analyse as hs
from pqlab.experiments.handshake import report, schema, worker
from pqlab.store import RunStore
from pqlab.tls import phases as hp
from pqlab.tls import records, stacks
from pqlab.tls.negotiation import Expected
from test_phases import PORT, Wire, small_handshake

NAMES = {
    "ClientHello": "client_hello",
    "ServerHello": "server_hello",
    "EncryptedExtensions": "encrypted_extensions",
    "Certificate": "certificate",
    "CertificateVerify": "certificate_verify",
    "Finished": "finished",
}
CT = {20: "change_cipher_spec", 22: "handshake", 23: "application_data"}


def engine_record(role: str, port: int, records: list[hp.TlsRecord], warmup=False) -> dict:
    """A connection record as `pqlab-engine tls client|server` prints it."""
    events = []
    for r in records:
        if r.sender != role:
            continue
        events.append(
            {
                "ev": "record",
                "dir": "sent",
                "t": 0,
                "content_type": CT[r.content_type],
                "header_bytes": 5,
                "length": 0,
                "offset_end": r.end,
            }
        )
        for name, length in r.messages:
            events.append(
                {
                    "ev": "handshake",
                    "dir": "sent",
                    "t": 0,
                    "msg": NAMES[name],
                    "msg_type": 0,
                    "length": length,
                    "offset_end": r.end,
                }
            )
    rec = {
        "type": "connection",
        "role": role,
        "events": events,
        "verified": True,
        "negotiated": {"version": "TLSv1.3", "group": "X25519", "sigalg": "mldsa44"},
        "tcp_info": {"snd_mss": 1448, "snd_cwnd": 10, "total_retrans": 0},
    }
    if role == "client":
        rec["local"] = f"198.18.0.1:{port}"
        rec["warmup"] = warmup
    else:
        rec["peer"] = f"198.18.0.1:{port}"
    return rec


def expect(group: str) -> Expected:
    return Expected(group=catalog.resolve(group, "kem"), sigalg=catalog.resolve("ML-DSA-44", "sig"))


def captures(tmp_path) -> hs.Captures:
    """The two captures `cell_captures` wrote, read."""
    return hs.read_captures(tmp_path / "c.pcap", tmp_path / "s.pcap", PORT)


def cell_captures(tmp_path, ports):
    client, server, crecs, srecs = [], [], [], []
    for i, port in enumerate(ports):
        # Each connection its own initial sequence numbers, as a kernel draws them.
        w = Wire(10**18 + i * 10**8, port, cisn=1000 + i * 7919, sisn=5000 + i * 104729)
        recs = small_handshake(w)
        client += w.client_frames
        server += w.server_frames
        crecs.append(engine_record("client", port, recs, warmup=i == 0))
        srecs.append(engine_record("server", port, recs))
    pcap.write_pcap(tmp_path / "c.pcap", client)
    pcap.write_pcap(tmp_path / "s.pcap", server)
    return crecs, srecs


def test_engine_events_become_tls_records():
    w = Wire(0, 40000)
    recs = small_handshake(w)
    rec = engine_record("server", 40000, recs)
    assert records.from_events(rec, "server") == [r for r in recs if r.sender == "server"]


def test_cell_rows_phases_and_warmup_dropped(tmp_path):
    crecs, srecs = cell_captures(tmp_path, [40000, 40001, 40002])
    pairs = hs.pair_records(crecs, list(reversed(srecs)))
    assert [hs._port(c["local"]) for c, _ in pairs] == [40000, 40001, 40002]
    assert [hs._port(c["local"]) for c, _ in hs.measured(pairs)] == [40001, 40002]
    rows, phases = hs.analyse_cell(captures(tmp_path), pairs, 10, expect("X25519"), stacks.get())
    assert len(rows) == 2 and all(len(c) == 2 * 24 for c in phases.values())
    r = rows[0]
    assert r["handshake_ns"] == 452_000 and r["total_ns"] == 600_000
    assert r["server_flight_segments"] == 3 and r["server_flight_bytes"] == 3299
    assert r["certificate_bytes"] == 2800 and r["client_hello_bytes"] == 295
    assert json.loads(r["points"])["9"] == 600_000
    for view in ("client", "server"):
        assert (
            sum(
                ns
                for i, v, ns in zip(phases["idx"], phases["view"], phases["ns"], strict=True)
                if i == 0 and v == view
            )
            == 600_000
        )


def test_a_client_port_reused_within_a_cell_keeps_each_connection_its_own(tmp_path):
    """The rounds' clients draw their ports anew, so a port can come back within a cell:
    here a warm-up on 40000, then 40001, then 40000 again. Each measured handshake must be
    analysed from its own connection, taken in turn, never from the warm-up's."""
    crecs, srecs = cell_captures(tmp_path, [40000, 40001, 40000])
    pairs = hs.pair_records(crecs, srecs)
    rows, _ = hs.analyse_cell(captures(tmp_path), pairs, 10, expect("X25519"), stacks.get())
    assert [r["client_port"] for r in rows] == [40001, 40000]
    # The connections start 0.1 s apart: the third's SYN, not the warm-up's.
    assert rows[1]["t_syn_ns"] - rows[0]["t_syn_ns"] == 10**8


def test_wrong_negotiation_is_an_error(tmp_path):
    crecs, srecs = cell_captures(tmp_path, [40000, 40001])
    pairs = hs.pair_records(crecs, srecs)
    with pytest.raises(EngineError, match="negotiated group"):
        hs.analyse_cell(
            captures(tmp_path),
            pairs,
            10,
            expect("X25519MLKEM768"),
            stacks.get(),
        )


def test_missing_connection_in_capture_is_an_error(tmp_path):
    crecs, srecs = cell_captures(tmp_path, [40000, 40001])
    crecs.append(engine_record("client", 40009, []))
    srecs.append(engine_record("server", 40009, []))
    pairs = hs.pair_records(crecs, srecs)
    with pytest.raises(EngineError, match="missing from the client capture"):
        hs.analyse_cell(
            captures(tmp_path),
            pairs,
            10,
            expect("X25519"),
            stacks.get(),
        )


def test_export_builds_tables_and_figures_from_the_database(tmp_path):
    crecs, srecs = cell_captures(tmp_path, [40000, 40001, 40002])
    rows, phases = hs.analyse_cell(
        captures(tmp_path),
        hs.pair_records(crecs, srecs),
        10,
        expect("X25519"),
        stacks.get(),
    )
    store = RunStore.create(tmp_path / "run", "handshake")
    schema.ensure(store)
    g = catalog.resolve("X25519", "kem")
    sigs = [catalog.resolve(n, "sig") for n in ("ML-DSA-44", "RSA-2048")]
    for s in sigs:
        labels = {
            "cell_id": f"{g.name}|{s.name}|{sigs[1].name}",
            "group": g.name,
            "server_sig": s.name,
            "ca_sig": sigs[1].name,
        }
        with store.cell("handshake", labels["cell_id"], labels):
            store.insert("handshake_raw", worker.table(rows, labels))
            store.insert("handshake_phase", worker.table(phases, labels))
    section = report.export(store)
    tables = tmp_path / "run" / "tables"
    with open(tables / "handshake_summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert list(summary[0])[:11] == [
        "group",
        "server_sig",
        "ca_sig",
        "n",
        "median_ms",
        "mean_ms",
        "p90_ms",
        "server_flight_segments",
        "server_flight_bytes",
        "client_bytes",
        "server_bytes",
    ]
    assert [r["server_sig"] for r in summary] == ["RSA-2048", "ML-DSA-44"]
    assert float(summary[0]["median_ms"]) == pytest.approx(0.452)
    with open(tables / "handshake_phases.csv") as f:
        ph = list(csv.DictReader(f))
    assert list(ph[0])[:7] == [
        "group",
        "server_sig",
        "ca_sig",
        "view",
        "phase",
        "mean_ms",
        "median_ms",
    ]
    for view in ("client", "server"):
        total = sum(
            float(r["mean_ms"]) for r in ph if r["view"] == view and r["server_sig"] == "RSA-2048"
        )
        assert total == pytest.approx(0.6)
    assert (tables / "handshake_client_processing.csv").exists()
    assert (tables / "handshake_message_sizes.csv").exists()
    # Tables 10-12 cell by cell: ServerHello (90) + Certificate (2800) is under 4096 bytes,
    # not shaded; three segments, CertificateVerify in the last.
    with open(tables / "handshake_client_processing_cells.csv") as f:
        cells = {r["server_sig"]: r for r in csv.DictReader(f) if r["cell_id"]}
    assert cells["ML-DSA-44"]["server_hello_certificate_bytes"] == "2890"
    assert cells["ML-DSA-44"]["shaded_4096_8192"] == "false"
    assert cells["ML-DSA-44"]["segments_sh_to_cv"] == "3"
    assert float(cells["ML-DSA-44"]["client_processing_mean_ms"]) > 0
    # Not the document's cells (no root sent): the note says so, and the document's cells
    # this run did not measure follow with the command that does.
    assert "--send-root" in cells["RSA-2048"]["note"]
    with open(tables / "handshake_client_processing_cells.csv") as f:
        document = [r for r in csv.DictReader(f) if not r["cell_id"]]
    assert len(document) == 48 and all("not in this run" in r["note"] for r in document)
    assert {r["shaded_4096_8192"] for r in ph} == {"false"}
    assert {r["segments_sh_to_cv"] for r in ph} == {"3"}
    with open(tables / "handshake_server_segments.csv") as f:
        seg = list(csv.reader(f))
    # Table 9's layout, then the stack, the chain sent, its padded size (none) and the client's
    # certificate (none) of the row.
    assert [row[:3] for row in seg] == [
        ["group", "CA RSA-2048 / server RSA-2048", "CA RSA-2048 / server ML-DSA-44"],
        ["X25519", "3", "3"],
    ]
    assert seg[0][3:] == ["stack", "chain_sent", "chain_bytes_requested", "client_sig"]
    assert seg[1][5] == ""
    figs = [b for b in section.blocks if b[0] == "figure"]
    assert figs and all(b[1].exists() for b in figs)
    store.close()


def test_stacked_figure_names_every_phase_of_each_view_under_it():
    """The legend under each view: one entry per phase of the view, in the view's order down
    the first column and then the second, each patch coloured as the phase's bars."""
    labels = ["RSA-2048", "ML-DSA-44"]
    rows = {
        (lab, view, p[0]): 0.1 * (i + 1)
        for lab in labels
        for view, table in hp.VIEWS.items()
        for i, p in enumerate(table)
    }
    fig = report.stacked_figure("t", labels, rows, hp.VIEWS)
    try:
        colours = report.phase_colours()
        for ax, view in zip(fig.axes, ("client", "server"), strict=True):
            names = [p[0] for p in hp.VIEWS[view]]
            assert [t.get_text() for t in ax.texts] == names
            entries = [p for p in ax.patches if not p.get_clip_on()]
            assert len(entries) == len(names)
            for name, patch in zip(names, entries, strict=True):
                assert matplotlib.colors.same_color(patch.get_facecolor(), colours[name][0])
                assert patch.get_hatch() == colours[name][1]
            # Column-major: the first half down the left column, the rest down the right.
            half = -(-len(names) // 2)
            xs = [t.get_window_extent().x0 for t in ax.texts]
            assert max(xs[:half]) < min(xs[half:])
            ys = [t.get_window_extent().y0 for t in ax.texts[:half]]
            assert ys == sorted(ys, reverse=True)
            # The bars: a phase's on every label's row, in the phase's colour, each one
            # starting where the one before it ended.
            assert len(ax.collections) == len(names)
            left = [0.0] * len(labels)
            for name, phase in zip(names, ax.collections, strict=True):
                assert matplotlib.colors.same_color(phase.get_facecolor()[0], colours[name][0])
                assert phase.get_hatch() == colours[name][1]
                for row, (lab, path) in enumerate(zip(labels, phase.get_paths(), strict=True)):
                    (x0, y0), (x1, y1) = path.get_extents().get_points()
                    width = rows[(lab, view, name)]
                    assert (x0, x1) == pytest.approx((left[row], left[row] + width))
                    assert (y0, y1) == pytest.approx((row - 0.4, row + 0.4))
                    left[row] += width
            assert ax.get_xlim()[0] == 0  # the time axis starts at 0, as barh's
    finally:
        figures.plt.close(fig)
