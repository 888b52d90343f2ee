"""The pcap reader: headers read for all packets at once must give exactly what reading
each frame alone (`parse_tcp`) gives, for every kind of frame a capture can hold."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from pqlab import pcap
from pqlab.errors import UserError


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
    out = [pcap.parse_tcp(linktype, f, keep_payload) for f in frames]
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
