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
