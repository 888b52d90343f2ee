"""Reading and writing pcap files, and taking TCP connections apart from them.

Only what the handshake analysis needs, without third-party packet libraries: the classic
pcap format (microsecond 0xa1b2c3d4 and nanosecond 0xa1b23c4d magics, either byte order),
Ethernet (linktype 1) and bare-IP (linktype 101) framing, IPv4 and IPv6, TCP headers.
`write_pcap` and `build_tcp_frame` make synthetic captures for tests.

`connections(path, port)` gives a capture's TCP connections to a port (`tcp_packets` and
`split_connections` in one, read with numpy for all packets at once: a handshake cell's
captures hold some 25000 packets each).

The timing analysis reads headers only, so its captures may be cut at a small snaplen. The
key-log decryption (pqlab.tls.keylog) also needs the TCP payload: `connections(path, port,
keep_payload=True)` keeps it (and refuses a capture whose packets were cut by the snaplen),
and `reassemble(conn, from_client)` rebuilds one direction's byte stream of a connection
from its segments by sequence number.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pqlab import files
from pqlab.errors import UserError

MAGIC_USEC = 0xA1B2C3D4
MAGIC_NSEC = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


@dataclass(frozen=True)
class Frame:
    ts_ns: int
    data: bytes
    orig_len: int


@dataclass(slots=True)
class TcpPacket:
    """One captured TCP segment: header fields, the payload length and, only when the
    reader was asked to keep it (`keep_payload`), the payload bytes."""

    ts_ns: int
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload_len: int
    ip_len: int  # bytes of the IP packet (headers included): what went on the wire
    window: int = 0
    payload: bytes | None = None  # None unless kept (headers-only readers save the memory)

    @property
    def syn(self) -> bool:
        return bool(self.flags & SYN)

    @property
    def has_ack(self) -> bool:
        return bool(self.flags & ACK)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FIN)

    @property
    def rst(self) -> bool:
        return bool(self.flags & RST)


def _file_header(raw: bytes, path) -> tuple[str, int, int]:
    """(byte order, nanoseconds per timestamp fraction unit, linktype) of a classic pcap."""
    if len(raw) < 24:
        raise UserError(f"{path}: not a pcap file (only {len(raw)} bytes)")
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", raw[:4])[0]
        if magic in (MAGIC_USEC, MAGIC_NSEC):
            break
    else:
        raise UserError(
            f"{path}: not a classic pcap file (magic {raw[:4].hex()}); pcapng is not supported"
        )
    scale = 1 if magic == MAGIC_NSEC else 1000
    return endian, scale, struct.unpack(endian + "I", raw[20:24])[0]


def _record_offsets(raw: bytes, endian: str) -> list[int]:
    """Where each packet record starts: the one walk a pcap needs in Python (each record's
    length says where the next begins); a truncated last record (a capture killed
    mid-write) is left out."""
    incl_at = struct.Struct(endian + "I").unpack_from
    offsets, pos, size = [], 24, len(raw)
    while pos + 16 <= size:
        end = pos + 16 + incl_at(raw, pos + 8)[0]
        if end > size:
            break
        offsets.append(pos)
        pos = end
    return offsets


def _read(path: str | Path) -> bytes:
    """A capture's bytes: a regular file (not a link) within the bound of a capture."""
    return files.read_input(path, f"the capture {path}", "capture", follow=False)


def read_pcap(path: str | Path) -> tuple[int, list[Frame]]:
    """(linktype, frames) of a classic pcap file; timestamps in nanoseconds."""
    raw = _read(path)
    endian, scale, linktype = _file_header(raw, path)
    rec = struct.Struct(endian + "IIII")
    frames = []
    for pos in _record_offsets(raw, endian):
        sec, frac, incl, orig = rec.unpack_from(raw, pos)
        frames.append(
            Frame(sec * 1_000_000_000 + frac * scale, raw[pos + 16 : pos + 16 + incl], orig)
        )
    return linktype, frames


def read_snaplen(path: str | Path) -> int:
    """The snaplen recorded in a classic pcap file's header (bytes kept per packet)."""
    head = files.read_input(path, f"the capture {path}", "capture", head=24)
    if len(head) < 24:
        raise UserError(f"{path}: not a pcap file (only {len(head)} bytes)")
    for endian in ("<", ">"):
        if struct.unpack(endian + "I", head[:4])[0] in (MAGIC_USEC, MAGIC_NSEC):
            return struct.unpack(endian + "I", head[16:20])[0]
    raise UserError(f"{path}: not a classic pcap file (magic {head[:4].hex()})")


def write_pcap(
    path: str | Path,
    frames: list[Frame],
    linktype: int = LINKTYPE_ETHERNET,
    snaplen: int = 262144,
    mode: int = 0o644,
) -> None:
    """Write a little-endian nanosecond pcap (the format pqlab-engine capture writes),
    whole or not at all (`pqlab.files`)."""
    out = [struct.pack("<IHHiIII", MAGIC_NSEC, 2, 4, 0, 0, snaplen, linktype)]
    for f in frames:
        out.append(
            struct.pack(
                "<IIII", f.ts_ns // 1_000_000_000, f.ts_ns % 1_000_000_000, len(f.data), f.orig_len
            )
        )
        out.append(f.data)
    files.write_file(path, b"".join(out), mode)


def _ip_text(b: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(b) == 4 else socket.AF_INET6, b)


def _ip_offset(linktype: int, data: bytes) -> int | None:
    """Where the IP header starts in a frame, or None when the frame carries no IP."""
    if linktype == LINKTYPE_RAW:
        return 0
    if linktype != LINKTYPE_ETHERNET:
        raise UserError(f"pcap linktype {linktype} is not supported (Ethernet or raw IP only)")
    if len(data) < 14:
        return None
    ethertype = struct.unpack_from("!H", data, 12)[0]
    off = 14
    if ethertype == 0x8100 and len(data) >= 18:  # one VLAN tag
        ethertype = struct.unpack_from("!H", data, 16)[0]
        off = 18
    return off if ethertype in (0x0800, 0x86DD) else None


# What a receiving kernel checks before TCP sees a packet (Linux's ip_rcv_core, ipv6_rcv
# and tcp_v4_rcv): a packet failing any of these never reached the connection, so the
# readers skip it as the kernel drops it, and no length taken from it can be negative or
# larger than the packet. The IP length must fit the frame on the wire (`wire_limit`).
IPV4_MIN_HEADER = 20
IPV6_HEADER = 40
TCP_MIN_HEADER = 20
IPV4_FRAGMENTED = 0x3FFF  # more-fragments flag and fragment offset
ANY_LENGTH = 1 << 31  # a frame whose length on the wire the record cannot bound


def wire_limit(incl: int, orig: int, snaplen: int) -> int:
    """The most bytes a record's frame can have had on the wire: its original length when
    the record says it was cut (orig_len above the bytes kept); any length when it kept as
    many bytes as the capture keeps (a packet socket whose filter cut a packet reports the
    kept length as the packet's, as pqlab-engine capture's records do); else the bytes it
    holds. A record holding more than its original length is damaged: 0."""
    if incl > orig:
        return 0
    if incl < orig:
        return orig
    return ANY_LENGTH if incl >= snaplen else incl


def _ip_header(data: bytes, off: int, wire_len: int):
    """(src, dst, TCP header offset, IP packet length, IP payload length) of a TCP packet, or
    None for anything else: other protocols, fragments (the first one too: its TCP length
    is not the segment's), truncated headers, and lengths the receiving kernel refuses (an
    IPv4 header shorter than 20 bytes, a total length shorter than the headers or longer
    than the frame on the wire, `wire_len`; an IPv6 payload length likewise)."""
    if len(data) < off + IPV4_MIN_HEADER:
        return None
    version = data[off] >> 4
    if version == 4:
        ihl = (data[off] & 0x0F) * 4
        total = struct.unpack_from("!H", data, off + 2)[0]
        frag = struct.unpack_from("!H", data, off + 6)[0]
        if data[off + 9] != 6 or frag & IPV4_FRAGMENTED:
            return None
        if ihl < IPV4_MIN_HEADER or not ihl + TCP_MIN_HEADER <= total <= wire_len - off:
            return None
        src, dst = _ip_text(data[off + 12 : off + 16]), _ip_text(data[off + 16 : off + 20])
        return src, dst, off + ihl, total, total - ihl
    if version == 6:
        if len(data) < off + IPV6_HEADER or data[off + 6] != 6:
            return None
        plen = struct.unpack_from("!H", data, off + 4)[0]
        if not TCP_MIN_HEADER <= plen <= wire_len - off - IPV6_HEADER:
            return None
        src, dst = _ip_text(data[off + 8 : off + 24]), _ip_text(data[off + 24 : off + 40])
        return src, dst, off + IPV6_HEADER, plen + IPV6_HEADER, plen
    return None


def parse_tcp(
    linktype: int, frame: Frame, keep_payload: bool = False, snaplen: int = ANY_LENGTH
) -> TcpPacket | None:
    """The TCP segment in a frame, or None for anything else (ARP, UDP, fragments, and
    packets whose lengths the receiving kernel would refuse: see `_ip_header`; a TCP data
    offset below 20 bytes or past the IP payload). `snaplen`: the capture's (`wire_limit`).

    With `keep_payload` the segment's payload bytes are kept too; the caller must have
    checked that the frame was captured whole (see `tcp_packets`)."""
    data = frame.data
    wire = wire_limit(len(data), frame.orig_len, snaplen)
    off = _ip_offset(linktype, data)
    ip = _ip_header(data, off, wire) if off is not None else None
    if ip is None:
        return None
    src, dst, tcp_off, ip_len, ip_payload = ip
    if len(data) < tcp_off + TCP_MIN_HEADER:
        return None
    sport, dport, seq, ack, off_flags, window = struct.unpack_from("!HHIIHH", data, tcp_off)
    doff = (off_flags >> 12) * 4
    if not TCP_MIN_HEADER <= doff <= ip_payload:
        return None  # a data offset the kernel refuses (tcp_v4_rcv, tcp_v6_rcv)
    payload = None
    if keep_payload:
        # The IP length says where the payload ends: Ethernet pads short frames to 60 bytes,
        # and that padding is not part of the TCP stream.
        start, stop = tcp_off + doff, tcp_off + ip_payload
        if stop > len(data) or start > stop:
            raise UserError(
                f"a TCP segment {src}:{sport} -> {dst}:{dport} claims {ip_payload - doff} "
                f"payload bytes but the frame holds {max(0, len(data) - start)}"
            )
        payload = bytes(data[start:stop])
    return TcpPacket(
        ts_ns=frame.ts_ns,
        src=src,
        dst=dst,
        sport=sport,
        dport=dport,
        seq=seq,
        ack=ack,
        flags=off_flags & 0x3F,
        payload_len=ip_payload - doff,
        ip_len=ip_len,
        window=window,
        payload=payload,
    )


def tcp_packets(path: str | Path, keep_payload: bool = False) -> list[TcpPacket]:
    """The TCP segments of a capture, in file order.

    With `keep_payload` each packet also carries its payload bytes, and a capture whose
    packets were cut short by the snaplen is refused (UserError naming the file, the first
    cut packet and the snaplen): a payload reader must never mistake a cut packet for a
    short one.

    Headers are read for all packets at once (numpy over the file's bytes: IPv4 in
    Ethernet or bare-IP framing, what pqlab's links carry); any other frame goes through
    `parse_tcp`, so both give the same packets."""
    raw, linktype, cols = _load(path)
    if cols is None:
        return []
    if keep_payload:
        _refuse_cut(path, cols)
    return cols.packets(raw, linktype, keep_payload)


def _load(path) -> tuple[bytes, int, _Headers | None]:
    """A capture's bytes, linktype and headers (None: no packets)."""
    raw = _read(path)
    endian, scale, linktype = _file_header(raw, path)
    if linktype not in (LINKTYPE_ETHERNET, LINKTYPE_RAW):
        raise UserError(f"pcap linktype {linktype} is not supported (Ethernet or raw IP only)")
    offsets = _record_offsets(raw, endian)
    if not offsets:
        return raw, linktype, None
    snaplen = struct.unpack_from(endian + "I", raw, 16)[0]
    return (
        raw,
        linktype,
        _Headers(raw, np.asarray(offsets, dtype=np.int64), endian, scale, linktype, snaplen),
    )


def _refuse_cut(path, cols: _Headers) -> None:
    """A payload reader must never mistake a packet cut by the snaplen for a short one."""
    cut = np.flatnonzero(cols.incl < cols.orig)
    if cut.size:
        i = int(cut[0])
        raise UserError(
            f"{path}: packet {i + 1} was captured with {int(cols.incl[i])} of its "
            f"{int(cols.orig[i])} bytes (the capture's snaplen is {read_snaplen(path)}); "
            "reading TLS records needs whole packets: capture with a full snaplen "
            "(pqlab-engine capture --snaplen 262144, as `pqlab handshake --keep-pcap` does)"
        )


class _Headers:
    """Every record's timestamp and lengths, and the IPv4/TCP header fields of the records
    that are plain IPv4 TCP segments (`v4`), as numpy columns."""

    def __init__(self, raw: bytes, offsets, endian: str, scale: int, linktype: int, snaplen: int):
        self.buf = buf = np.frombuffer(raw, dtype=np.uint8)
        self.snaplen = snaplen
        little = endian == "<"
        self.ts = (
            self._u32(offsets, little).astype(np.int64) * 1_000_000_000
            + self._u32(offsets + 4, little).astype(np.int64) * scale
        )
        self.incl = self._u32(offsets + 8, little).astype(np.int64)
        self.orig = self._u32(offsets + 12, little).astype(np.int64)
        self.data = offsets + 16
        cut = np.where(self.incl >= snaplen, ANY_LENGTH, self.incl)  # as `wire_limit`
        self.wire = np.where(
            self.incl > self.orig, 0, np.where(self.incl < self.orig, self.orig, cut)
        )
        if linktype == LINKTYPE_ETHERNET:
            ethertype = self._u16(self.data + 12)
            framed = (self.incl >= 14) & (ethertype == 0x0800)
            ip_off = 14
        else:
            framed = np.ones(len(offsets), dtype=bool)
            ip_off = 0
        ip = self.data + ip_off
        version_ihl = self._u8(ip)
        ihl = (version_ihl & 0x0F).astype(np.int64) * 4
        self.total = self._u16(ip + 2).astype(np.int64)
        self.tcp = ip + ihl
        self.doff = (self._u8(self.tcp + 12) >> 4).astype(np.int64) * 4
        # The checks of `_ip_header` and `parse_tcp`, for every record at once. (A record
        # too short for a field reads it from whatever follows in the file, `_at` staying
        # inside it, and fails the length checks: such values are never used.)
        self.v4 = (
            framed
            & (self.incl >= ip_off + IPV4_MIN_HEADER)
            & (version_ihl >> 4 == 4)
            & (self._u8(ip + 9) == 6)
            & (self._u16(ip + 6) & IPV4_FRAGMENTED == 0)
            & (ihl >= IPV4_MIN_HEADER)
            & (self.incl >= self.tcp - self.data + TCP_MIN_HEADER)
            & (self.total <= self.wire - ip_off)
            & (self.doff >= TCP_MIN_HEADER)
            & (ihl + self.doff <= self.total)
        )
        self.src = self._u32(ip + 12, False)
        self.dst = self._u32(ip + 16, False)
        self.ip_payload = self.total - ihl
        self.ip_end = ip + self.total
        # Frames that are something else (IPv6, VLAN tags, ARP, UDP): parse_tcp decides.
        self.other = ~self.v4 & ~(framed & (self._u8(ip) >> 4 == 4))
        del buf

    def _at(self, idx):
        return self.buf[np.minimum(idx, len(self.buf) - 1)]

    def _u8(self, idx):
        return self._at(idx).astype(np.uint32)

    def _u16(self, idx):
        return (self._u8(idx) << 8) | self._u8(idx + 1)

    def _u32(self, idx, little: bool = False):
        b = [self._u8(idx + k).astype(np.uint64) for k in range(4)]
        if little:
            b.reverse()
        return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]

    def tcp_fields(self):
        """Ports, sequence and acknowledgment numbers, flags, window, data offset of every
        record (meaningful where `v4`)."""
        tcp = self.tcp
        sport, dport = self._u16(tcp), self._u16(tcp + 2)
        seq, ack = self._u32(tcp + 4), self._u32(tcp + 8)
        off_flags, window = self._u16(tcp + 12), self._u16(tcp + 14)
        return sport, dport, seq, ack, off_flags & 0x3F, window, self.doff

    def payloads_whole(self) -> bool:
        """Whether every TCP segment's payload, as its IP length says, is in its frame."""
        doff = self.tcp_fields()[-1]
        v4 = self.v4
        bad = (self.ip_end > self.data + self.incl) | (self.tcp + doff > self.ip_end)
        return not bool((bad & v4).any())

    def names(self) -> dict[int, str]:
        """Each IPv4 address in the capture as text."""
        addrs = np.unique(np.concatenate([self.src, self.dst]))
        return {int(a): _ip_text(int(a).to_bytes(4, "big")) for a in addrs}

    def packets(self, raw: bytes, linktype: int, keep_payload: bool) -> list[TcpPacket]:
        sport, dport, seq, ack, flags, window, doff = self.tcp_fields()
        tcp = self.tcp
        names = self.names()
        columns = zip(
            self.v4.tolist(),
            self.other.tolist(),
            self.ts.tolist(),
            self.src.tolist(),
            self.dst.tolist(),
            sport.tolist(),
            dport.tolist(),
            seq.tolist(),
            ack.tolist(),
            flags.tolist(),
            (self.ip_payload - doff).tolist(),
            self.total.tolist(),
            window.tolist(),
            (tcp + doff).tolist(),
            self.ip_end.tolist(),
            self.data.tolist(),
            self.incl.tolist(),
            self.orig.tolist(),
            strict=True,
        )
        out = []
        for (
            v4,
            other,
            ts,
            src,
            dst,
            sp,
            dp,
            sq,
            ak,
            fl,
            plen,
            total,
            win,
            p0,
            p1,
            d,
            n,
            o,
        ) in columns:
            if v4:
                payload = None
                if keep_payload:
                    if p1 > d + n or p0 > p1:
                        raise UserError(
                            f"a TCP segment {names[src]}:{sp} -> {names[dst]}:{dp} claims "
                            f"{plen} payload bytes but the frame holds {max(0, d + n - p0)}"
                        )
                    payload = raw[p0:p1]
                out.append(
                    TcpPacket(
                        ts, names[src], names[dst], sp, dp, sq, ak, fl, plen, total, win, payload
                    )
                )
            elif other:
                p = parse_tcp(linktype, Frame(ts, raw[d : d + n], o), keep_payload, self.snaplen)
                if p is not None:
                    out.append(p)
        return out


def build_tcp_frame(
    ts_ns: int,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    payload_len: int,
    window: int = 502,
    payload: bytes | None = None,
) -> Frame:
    """An Ethernet/IPv4/TCP frame with a zero payload of `payload_len` bytes (or the given
    `payload`, which must be that long), kept whole (tests use it to build synthetic
    captures; checksums are left zero)."""
    if payload is None:
        payload = bytes(payload_len)
    elif len(payload) != payload_len:
        raise ValueError(f"payload has {len(payload)} bytes, payload_len says {payload_len}")
    tcp = struct.pack(
        "!HHIIHHHH",
        sport,
        dport,
        seq & 0xFFFFFFFF,
        ack & 0xFFFFFFFF,
        (5 << 12) | flags,
        window,
        0,
        0,
    )
    total = 20 + len(tcp) + payload_len
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        0,
        0x4000,
        64,
        6,
        0,
        bytes(int(x) for x in src.split(".")),
        bytes(int(x) for x in dst.split(".")),
    )
    eth = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"
    data = eth + ip + tcp + payload
    return Frame(ts_ns, data, len(data))


# --- connections ---------------------------------------------------------------------------


@dataclass(slots=True)
class Segment:
    """A packet of one connection, with its direction and sequence numbers made relative:
    `start`/`end` are offsets in the sender's byte stream (0 = first payload byte)."""

    ts_ns: int
    from_client: bool
    flags: int
    start: int
    end: int
    ack: int  # relative to the other side's stream (bytes of it acknowledged)
    ip_len: int
    payload: bytes | None = None  # the bytes start..end, when the capture was read with them

    @property
    def payload_len(self) -> int:
        return self.end - self.start


@dataclass
class Connection:
    client: tuple[str, int]
    server: tuple[str, int]
    segments: list[Segment] = field(default_factory=list)
    client_isn: int = 0
    server_isn: int | None = None
    _payload: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def syn_ns(self) -> int:
        return self.segments[0].ts_ns

    def payload_segments(self, from_client: bool) -> list[Segment]:
        """The segments one side sent that carry payload, in capture order: what the
        searches for a stream offset go through (about half the connection's packets).
        Kept once asked for: ask when the connection has all its segments."""
        found = self._payload.get(from_client)
        if found is None:
            found = [s for s in self.segments if s.from_client == from_client and s.end > s.start]
            self._payload[from_client] = found
        return found


def split_connections(packets: list[TcpPacket], server_port: int) -> list[Connection]:
    """Group the packets to/from `server_port` into connections, in order of their SYN.

    A SYN without ACK from the client starts a new connection on its 4-tuple, so a reused
    client port is a new connection. Packets of a connection whose SYN was not captured are
    ignored (they belong to something that started before the capture)."""
    open_conns: dict[tuple, Connection] = {}
    done: list[Connection] = []
    for p in sorted(packets, key=lambda p: p.ts_ns):
        if p.dport == server_port:
            key, from_client = (p.src, p.sport, p.dst), True
        elif p.sport == server_port:
            key, from_client = (p.dst, p.dport, p.src), False
        else:
            continue
        if from_client and p.syn and not p.has_ack:
            old = open_conns.get(key)
            if old is not None and old.client_isn == p.seq:
                conn = old  # a retransmitted SYN
            else:
                if old is not None:
                    done.append(old)
                conn = Connection(
                    client=(p.src, p.sport), server=(p.dst, p.dport), client_isn=p.seq
                )
                open_conns[key] = conn
        else:
            conn = open_conns.get(key)
            if conn is None:
                continue
        if not from_client and p.syn:
            conn.server_isn = p.seq
        if from_client:
            base, peer = conn.client_isn, conn.server_isn
        else:
            base, peer = conn.server_isn, conn.client_isn
        if base is None:
            continue  # server data before its SYN/ACK was seen: not analysable
        start = (p.seq - base - 1) % (1 << 32) if not p.syn else 0
        end = start + p.payload_len if not p.syn else 0
        ack = (p.ack - peer - 1) % (1 << 32) if (p.has_ack and peer is not None) else 0
        payload = p.payload if not p.syn else None
        conn.segments.append(
            Segment(p.ts_ns, from_client, p.flags, start, end, ack, p.ip_len, payload)
        )
    done.extend(open_conns.values())
    done.sort(key=lambda c: c.syn_ns)
    return done


def connections(path: str | Path, server_port: int, keep_payload: bool = False) -> list[Connection]:
    """The connections to `server_port` in a capture: what `split_connections(
    tcp_packets(path, keep_payload), server_port)` gives, computed for all packets at once
    (the lab's captures, IPv4 only); a capture with other frames (IPv6, VLAN tags) is read
    packet by packet."""
    raw, linktype, cols = _load(path)
    if cols is None:
        return []
    if keep_payload:
        _refuse_cut(path, cols)
    if cols.other.any() or (keep_payload and not cols.payloads_whole()):
        # (a frame whose IP length claims more than it holds is refused by `packets`)
        return split_connections(cols.packets(raw, linktype, keep_payload), server_port)
    return _Split(cols, server_port).connections(raw, keep_payload)


class _Split:
    """`split_connections` over numpy columns: the packets to or from the server port in
    time order, grouped by client address (stable), each group cut into connections at the
    client's SYNs (a SYN repeating the one before, a retransmission, starts none), sequence
    numbers made relative to each side's initial one."""

    def __init__(self, cols: _Headers, port: int):
        sport, dport, seq, ack, flags, _, doff = cols.tcp_fields()
        idx = np.flatnonzero(cols.v4)
        idx = idx[np.argsort(cols.ts[idx], kind="stable")]
        from_client = dport[idx] == port
        keep = from_client | (sport[idx] == port)
        idx, from_client = idx[keep], from_client[keep]
        src, dst = cols.src[idx], cols.dst[idx]
        cip = np.where(from_client, src, dst)
        sip = np.where(from_client, dst, src)
        cport = np.where(from_client, sport[idx], dport[idx])
        key = (cip.astype(np.int64) << 16) | cport
        if len(sip) and (sip != sip[0]).any():  # several server addresses: number them
            _, key = np.unique(np.stack([cip, sip, cport]), axis=1, return_inverse=True)
            key = key.reshape(-1)
        by_key = np.argsort(key, kind="stable")
        self.idx = idx[by_key]
        self.key = key[by_key]
        self.from_client = from_client[by_key]
        self.cip, self.sip, self.cport = cip[by_key], sip[by_key], cport[by_key]
        self.flags = flags[self.idx]
        self.seq = seq[self.idx].astype(np.int64)
        self.ack = ack[self.idx].astype(np.int64)
        self.plen = (cols.ip_payload - doff)[self.idx]
        self.payload_at = (cols.tcp + doff)[self.idx]
        self.cols = cols
        self.port = port

    def _starts(self) -> np.ndarray:
        """Where a connection starts: a client SYN (no ACK) whose sequence number is not the
        previous client SYN's of the same client address."""
        syn = (self.flags & SYN) != 0
        csyn = self.from_client & syn & ((self.flags & ACK) == 0)
        at = np.flatnonzero(csyn)
        new = np.ones(len(at), dtype=bool)
        new[1:] = (self.key[at][1:] != self.key[at][:-1]) | (self.seq[at][1:] != self.seq[at][:-1])
        starts = np.zeros(len(self.key), dtype=bool)
        starts[at[new]] = True
        return starts

    def connections(self, raw: bytes, keep_payload: bool) -> list[Connection]:
        n = len(self.key)
        starts = self._starts() if n else np.zeros(0, dtype=bool)
        if not starts.any():
            return []
        # A packet belongs to the connection last started on its client address; packets
        # before a client address's first SYN belong to none.
        count = np.cumsum(starts)
        first = np.ones(n, dtype=bool)
        first[1:] = self.key[1:] != self.key[:-1]
        before = np.maximum.accumulate(np.where(first, np.arange(n), 0))
        owned = count - np.where(before > 0, count[before - 1], 0) > 0
        conn = count - 1
        start_at = np.flatnonzero(starts)
        client_isn = self.seq[start_at][conn]
        # The server's initial sequence number as known at each packet: its last SYN so far
        # in the connection.
        syn = (self.flags & SYN) != 0
        ssyn = ~self.from_client & syn
        last = np.maximum.accumulate(np.where(ssyn, np.arange(n), -1))
        known = (last >= start_at[conn]) & owned
        server_isn = np.where(known, self.seq[np.maximum(last, 0)], 0)
        base = np.where(self.from_client, client_isn, server_isn)
        peer = np.where(self.from_client, server_isn, client_isn)
        peer_known = np.where(self.from_client, known, True)
        ok = owned & (self.from_client | known)
        wrap = 1 << 32
        start = np.where(syn, 0, (self.seq - base - 1) % wrap)
        end = np.where(syn, 0, start + self.plen)
        has_ack = (self.flags & ACK) != 0
        ack = np.where(has_ack & peer_known, (self.ack - peer - 1) % wrap, 0)
        return self._build(raw, keep_payload, ok, conn, (start, end, ack, syn, known))

    def _build(self, raw, keep_payload, ok, conn, columns) -> list[Connection]:
        start, end, ack, syn, known = columns
        cols = self.cols
        names = cols.names()
        rows = np.flatnonzero(ok)
        if not len(rows):
            return []
        # A connection's packets are adjacent (`conn` never decreases): its segments are
        # made all at once, then sliced.
        cid = conn[rows]
        firsts = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]])
        lasts = np.r_[firsts[1:], len(rows)] - 1
        from_client, is_syn = self.from_client[rows], syn[rows]
        # The server's initial sequence number: that of its last SYN in the connection.
        server_syn = np.maximum.accumulate(
            np.where(~from_client & is_syn, np.arange(len(rows)), -1)
        )
        a, b = start[rows], end[rows]
        payloads = [None] * len(rows)
        if keep_payload:
            payloads = [
                None if s else raw[at : at + n]
                for at, n, s in zip(
                    self.payload_at[rows].tolist(), (b - a).tolist(), is_syn.tolist(), strict=True
                )
            ]
        segments = list(
            map(
                Segment,
                cols.ts[self.idx[rows]].tolist(),
                from_client.tolist(),
                self.flags[rows].tolist(),
                a.tolist(),
                b.tolist(),
                ack[rows].tolist(),
                cols.total[self.idx[rows]].tolist(),
                payloads,
            )
        )
        out: list[Connection] = []
        for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
            i = int(rows[first])
            syn_at = int(server_syn[last])
            out.append(
                Connection(
                    client=(names[int(self.cip[i])], int(self.cport[i])),
                    server=(names[int(self.sip[i])], self.port),
                    segments=segments[first : last + 1],
                    client_isn=int(self.seq[i]),
                    server_isn=int(self.seq[rows[syn_at]]) if syn_at >= first else None,
                )
            )
        out.sort(key=lambda conn: conn.syn_ns)
        return out


def describe(conn: Connection) -> str:
    """A connection as `client ip:port -> server ip:port`, for messages."""
    return f"{conn.client[0]}:{conn.client[1]} -> {conn.server[0]}:{conn.server[1]}"


def reassemble(conn: Connection, from_client: bool) -> bytes:
    """The byte stream one side of a connection sent (offset 0 = its first payload byte),
    rebuilt from the captured segments by sequence number, whatever order they arrived in.

    Retransmissions and overlapping segments are merged; overlapping bytes that differ
    mean a corrupt capture (UserError). Bytes missing before the last captured byte, or
    bytes the peer acknowledged that no captured segment carried, are a gap (UserError
    naming the connection and the missing range). The connection must have been read with
    its payload (`connections(..., keep_payload=True)`)."""
    side = "client" if from_client else "server"
    pieces = []
    for s in conn.segments:
        if s.from_client != from_client or s.end <= s.start:
            continue  # the other direction, or no payload (SYN, pure ACK, keepalive probe)
        if s.payload is None:
            raise UserError(
                f"connection {describe(conn)}: its segments were read without their payload; "
                "read the capture with tcp_packets(path, keep_payload=True)"
            )
        pieces.append(s)
    # Sorting by start makes one pass enough: each segment either extends the stream,
    # repeats bytes already placed (checked equal) or starts past its end (a gap).
    pieces.sort(key=lambda s: (s.start, -s.end))
    out = bytearray()
    for s in pieces:
        have = len(out)
        if s.start > have:
            raise UserError(
                f"connection {describe(conn)}: the capture is missing {side} stream bytes "
                f"{have}..{s.start - 1} ({s.start - have} bytes; a packet the capture lost)"
            )
        overlap = min(s.end, have) - s.start
        if overlap > 0 and out[s.start : s.start + overlap] != s.payload[:overlap]:
            raise UserError(
                f"connection {describe(conn)}: two captured {side} segments carry different "
                f"bytes for stream offsets {s.start}..{s.start + overlap - 1}"
            )
        if s.end > have:
            out += s.payload[have - s.start :]
    # The peer's ACKs show how much of this stream really went through: a FIN takes one
    # sequence number, so an ACK may run one past the data when this side closed.
    # (A reset's acknowledgment number says nothing reliable, so resets are left out.)
    fin = any(s.from_client == from_client and s.flags & FIN for s in conn.segments)
    acked = max(
        (
            s.ack
            for s in conn.segments
            if s.from_client != from_client and s.flags & ACK and not s.flags & RST
        ),
        default=0,
    )
    if acked > len(out) + (1 if fin else 0):
        raise UserError(
            f"connection {describe(conn)}: the peer acknowledged {side} stream bytes up to "
            f"{acked - 1} but the capture holds only {len(out)} bytes (a packet the capture "
            "lost at the end)"
        )
    return bytes(out)
