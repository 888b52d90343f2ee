"""Segment mapping, phases, write-buffer and congestion-window analysis on synthetic
captures whose every timestamp is known (written to pcap files and read back)."""

from __future__ import annotations

import pytest

from pqlab import pcap
from pqlab.experiments.handshake import phases as hp
from pqlab.pcap import ACK, PSH, SYN
from pqlab.tls import flight

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
    ) -> None:
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
        (self.server_frames if from_client else self.client_frames).append(mk(t + ONE_WAY))


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


def small_handshake(w: Wire) -> list[hp.TlsRecord]:
    """A flight under 4096 bytes: one write at t=400 us, three segments."""
    recs = client_records() + server_records(
        {
            "ServerHello": 90,
            "EncryptedExtensions": 10,
            "Certificate": 2800,
            "CertificateVerify": 264,
            "Finished": 36,
        }
    )
    w.send(0, True, SYN, 0)
    w.send(80_000, False, SYN, 0, ack=0)
    w.send(140_000, True, 0, 0, ack=0)
    w.send(200_000, True, PSH, 0, 300, ack=0)
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
    recs = client_records() + server_records(
        {
            "ServerHello": 90,
            "EncryptedExtensions": 10,
            "Certificate": 3800,
            "CertificateVerify": 264,
            "Finished": 36,
        }
    )
    fin_end = hp.message_end(recs, "server", "Finished")
    w.send(0, True, SYN, 0)
    w.send(80_000, False, SYN, 0, ack=0)
    w.send(140_000, True, 0, 0, ack=0)
    w.send(200_000, True, PSH, 0, 300, ack=0)
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
