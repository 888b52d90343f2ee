"""Segment mapping, phases, write-buffer and congestion-window analysis on synthetic
captures whose every timestamp is known (written to pcap files and read back)."""

from __future__ import annotations

import pytest

from pqlab import pcap
from pqlab.pcap import ACK, PSH, SYN
from pqlab.tls import flight
from pqlab.tls import phases as hp

CLIENT, SERVER, PORT = "198.18.0.1", "198.18.0.2", 4433
ONE_WAY = 50_000  # ns between the two capture points


class Wire:
    """Builds matching client-side and server-side captures of one connection."""

    def __init__(self, t0: int, cport: int, cisn: int = 1000, sisn: int = 5000):
        self.t0, self.cport, self.cisn, self.sisn = t0, cport, cisn, sisn
        self.client_frames: list[pcap.Frame] = []
        self.server_frames: list[pcap.Frame] = []

    def send(
        self,
        t: int,
        from_client: bool,
        flags: int,
        start: int,
        length: int = 0,
        ack: int | None = None,
        lost: bool = False,
    ) -> None:
        """One segment leaving its sender at `t` and, unless `lost` (then only the
        sender's capture has it), reaching the other side ONE_WAY later."""
        t += self.t0
        if from_client:
            src, dst, sp, dp, isn, peer = CLIENT, SERVER, self.cport, PORT, self.cisn, self.sisn
        else:
            src, dst, sp, dp, isn, peer = SERVER, CLIENT, PORT, self.cport, self.sisn, self.cisn
        seq = isn if flags & SYN else isn + 1 + start
        ackno = 0 if ack is None else peer + 1 + ack
        if ack is not None:
            flags |= ACK
        mk = lambda ts: pcap.build_tcp_frame(ts, src, dst, sp, dp, seq, ackno, flags, length)  # noqa: E731
        (self.client_frames if from_client else self.server_frames).append(mk(t))
        if not lost:
            (self.server_frames if from_client else self.client_frames).append(mk(t + ONE_WAY))

    def sort(self) -> None:
        """Each capture in time order (segments sent late may arrive before others)."""
        self.client_frames.sort(key=lambda f: f.ts_ns)
        self.server_frames.sort(key=lambda f: f.ts_ns)


def server_records(sizes: dict[str, int]) -> list[hp.TlsRecord]:
    """Records as OpenSSL writes a TLS 1.3 server flight (one message per record)."""
    out, end = [], 0
    for name, content in (
        ("ServerHello", 22),
        ("ChangeCipherSpec", 20),
        ("EncryptedExtensions", 23),
        ("Certificate", 23),
        ("CertificateVerify", 23),
        ("Finished", 23),
    ):
        if name == "ChangeCipherSpec":
            end += 6
            out.append(hp.TlsRecord("server", end, 20, ()))
            continue
        length = sizes[name]
        end += 5 + length + (17 if content == 23 else 0)
        out.append(hp.TlsRecord("server", end, content, ((name, length),)))
    return out


def client_records(ch: int = 295) -> list[hp.TlsRecord]:
    return [
        hp.TlsRecord("client", 5 + ch, 22, (("ClientHello", ch),)),
        hp.TlsRecord("client", 5 + ch + 6, 20, ()),
        hp.TlsRecord("client", 5 + ch + 6 + 5 + 36 + 17, 23, (("Finished", 36),)),
    ]


def opening(w: Wire, certificate: int, certificate_verify: int = 264) -> list[hp.TlsRecord]:
    """Both sides' records with a Certificate of `certificate` bytes, and the connection up
    to the ClientHello (SYN at 0, SYN/ACK at 80 us, ACK at 140 us, ClientHello at 200 us)."""
    recs = client_records() + server_records(
        {
            "ServerHello": 90,
            "EncryptedExtensions": 10,
            "Certificate": certificate,
            "CertificateVerify": certificate_verify,
            "Finished": 36,
        }
    )
    w.send(0, True, SYN, 0)
    w.send(80_000, False, SYN, 0, ack=0)
    w.send(140_000, True, 0, 0, ack=0)
    w.send(200_000, True, PSH, 0, 300, ack=0)
    return recs


def small_handshake(w: Wire) -> list[hp.TlsRecord]:
    """A flight under 4096 bytes: one write at t=400 us, three segments."""
    recs = opening(w, 2800)
    fin_end = hp.message_end(recs, "server", "Finished")
    assert fin_end == 3299
    w.send(400_000, False, 0, 0, 1448, ack=300)
    w.send(401_000, False, 0, 1448, 1448, ack=300)
    w.send(402_000, False, PSH, 2896, fin_end - 2896, ack=300)
    w.send(460_000, True, 0, 300, 0, ack=2896)
    w.send(600_000, True, PSH, 300, 64, ack=fin_end)
    return recs


def roundtrip(tmp_path, w: Wire) -> tuple[pcap.Connection, pcap.Connection]:
    pcap.write_pcap(tmp_path / "client.pcap", w.client_frames)
    pcap.write_pcap(tmp_path / "server.pcap", w.server_frames)
    (c,) = pcap.split_connections(pcap.tcp_packets(tmp_path / "client.pcap"), PORT)
    (s,) = pcap.split_connections(pcap.tcp_packets(tmp_path / "server.pcap"), PORT)
    return c, s


def test_pcap_roundtrip_keeps_nanoseconds_and_sequence_numbers(tmp_path):
    w = Wire(1_800_000_000_000_000_123, 40000, cisn=0xFFFFFFF0)  # ISN near wrap-around
    small_handshake(w)
    c, _ = roundtrip(tmp_path, w)
    assert c.segments[0].ts_ns == 1_800_000_000_000_000_123
    data = [s for s in c.segments if s.payload_len]
    assert [(s.start, s.end) for s in data if s.from_client] == [(0, 300), (300, 364)]
    assert [(s.start, s.end) for s in data if not s.from_client] == [
        (0, 1448),
        (1448, 2896),
        (2896, 3299),
    ]


def test_points_and_phases_of_a_small_flight(tmp_path):
    w = Wire(10**18, 40000)
    recs = small_handshake(w)
    c, s = roundtrip(tmp_path, w)
    h = hp.analyse(c, s, recs)
    us = {k: (v - 10**18) // 1000 for k, v in h.points.items()}
    assert us == {
        "1": 0,
        "A": 50,
        "B": 80,
        "2": 130,
        "3": 140,
        "C": 190,
        "4": 200,
        "D": 250,
        "E": 400,
        "F": 402,
        "G": 402,
        "H": 402,
        "5": 450,
        "6": 452,
        "7": 452,
        "8": 452,
        "9": 600,
        "I": 650,
    }
    client = dict(h.phases["client"])
    server = dict(h.phases["server"])
    assert client["Client Hello rcv -> Server Hello send"] == 150_000
    assert client["Server Hello rcv -> Certificate rcv"] == 2_000
    assert server["Server Hello send -> Certificate send"] == 2_000
    assert server["ACK rcv -> Client Hello rcv"] == 60_000
    assert server["Finished sending"] == 50_000
    assert h.handshake_ns == 452_000 and h.total_ns == 600_000
    assert h.client_processing_ns == 150_000
    for view in ("client", "server"):
        assert [p for p, _ in h.phases[view]] == [p for p, *_ in hp.VIEWS[view]]
        assert sum(ns for _, ns in h.phases[view]) == h.total_ns
        assert sum(ns for _, ns in h.phases[view][:-1]) == h.handshake_ns
    f = h.flight
    assert f["segments"] == 3 and f["bytes"] == 3299 and f["retransmissions"] == 0
    assert f["writes_predicted"] == 1 and not f["split_by_write_buffer"]
    assert f["cwnd_stalls"] == 0
    assert f["message_sizes"]["server Certificate"] == 2800
    # wire bytes: 40-byte headers on every packet + payload
    assert f["client_wire_bytes"] == 5 * 40 + 300 + 64
    assert f["server_wire_bytes"] == 4 * 40 + 3299


def test_segments_to_certificate_verify_leave_finished_out(tmp_path):
    """Document 000 counts the segments from ServerHello to CertificateVerify (its 10-, 13-
    and 16-segment cases): a CertificateVerify record ending on a segment's boundary leaves
    Finished to a segment of its own, which the count leaves out."""
    w = Wire(3 * 10**18, 40002)
    # ServerHello + Certificate under 4096 bytes: the flight is one write; CertificateVerify's
    # record ends the second segment.
    recs = opening(w, 1297, certificate_verify=1422)
    cv_end = hp.message_end(recs, "server", "CertificateVerify")
    fin_end = hp.message_end(recs, "server", "Finished")
    assert cv_end == 2 * 1448 and fin_end > cv_end
    w.send(400_000, False, 0, 0, 1448, ack=300)
    w.send(401_000, False, 0, 1448, 1448, ack=300)
    w.send(402_000, False, PSH, 2896, fin_end - 2896, ack=300)
    w.send(600_000, True, PSH, 300, 64, ack=fin_end)
    c, s = roundtrip(tmp_path, w)
    f = hp.analyse(c, s, recs).flight
    assert f["segments"] == 3
    assert f["segments_through_certificate_verify"] == 2


def test_large_flight_split_by_buffer_and_stalled_by_cwnd(tmp_path):
    """ServerHello+Certificate > 14232 bytes: 4096 flushed first, the rest of the
    Certificate needs more than the 10 initial segments, so the 11th waits for an ACK."""
    w = Wire(2 * 10**18, 40001)
    recs = client_records() + server_records(
        {
            "ServerHello": 1100,
            "EncryptedExtensions": 10,
            "Certificate": 16000,
            "CertificateVerify": 2420,
            "Finished": 36,
        }
    )
    fin_end = hp.message_end(recs, "server", "Finished")
    cert_end = hp.message_end(recs, "server", "Certificate")
    w.send(0, True, SYN, 0)
    w.send(80_000, False, SYN, 0, ack=0)
    w.send(140_000, True, 0, 0, ack=0)
    w.send(200_000, True, PSH, 0, 300, ack=0)
    writes = flight.OPENSSL.writes(
        [
            r.end - p
            for r, p in zip(
                [r for r in recs if r.sender == "server"],
                [0] + [r.end for r in recs if r.sender == "server"][:-1],
                strict=True,
            )
        ]
    )
    assert writes == [4096, cert_end, fin_end]
    # segments of each write, MSS 1448
    segs = []
    prev = 0
    for end in writes:
        while prev < end:
            n = min(1448, end - prev)
            segs.append((prev, n))
            prev += n
    t = 400_000
    for i, (start, n) in enumerate(segs[:10]):
        w.send(t + i * 1000, False, 0, start, n, ack=300)
    # the client acknowledges the first three (the 4096-byte write) at the server at 520 us
    w.send(470_000, True, 0, 300, 0, ack=segs[3][0])
    for i, (start, n) in enumerate(segs[10:]):
        w.send(521_000 + i * 1000, False, 0, start, n, ack=300)
    w.send(700_000, True, PSH, 300, 64, ack=fin_end)
    c, s = roundtrip(tmp_path, w)
    h = hp.analyse(c, s, recs)
    f = h.flight
    assert f["segments"] == len(segs) and f["split_by_write_buffer"]
    assert f["writes_predicted"] == 3
    assert f["flush_offsets_predicted"] == writes
    # Document 000's count from ServerHello to CertificateVerify: the segments up to the
    # one carrying CertificateVerify's last byte, Finished's own segment left out.
    cv_end = hp.message_end(recs, "server", "CertificateVerify")
    through_cv = next(i + 1 for i, (start, n) in enumerate(segs) if start + n >= cv_end)
    assert f["segments_through_certificate_verify"] == through_cv == len(segs)
    assert f["short_segment_ends"] == [4096, cert_end]
    assert f["cwnd_stalls"] == 1
    assert f["cwnd_stall_wait_ns"] == 521_000 - 409_000
    assert f["bytes_through_certificate"] == cert_end
    for view in ("client", "server"):
        assert sum(ns for _, ns in h.phases[view]) == h.total_ns


@pytest.mark.parametrize(
    "sizes,expected",
    [
        ([100, 6, 40, 3000, 300, 60], [3506]),  # all fits: one write after Finished
        ([100, 6, 40, 5000, 300, 60], [4096, 5506]),  # SH+Cert in 4096..8192: split once
        ([100, 6, 40, 9000, 300, 60], [4096, 9146, 9506]),  # >= 8192: rest of Cert direct
        ([4096], [4096]),
        ([4095, 2], [4096, 4097]),
    ],
)
def test_write_buffer_model(sizes, expected):
    assert flight.OPENSSL.writes(sizes) == expected


def test_missing_segment_is_an_error(tmp_path):
    w = Wire(10**18, 40002)
    recs = small_handshake(w)
    w.server_frames.pop()  # the client's Finished never arrives at the server
    w.client_frames.pop()
    c, s = roundtrip(tmp_path, w)
    with pytest.raises(hp.AnalysisError):
        hp.analyse(c, s, recs)


def test_new_syn_on_same_port_is_a_new_connection(tmp_path):
    w1, w2 = Wire(10**18, 40003), Wire(10**18 + 10**9, 40003, cisn=77, sisn=88)
    small_handshake(w1)
    small_handshake(w2)
    pcap.write_pcap(tmp_path / "c.pcap", w1.client_frames + w2.client_frames)
    conns = pcap.split_connections(pcap.tcp_packets(tmp_path / "c.pcap"), PORT)
    assert len(conns) == 2 and conns[1].client_isn == 77


def _three_segment_flight(w: Wire, times: list[int], ack_at: int | None) -> list[hp.TlsRecord]:
    """A 4096+ byte flight whose first write (4096 bytes, 3 segments) leaves at `times`,
    with a client ACK of the first segment reaching the server at `ack_at`."""
    recs = opening(w, 3800)
    fin_end = hp.message_end(recs, "server", "Finished")
    for t, (start, n) in zip(times, [(0, 1448), (1448, 1448), (2896, 1200)], strict=True):
        w.send(t, False, 0, start, n, ack=300)
    if ack_at is not None:
        w.send(ack_at - ONE_WAY, True, 0, 300, 0, ack=1448)
    w.send(900_000, False, PSH, 4096, fin_end - 4096, ack=300)
    w.send(1_000_000, True, PSH, 300, 64, ack=fin_end)
    return recs


def test_segment_of_one_write_released_by_an_ack_is_a_stall(tmp_path):
    """Segments 2 and 3 were written together with segment 1 but left only right after the
    ACK (a window smaller than the model's initcwnd): counted as a stall."""
    w = Wire(10**18, 40010)
    recs = _three_segment_flight(w, [400_000, 470_000, 471_000], ack_at=465_000)
    c, s = roundtrip(tmp_path, w)
    f = hp.analyse(c, s, recs, initcwnd=10).flight
    assert f["cwnd_stalls"] == 1 and f["cwnd_stall_wait_ns"] == 70_000


def test_ack_between_back_to_back_segments_is_not_a_stall(tmp_path):
    """An ACK that happens to arrive between two segments which left long after it (the
    sender was slow, not gated) and across a write boundary is not a stall."""
    w = Wire(10**18, 40011)
    recs = _three_segment_flight(w, [400_000, 401_000, 402_000], ack_at=401_200)
    c, s = roundtrip(tmp_path, w)
    f = hp.analyse(c, s, recs, initcwnd=10).flight
    assert f["cwnd_stalls"] == 0
    w = Wire(10**18, 40012)
    recs = _three_segment_flight(w, [400_000, 401_000, 402_000], ack_at=450_000)
    c, s = roundtrip(tmp_path, w)
    f = hp.analyse(c, s, recs, initcwnd=10).flight
    assert f["cwnd_stalls"] == 0  # the ACK arrived before the second write: nothing waited


def test_lost_handshake_ack_completes_with_the_client_hello(tmp_path):
    """On a lossy link the pure ACK may never reach the server: the ClientHello (which
    acknowledges the SYN/ACK too) completes the TCP handshake there, so C = D."""
    w = Wire(10**18, 40020)
    recs = small_handshake(w)
    ack_at_server = [f for f in w.server_frames if f.ts_ns == 10**18 + 140_000 + ONE_WAY]
    assert len(ack_at_server) == 1
    w.server_frames.remove(ack_at_server[0])
    c, s = roundtrip(tmp_path, w)
    h = hp.analyse(c, s, recs)
    assert h.points["C"] == h.points["D"]
    server = dict(h.phases["server"])
    assert server["ACK sending"] == 110_000 and server["ACK rcv -> Client Hello rcv"] == 0
    assert sum(ns for _, ns in h.phases["server"]) == h.total_ns


def _ordered_points(**moved) -> dict[str, int]:
    """Points of a well-ordered handshake (one per microsecond, in flow order), some moved."""
    flow = ["1", "A", "B", "2", "3", "C", "4", "D", "E", "F", "G", "H", "5", "6", "7", "8", "9"]
    p = {k: i * 1000 for i, k in enumerate(flow)}
    p.update(moved)
    return p


def test_cross_host_orderings_within_the_clock_uncertainty_are_recorded_not_fatal():
    # 3 -> C crosses the hosts: C seen 51 ns before 3, as on a LAN whose offset is known
    # to +-20 us, is a disagreement to record.
    p = _ordered_points(C=_ordered_points()["3"] - 51)
    assert hp.order_disagreements(p, clock_tolerance_ns=20_000) == [("3", "C", 51)]
    # One clock (tolerance 0): the same order is an analysis error, as before.
    with pytest.raises(hp.AnalysisError, match="point C .* precedes point 3"):
        hp.order_disagreements(p, clock_tolerance_ns=0)
    # Beyond the uncertainty: an error that says so.
    far = _ordered_points(C=_ordered_points()["3"] - 50_000)
    with pytest.raises(hp.AnalysisError, match="uncertainty"):
        hp.order_disagreements(far, clock_tolerance_ns=20_000)


def test_one_capture_out_of_order_is_an_error_whatever_the_clocks():
    p = _ordered_points(E=_ordered_points()["D"] - 10)  # D -> E: both on the server
    with pytest.raises(hp.AnalysisError, match="point E .* precedes point D"):
        hp.order_disagreements(p, clock_tolerance_ns=1e9)
    assert hp.order_disagreements(_ordered_points(), 0) == []


# --- lossy links --------------------------------------------------------------------------


def _flight_with_a_lost_first_segment(w: Wire) -> list[hp.TlsRecord]:
    """`small_handshake`'s flight, whose first segment (ServerHello and the start of the
    Certificate) is lost on the way: the other two arrive, the client acknowledges nothing
    new (twice), and the server retransmits the first at 700 us."""
    recs = opening(w, 2800)
    fin_end = hp.message_end(recs, "server", "Finished")
    w.send(400_000, False, 0, 0, 1448, ack=300, lost=True)
    w.send(401_000, False, 0, 1448, 1448, ack=300)
    w.send(402_000, False, PSH, 2896, fin_end - 2896, ack=300)
    w.send(452_000, True, 0, 300, 0, ack=0)  # duplicate ACKs (SACK the two)
    w.send(453_000, True, 0, 300, 0, ack=0)
    w.send(700_000, False, 0, 0, 1448, ack=300)  # the retransmission
    w.send(760_000, True, 0, 300, 0, ack=fin_end)
    w.send(900_000, True, PSH, 300, 64, ack=fin_end)
    w.sort()
    return recs


def test_a_lost_segment_places_messages_on_the_retransmission_that_delivered_them(tmp_path):
    """The ServerHello arrives only with the retransmission (750 us), after the end of the
    Certificate (451 us): the client could read neither before, so 5, 6, 7 and 8 are all
    the retransmission's arrival, and the wait is in the phases that waited for it (the
    ServerHello's and the Finished's sending), not in a side's processing. Before, the
    Certificate was placed on its own end's arrival and the handshake refused: "point 6
    precedes point 5"."""
    w = Wire(10**18, 40030)
    recs = _flight_with_a_lost_first_segment(w)
    c, s = roundtrip(tmp_path, w)
    h = hp.analyse(c, s, recs)
    us = {k: (v - 10**18) // 1000 for k, v in h.points.items()}
    assert {k: us[k] for k in "DEFGH5678"} == {
        "D": 250, "E": 400, "F": 402, "G": 402, "H": 402,  # first transmissions (server)
        "5": 750, "6": 750, "7": 750, "8": 750,  # delivered in order (client)
    }  # fmt: skip
    assert hp.order_disagreements(h.points) == []
    client, server = dict(h.phases["client"]), dict(h.phases["server"])
    assert client["Server Hello sending"] == 350_000
    assert client["Server Hello rcv -> Certificate rcv"] == 0
    assert server["Finished sending"] == 348_000
    assert server["Server Hello send -> Certificate send"] == 2_000  # the server's own time
    assert sum(client.values()) == sum(server.values()) == h.total_ns
    # One retransmitted segment of 1448 bytes, server to client, sent at 700 us: in the
    # ServerHello's sending (client view) and the Finished's (server view).
    assert h.retransmitted == {"client": (0, 0), "server": (1, 1448)}
    for view, phase in (("client", "Server Hello sending"), ("server", "Finished sending")):
        counts = dict(
            zip([n for n, _ in h.phases[view]], h.phase_retransmissions[view], strict=True)
        )
        assert counts.pop(phase) == 1 and set(counts.values()) == {0}
    assert h.flight["retransmissions"] == 0  # after the flight's last first transmission


def test_delivered_waits_for_every_hole_before_an_end():
    """Out-of-order arrivals, overlaps and repeats: an end is delivered when the bytes
    before it are all in, by whichever segment completed them."""
    seg = lambda t, a, b: pcap.Segment(t, False, ACK, a, b, 0, 40 + b - a)  # noqa: E731
    conn = pcap.Connection(("c", 1), ("s", 2))
    conn.segments = [
        seg(10, 1000, 2000),  # ahead of a hole
        seg(20, 3000, 4000),  # ahead of two
        seg(30, 0, 500),
        seg(40, 0, 500),  # a repeat: changes nothing
        seg(50, 400, 1200),  # overlaps what is in and what is ahead: 0..2000 complete
        seg(60, 2000, 3500),  # fills the second hole, overlapping the segment ahead
    ]
    got = hp.delivered(conn, False, [100, 500, 501, 2000, 2001, 4000])
    assert got == {100: 30, 500: 30, 501: 50, 2000: 50, 2001: 60, 4000: 60}
    # In-order arrivals: the segment carrying each end, as `covering` finds it.
    conn = pcap.Connection(("c", 1), ("s", 2))
    conn.segments = [seg(10, 0, 1448), seg(11, 1448, 2896), seg(12, 2896, 3000)]
    ends = [90, 1448, 1449, 3000]
    assert hp.delivered(conn, False, ends) == {e: hp.covering(conn, False, e).ts_ns for e in ends}
    assert hp.delivered(conn, False, [90, 3001]) == {90: 10}
    with pytest.raises(hp.AnalysisError, match="stream bytes 0..3000 complete"):
        hp.delivered_at(conn, False, [90, 3001])


def test_retransmissions_count_syn_data_and_fin_sent_again_and_no_pure_ack():
    mk = lambda t, flags, a, b: pcap.Segment(t, True, flags, a, b, 0, 40 + b - a)  # noqa: E731
    conn = pcap.Connection(("c", 1), ("s", 2))
    conn.segments = [
        mk(1, SYN, 0, 0),
        mk(2, SYN, 0, 0),  # the SYN again
        mk(3, ACK, 0, 0),
        mk(4, ACK, 0, 0),  # a duplicate ACK: no sequence space, not a retransmission
        mk(5, ACK | PSH, 0, 300),
        mk(6, ACK, 300, 1000),
        mk(7, ACK | PSH, 0, 300),  # data again
        mk(8, ACK | pcap.FIN, 1000, 1000),
        mk(9, ACK | pcap.FIN, 1000, 1000),  # the FIN again
        mk(10, ACK, 1001, 1001),  # the ACK after the FIN
        mk(11, ACK, 200, 700),  # partly new? no: all of it was sent
    ]
    got = hp.retransmissions(conn, True)
    assert [s.ts_ns for s in got] == [2, 7, 9, 11]
    assert hp.retransmissions(conn, False) == []


def test_phase_retransmissions_count_each_retransmission_once_per_view():
    p = _ordered_points()
    p["I"] = p["9"]
    resent = sorted([p["1"], p["A"] + 1, p["E"], p["8"] - 1, p["9"], p["9"] + 5])
    got = hp.phase_retransmissions(p, resent)
    for view, table in hp.VIEWS.items():
        # The one at 9 and after are after the last phase; the others fall once each.
        assert sum(got[view]) == 4 and len(got[view]) == len(table)
    client = dict(zip([n for n, *_ in hp.CLIENT_PHASES], got["client"], strict=True))
    assert client["SYN sending"] == 1 and client["SYN rcv -> ACK/SYN send"] == 1
