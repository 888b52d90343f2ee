"""The pcap reader: headers read for all packets at once must give exactly what reading
each frame alone (`parse_tcp`) gives, for every kind of frame a capture can hold."""

from __future__ import annotations

import dataclasses
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pqlab import pcap
from pqlab.errors import UserError
from test_properties import SETTINGS


def _ipv6_tcp(ts: int, sport: int, dport: int, payload: bytes) -> pcap.Frame:
    tcp = struct.pack("!HHIIHHHH", sport, dport, 7, 9, (5 << 12) | pcap.ACK, 512, 0, 0)
    ip = struct.pack(
        "!IHBB16s16s", 6 << 28, len(tcp) + len(payload), 6, 64, b"\x20" * 16, b"\x21" * 16
    )
    data = b"\x02" * 12 + b"\x86\xdd" + ip + tcp + payload
    return pcap.Frame(ts, data, len(data))


def _frames() -> list[pcap.Frame]:
    f = [
        pcap.build_tcp_frame(1000, "198.18.0.1", "198.18.0.2", 40000, 4433, 1, 0, pcap.SYN, 0),
        pcap.build_tcp_frame(
            2000, "198.18.0.2", "198.18.0.1", 4433, 40000, 5, 2, pcap.ACK, 3, payload=b"abc"
        ),
        _ipv6_tcp(3000, 40001, 4433, b"xyz!"),
    ]
    udp = bytearray(f[1].data)
    udp[23] = 17  # protocol UDP
    f.append(pcap.Frame(4000, bytes(udp), len(udp)))
    frag = bytearray(f[1].data)
    frag[20:22] = b"\x00\x10"  # fragment offset 16
    f.append(pcap.Frame(5000, bytes(frag), len(frag)))
    f.append(pcap.Frame(6000, b"\x02" * 12 + b"\x08\x06" + b"\x00" * 28, 42))  # ARP
    vlan = f[1].data[:12] + b"\x81\x00\x00\x05" + f[1].data[12:]
    f.append(pcap.Frame(7000, vlan, len(vlan)))
    f.append(pcap.Frame(8000, f[1].data[:30], 30))  # shorter than its headers
    # An Ethernet frame padded to 60 bytes: the padding is not payload.
    short = pcap.build_tcp_frame(9000, "198.18.0.1", "198.18.0.2", 40000, 4433, 2, 6, pcap.ACK, 0)
    f.append(pcap.Frame(9000, short.data + b"\x00" * 6, 60))
    return f


def _one_by_one(path, keep_payload=False) -> list[tuple]:
    linktype, frames = pcap.read_pcap(path)
    snaplen = pcap.read_snaplen(path)
    out = [pcap.parse_tcp(linktype, f, keep_payload, snaplen) for f in frames]
    return [dataclasses.astuple(p) for p in out if p is not None]


@pytest.mark.parametrize("keep_payload", [False, True])
def test_all_at_once_equals_one_by_one(tmp_path, keep_payload):
    path = tmp_path / "mixed.pcap"
    pcap.write_pcap(path, _frames())
    got = [dataclasses.astuple(p) for p in pcap.tcp_packets(path, keep_payload)]
    assert got == _one_by_one(path, keep_payload)
    # SYN, data (b"abc"), IPv6 data, VLAN-tagged data, the padded ACK.
    assert [p[0] for p in got] == [1000, 2000, 3000, 7000, 9000]
    if keep_payload:
        assert [p[-1] for p in got] == [b"", b"abc", b"xyz!", b"abc", b""]


def test_bare_ip_framing(tmp_path):
    frames = [
        pcap.Frame(f.ts_ns, f.data[14:], f.orig_len - 14)
        for f in _frames()
        if f.data[12:14] == b"\x08\x00"
    ]
    path = tmp_path / "tun.pcap"
    pcap.write_pcap(path, frames, linktype=pcap.LINKTYPE_RAW)
    got = [dataclasses.astuple(p) for p in pcap.tcp_packets(path, True)]
    assert got == _one_by_one(path, True) and len(got) == 3


def test_cut_packets_and_truncated_files(tmp_path):
    path = tmp_path / "cut.pcap"
    f = pcap.build_tcp_frame(1, "10.0.0.1", "10.0.0.2", 1, 2, 0, 0, pcap.ACK, 100)
    pcap.write_pcap(path, [pcap.Frame(1, f.data[:70], f.orig_len)], snaplen=70)
    assert len(pcap.tcp_packets(path)) == 1  # headers only: fine
    with pytest.raises(UserError, match="packet 1 was captured with 70 of its 154 bytes"):
        pcap.tcp_packets(path, keep_payload=True)
    # A last record cut by a killed capture is left out, as read_pcap leaves it out.
    whole = tmp_path / "whole.pcap"
    pcap.write_pcap(whole, _frames()[:2])
    cut = tmp_path / "truncated.pcap"
    cut.write_bytes(whole.read_bytes()[:-10])
    assert len(pcap.tcp_packets(cut)) == 1 == len(pcap.read_pcap(cut)[1])
    empty = tmp_path / "empty.pcap"
    pcap.write_pcap(empty, [])
    assert pcap.tcp_packets(empty) == []


def _flat(conns):
    return [
        (
            c.client,
            c.server,
            c.client_isn,
            c.server_isn,
            [dataclasses.astuple(s) for s in c.segments],
        )
        for c in conns
    ]


def _conn_frames(t0, sport, cisn, sisn, server="198.18.0.2", syn_again=False):
    """A client and server exchange: SYN (twice: a retransmission), SYN/ACK, ACK, data
    each way, FIN."""
    c, s, port = "198.18.0.1", server, 4433
    b = pcap.build_tcp_frame
    frames = [b(t0, c, s, sport, port, cisn, 0, pcap.SYN, 0)]
    if syn_again:
        frames.append(b(t0 + 5, c, s, sport, port, cisn, 0, pcap.SYN, 0))
    frames += [
        b(t0 + 10, s, c, port, sport, sisn, cisn + 1, pcap.SYN | pcap.ACK, 0),
        b(t0 + 20, c, s, sport, port, cisn + 1, sisn + 1, pcap.ACK, 0),
        b(t0 + 30, c, s, sport, port, cisn + 1, sisn + 1, pcap.ACK | pcap.PSH, 300),
        b(t0 + 40, s, c, port, sport, sisn + 1, cisn + 301, pcap.ACK, 1448),
        b(t0 + 41, s, c, port, sport, sisn + 1449, cisn + 301, pcap.ACK, 500),
        b(t0 + 50, c, s, sport, port, cisn + 301, sisn + 1949, pcap.ACK | pcap.FIN, 0),
    ]
    return frames


@pytest.mark.parametrize("keep_payload", [False, True])
def test_connections_all_at_once_equal_split_connections(tmp_path, keep_payload):
    b = pcap.build_tcp_frame
    frames = [
        # Server data of a connection whose SYN is not in the capture: belongs to none.
        b(1, "198.18.0.2", "198.18.0.1", 4433, 40009, 77, 88, pcap.ACK, 100),
        # A client port used twice, the first time with a retransmitted SYN; sequence
        # numbers that wrap past 2^32.
        *_conn_frames(1000, 40000, 0xFFFFFF00, 0xFFFFFFF0, syn_again=True),
        *_conn_frames(2000, 40000, 5000, 9000),
        *_conn_frames(1500, 40001, 123, 456),
        # Another server address, and traffic of another port.
        *_conn_frames(3000, 40002, 1, 2, server="198.18.0.3"),
        b(3500, "198.18.0.1", "198.18.0.2", 50000, 8080, 1, 0, pcap.SYN, 0),
    ]
    # A server segment before its SYN/ACK in the capture (clocks of two interfaces).
    frames.append(b(4005, "198.18.0.2", "198.18.0.1", 4433, 40003, 11, 0, pcap.ACK, 10))
    frames += _conn_frames(4000, 40003, 10, 10)
    path = tmp_path / "conns.pcap"
    pcap.write_pcap(path, sorted(frames, key=lambda f: f.ts_ns))
    want = pcap.split_connections(pcap.tcp_packets(path, keep_payload), 4433)
    got = pcap.connections(path, 4433, keep_payload)
    assert _flat(got) == _flat(want)
    assert [c.client[1] for c in got] == [40000, 40001, 40000, 40002, 40003]
    assert got[0].client_isn == 0xFFFFFF00 and got[0].segments[-2].end == 1948
    # And through the packet-by-packet path when another kind of frame is in the capture.
    pcap.write_pcap(path, sorted(frames, key=lambda f: f.ts_ns) + [_ipv6_tcp(9000, 1, 2, b"")])
    assert _flat(pcap.connections(path, 4433, keep_payload)) == _flat(want)


# --- lengths that do not add up ------------------------------------------------------------
#
# A packet socket sees frames before the kernel checks them, so a capture may hold packets
# whose length fields contradict each other (a hostile peer's, or a damaged file's). The
# receiving kernel drops those (ip_rcv_core, ipv6_rcv, tcp_v4_rcv); the reader skips them
# the same way, and no length it gives can be negative or larger than the packet.


def _v4(payload_len: int = 10) -> bytearray:
    frame = pcap.build_tcp_frame(
        1, "198.18.0.1", "198.18.0.2", 40000, 4433, 1, 1, pcap.ACK, payload_len
    )
    return bytearray(frame.data)


def _set16(data: bytearray, at: int, value: int) -> bytearray:
    struct.pack_into("!H", data, at, value)
    return data


def _v6(plen_delta: int = 0) -> bytearray:
    frame = _ipv6_tcp(1, 40001, 4433, b"0123456789")
    data = bytearray(frame.data)
    return _set16(data, 14 + 4, 20 + 10 + plen_delta)


IP, TCP = 14, 34  # where the IPv4 and TCP headers start in `_v4`'s frames
MALFORMED = {
    # IPv4 total length shorter than its IP and TCP headers (gave payload_len -10).
    "ipv4 total length below the headers": (_set16(_v4(), IP + 2, 30), None),
    "ipv4 total length below the IP header": (_set16(_v4(), IP + 2, 12), None),
    # IPv4 total length larger than the frame that went on the wire.
    "ipv4 total length past the frame": (_set16(_v4(), IP + 2, 1500), None),
    # A header length under 5 words puts the TCP header inside the IP header.
    "ipv4 header length below 20 bytes": (bytearray(_v4()[:IP]) + b"\x44" + _v4()[IP + 1 :], None),
    # A header length of 15 words, past the total length.
    "ipv4 header length past the total": (bytearray(_v4()[:IP]) + b"\x4f" + _v4()[IP + 1 :], None),
    # The first fragment of a fragmented segment: its length is not the segment's.
    "ipv4 more-fragments flag": (_set16(_v4(), IP + 6, 0x2000), None),
    # TCP data offset under 5 words, and past the IP payload.
    "tcp data offset below 20 bytes": (_set16(_v4(), TCP + 12, (4 << 12) | pcap.ACK), None),
    "tcp data offset past the payload": (_set16(_v4(), TCP + 12, (15 << 12) | pcap.ACK), None),
    # IPv6 payload length shorter than a TCP header, and past the frame.
    "ipv6 payload length below the tcp header": (_v6(-20), None),
    "ipv6 payload length past the frame": (_v6(+1000), None),
    # Headers cut by the snaplen: nothing of the segment can be read.
    "tcp header cut by the snaplen": (_v4()[: TCP + 12], "cut"),
    # A record holding more bytes than the packet had on the wire.
    "captured length above the wire length": (_v4(), "long"),
    # Not TCP: a UDP datagram whose length field lies is never read as anything.
    "udp length past the frame": (
        _set16(_v4()[: IP + 9] + b"\x11" + _v4()[IP + 10 :], TCP + 4, 9000),
        None,
    ),
}


def _record(data: bytearray, how: str | None) -> pcap.Frame:
    wire = len(data)
    if how == "cut":
        wire = len(_v4())
    elif how == "long":
        wire = len(data) - 4
    return pcap.Frame(5000, bytes(data), wire)


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("linktype", [pcap.LINKTYPE_ETHERNET, pcap.LINKTYPE_RAW])
def test_a_packet_whose_lengths_do_not_add_up_is_skipped(tmp_path, case, linktype):
    data, how = MALFORMED[case]
    bad = _record(data, how)
    good = [
        pcap.build_tcp_frame(1000, "198.18.0.1", "198.18.0.2", 40000, 4433, 0, 0, pcap.SYN, 0),
        pcap.build_tcp_frame(2000, "198.18.0.2", "198.18.0.1", 4433, 40000, 7, 1, SYNACK, 0),
        pcap.build_tcp_frame(3000, "198.18.0.1", "198.18.0.2", 40000, 4433, 1, 8, pcap.ACK, 0),
    ]
    frames = [*good, bad]
    if linktype == pcap.LINKTYPE_RAW:
        frames = [pcap.Frame(f.ts_ns, f.data[14:], f.orig_len - 14) for f in frames]
    path = tmp_path / "bad.pcap"
    pcap.write_pcap(path, frames, linktype=linktype)
    for keep in (False, True):
        if keep and how == "cut":  # a payload reader refuses a capture with cut packets
            with pytest.raises(UserError, match="packet 4 was captured with"):
                pcap.tcp_packets(path, keep_payload=keep)
            continue
        got = pcap.tcp_packets(path, keep_payload=keep)
        assert [p.ts_ns for p in got] == [1000, 2000, 3000], (case, keep)
        assert [dataclasses.astuple(p) for p in got] == _one_by_one(path, keep)
        (conn,) = pcap.connections(path, 4433, keep_payload=keep)
        assert [s.ts_ns for s in conn.segments] == [1000, 2000, 3000]
    assert pcap.parse_tcp(linktype, frames[-1]) is None


SYNACK = pcap.SYN | pcap.ACK


def test_a_packet_cut_by_the_capture_keeps_its_ip_length(tmp_path):
    """pqlab-engine's capture cuts packets in its socket filter, and the kernel then reports
    the kept length as the packet's (orig_len = incl = snaplen): the IP header's length
    stands. Below the snaplen a record is whole, and an IP length past it is refused."""
    data = _v4(1355)
    cut = pcap.Frame(5000, bytes(data[:128]), 128)
    path = tmp_path / "cut.pcap"
    pcap.write_pcap(path, [cut], snaplen=128)
    (p,) = pcap.tcp_packets(path)
    assert (p.payload_len, p.ip_len) == (1355, 1395)
    assert [dataclasses.astuple(x) for x in pcap.tcp_packets(path)] == _one_by_one(path)
    pcap.write_pcap(path, [cut], snaplen=129)  # not cut after all: 128 bytes can't hold it
    assert pcap.tcp_packets(path) == [] == _one_by_one(path)


def _check_packets(
    packets: list[pcap.TcpPacket], frames: dict[int, pcap.Frame], snaplen: int
) -> None:
    """What no packet of any capture may give: a negative payload, or more payload than its
    IP packet holds, or an IP packet longer than the frame on the wire."""
    for p in packets:
        assert 0 <= p.payload_len <= p.ip_len - 40 and p.ip_len <= 65535 + 40, p
        f = frames[p.ts_ns]
        if len(f.data) < snaplen:  # a whole record: its packet is no longer than it
            assert p.ip_len <= max(f.orig_len, len(f.data)), p
        if p.payload is not None:
            assert len(p.payload) == p.payload_len, p


def _frame_from(draw) -> bytes:
    """A frame: arbitrary bytes, or an IPv4 or IPv6 TCP segment whose fields are then set
    to arbitrary values and whose bytes may be cut."""
    kind = draw(st.sampled_from(["bytes", "v4", "v6"]))
    if kind == "bytes":
        return draw(st.binary(max_size=120))
    payload = draw(st.integers(0, 60))
    data = (
        _v4(payload) if kind == "v4" else bytearray(_ipv6_tcp(1, 40000, 4433, bytes(payload)).data)
    )
    tcp = TCP if kind == "v4" else 14 + 40
    fields = {
        "v4": [(IP, 1), (IP + 2, 2), (IP + 6, 2), (IP + 9, 1)],
        "v6": [(IP, 1), (IP + 4, 2), (IP + 6, 1)],
    }[kind] + [(tcp + 12, 1)]
    for at, size in draw(st.lists(st.sampled_from(fields), max_size=3)):
        data[at : at + size] = draw(st.integers(0, 256**size - 1)).to_bytes(size, "big")
    return bytes(data[: draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@st.composite
def captures(draw) -> list[pcap.Frame]:
    frames = []
    for i in range(draw(st.integers(0, 8))):
        data = _frame_from(draw)
        wire = max(0, len(data) + draw(st.sampled_from([0, 0, 0, -3, 5, 1500])))
        frames.append(pcap.Frame(1000 * (i + 1), data, wire))
    return frames


PROPERTY = settings(SETTINGS, max_examples=300)  # deterministic, as every property test


@PROPERTY
@given(
    frames=captures(),
    linktype=st.sampled_from([pcap.LINKTYPE_ETHERNET, pcap.LINKTYPE_RAW]),
    snaplen=st.sampled_from([262144, 96, 54]),
)
def test_no_frame_gives_a_negative_or_oversized_length(frames, linktype, snaplen):
    """Whatever the frames hold, both readers (all at once, frame by frame) give the same
    packets, none with a negative or oversized length, and the connections split from them
    are the same either way."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.pcap"
        pcap.write_pcap(path, frames, linktype=linktype, snaplen=snaplen)
        by_ts = {f.ts_ns: f for f in frames}
        for keep in (False, True):
            try:
                got = pcap.tcp_packets(path, keep_payload=keep)
            except UserError as e:
                assert keep and "\n" not in str(e)  # only a cut packet refuses a payload read
                continue
            _check_packets(got, by_ts, snaplen)
            assert [dataclasses.astuple(p) for p in got] == _one_by_one(path, keep)
            conns = pcap.connections(path, 4433, keep_payload=keep)
            assert _flat(conns) == _flat(pcap.split_connections(got, 4433))
            for c in conns:
                assert all(0 <= s.end - s.start <= 65535 for s in c.segments)


@PROPERTY
@given(raw=st.binary(max_size=400), header=st.booleans())
def test_arbitrary_bytes_never_crash_the_reader(raw, header):
    """Any file: a UserError of one line, or packets with sane lengths."""
    if header:  # a valid file header, then anything
        raw = struct.pack("<IHHiIII", pcap.MAGIC_NSEC, 2, 4, 0, 0, 262144, 1) + raw
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.pcap"
        path.write_bytes(raw)
        for keep in (False, True):
            try:
                got = pcap.tcp_packets(path, keep_payload=keep)
                pcap.connections(path, 4433, keep_payload=keep)
            except UserError as e:
                assert "\n" not in str(e)
                continue
            for p in got:
                assert 0 <= p.payload_len <= p.ip_len - 40 and p.ip_len <= 65535 + 40, p
