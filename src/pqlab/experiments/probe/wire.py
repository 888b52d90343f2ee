"""A probe's connections taken apart from the client's side: every handshake message's type,
size and arrival time, from the client's capture decrypted with the client's key log (or,
without a capture, from the client stack's own message events), the server's flight in
bytes and TCP segments, a HelloRetryRequest and what it cost, and whether the server's
flight waited for the client's ACK.

The client sees only its own side of the wire. Times are when a segment left or reached
the client's interface (kernel timestamps of the capture); what the server did in between is
inferred: its processing before the ServerHello is the ClientHello-to-ServerHello time less
one round trip (SYN to SYN/ACK).

A flight "waited for an ACK" (the server's congestion window ran out) when a flight segment
arrived about one round trip (within a quarter of it) after the client's first ACK of the
flight's data, at least half a round trip after the segment before it, with at least two
full segments (2 x MSS) of the flight received before it. A server computing (signing its
CertificateVerify) between two writes also leaves a gap, but one that bears no relation to
the round trip; when the two coincide the client cannot tell them apart, and says so in
docs/probe.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pqlab import pcap
from pqlab.errors import UserError
from pqlab.experiments.probe.chain import certificate_list
from pqlab.pcap import ACK, RST, SYN
from pqlab.tls import keylog as kl
from pqlab.tls import phases
from pqlab.tls import records as tls_records
from pqlab.tls.records import TlsRecord

TYPE_CODES = {name: code for code, name in kl.HANDSHAKE_NAMES.items()}
HELLO_RETRY = "HelloRetryRequest"
TLS13 = 0x0304
# Stall detection (module docstring): the arrival after the client's ACK must be within this
# share of a round trip of one round trip, the gap at least half of one.
RTT_TOLERANCE = 0.25
MIN_GAP_RTT = 0.5


@dataclass(frozen=True)
class Message:
    sender: str  # "client" or "server"
    name: str  # ClientHello, HelloRetryRequest, ServerHello, Certificate, ...
    type_code: int  # the handshake type on the wire (a HelloRetryRequest is a ServerHello, 2)
    length: int  # bytes, the 4-byte handshake header included
    record_end: int  # the sender's stream offset after the record completing the message
    at_ns: int | None  # when that record's last byte left / reached the client (realtime ns)


@dataclass
class Wire:
    """What one connection showed on the wire, as far as the source could tell."""

    source: str = "none"  # "capture", "client" (the stack's own events) or "none"
    messages: list[Message] = field(default_factory=list)
    syn_ns: int | None = None
    rtt_ns: int | None = None  # SYN to SYN/ACK at the client
    alert: tuple[int, int] | None = None  # (level, description) of a plaintext alert received
    first_server_bytes: bytes = b""  # when the server's bytes are not TLS
    not_tls: bool = False
    server_version: int | None = None  # what the server's (final) ServerHello chose
    closed_by_server: str | None = None  # "fin" or "rst" when the server ended the TCP flow
    hello_retry: bool = False
    hello_retry_bytes: int | None = None
    hello_retry_ns: int | None = None
    client_hello_bytes: int | None = None
    flight_bytes: int | None = None
    flight_segments: int | None = None
    ack_waits: int | None = None  # times the flight waited for the client's ACK
    ack_wait_ns: int | None = None
    before_wait_bytes: int | None = None
    before_wait_segments: int | None = None
    server_wait_ns: int | None = None  # inferred server time before its ServerHello
    server_records: list[TlsRecord] = field(default_factory=list)
    client_records: list[TlsRecord] = field(default_factory=list)
    # The certificates (DER) of the server's Certificate message as it crossed the wire;
    # None when the capture did not show one (no capture, no key log, a failed handshake).
    certificates: list[bytes] | None = None
    note: str | None = None  # why the capture could not be read completely

    def first(self, sender: str, name: str) -> Message | None:
        return next((m for m in self.messages if m.sender == sender and m.name == name), None)

    def count(self, sender: str, name: str) -> int:
        return sum(1 for m in self.messages if m.sender == sender and m.name == name)

    @property
    def certificate_bytes(self) -> int | None:
        m = self.first("server", "Certificate")
        return m.length if m else None

    @property
    def session_tickets(self) -> int:
        return self.count("server", "NewSessionTicket")


# --- the capture --------------------------------------------------------------------------


def connections_by_port(pcap_path: Path, server_port: int) -> dict[int, list[pcap.Connection]]:
    """Every captured connection to the server port, by the client's port, in SYN order."""
    out: dict[int, list[pcap.Connection]] = {}
    for conn in pcap.connections(pcap_path, server_port, keep_payload=True):
        out.setdefault(conn.client[1], []).append(conn)
    return out


def is_tls_start(stream: bytes) -> bool:
    """Whether a stream starts like TLS records (a known content type, version 3.x)."""
    if not stream:
        return True  # nothing to judge
    if stream[0] not in (kl.CHANGE_CIPHER_SPEC, kl.ALERT, kl.HANDSHAKE, kl.APPLICATION_DATA):
        return False
    return len(stream) < 2 or stream[1] == 3


def _plaintext(stream: bytes) -> dict:
    """What the first, plaintext records of the server's stream say, read leniently (the
    stream may stop anywhere): its alerts and its ServerHello bodies."""
    facts: dict = {"alerts": [], "hellos": []}
    pos, pending = 0, bytearray()
    # Each pass consumes one whole record, or stops.
    while pos + kl.RECORD_HEADER <= len(stream) and is_tls_start(stream[pos : pos + 2]):
        ctype = stream[pos]
        length = int.from_bytes(stream[pos + 3 : pos + 5], "big")
        fragment = stream[pos + kl.RECORD_HEADER : pos + kl.RECORD_HEADER + length]
        pos += kl.RECORD_HEADER + length
        if ctype == kl.APPLICATION_DATA:
            break
        if ctype == kl.ALERT and len(fragment) >= 2:
            facts["alerts"].append((fragment[0], fragment[1]))
        if ctype == kl.HANDSHAKE:
            pending += fragment
            while len(pending) >= kl.HANDSHAKE_HEADER:
                total = kl.HANDSHAKE_HEADER + int.from_bytes(pending[1:4], "big")
                if len(pending) < total:
                    break
                if pending[0] == kl.SERVER_HELLO:
                    facts["hellos"].append(bytes(pending[kl.HANDSHAKE_HEADER : total]))
                del pending[:total]
    return facts


def _server_version(hellos: list[bytes]) -> int | None:
    for body in reversed(hellos):
        try:
            h = kl.parse_server_hello(body, "server")
        except kl.KeyLogError:
            continue
        if not h.is_hello_retry:
            return h.selected_version or h.legacy_version
    return None


def _tcp(conn: pcap.Connection, w: Wire) -> None:
    syn = next((s for s in conn.segments if s.from_client and s.flags & SYN), None)
    synack = next(
        (s for s in conn.segments if not s.from_client and s.flags & SYN and s.flags & ACK), None
    )
    if syn is not None:
        w.syn_ns = syn.ts_ns
    if syn is not None and synack is not None:
        w.rtt_ns = synack.ts_ns - syn.ts_ns
    ends = [s for s in conn.segments if not s.from_client and s.flags & (RST | pcap.FIN)]
    if ends:
        w.closed_by_server = "rst" if ends[0].flags & RST else "fin"


def from_capture(conn: pcap.Connection, keys: kl.KeyLog, mss: int, advmss: int) -> Wire:
    """One connection from the client's capture and key log (`mss`: the segment size the
    client sees from the server; `advmss`: the MSS it advertised)."""
    w = Wire(source="capture")
    _tcp(conn, w)
    try:
        client_stream = pcap.reassemble(conn, True)
        server_stream = pcap.reassemble(conn, False)
    except UserError as e:  # a capture with gaps: say so, keep what the client knows
        w.note = str(e)
        return w
    plaintext_only = False
    if not is_tls_start(server_stream):
        w.not_tls = True
        w.first_server_bytes = server_stream[:16]
        plaintext_only = True
    else:
        facts = _plaintext(server_stream)
        w.alert = facts["alerts"][0] if facts["alerts"] else None
        w.server_version = _server_version(facts["hellos"])
        # Key-log decryption reads TLS 1.3 only.
        plaintext_only = w.server_version not in (None, TLS13)
    if plaintext_only:
        w.client_records, w.server_records = _plaintext_records(
            client_stream, b"" if w.not_tls else server_stream
        )
        _messages(w, conn)
        return w
    try:
        # A connection cut short (the client gave up, the server reset it) may stop in the
        # middle of a record: its whole records are read.
        d = kl.decrypt(
            whole_records(client_stream),
            whole_records(server_stream),
            keys,
            f"connection {pcap.describe(conn)}",
            keep=frozenset({kl.CERTIFICATE}),
        )
        w.client_records, w.server_records = d.client_records, d.server_records
        if d.server_messages:
            w.certificates = certificate_list(d.server_messages[0][1])
            if w.certificates is None:
                w.note = "the server's Certificate message does not parse as TLS 1.3's"
    except kl.KeyLogError as e:
        w.note = str(e)
        w.client_records, w.server_records = _plaintext_records(client_stream, server_stream)
    _messages(w, conn)
    _flight(w, conn, mss, advmss)
    return w


def whole_records(stream: bytes) -> bytes:
    """The stream up to the end of its last whole TLS record."""
    pos = 0
    while pos + kl.RECORD_HEADER <= len(stream):
        end = pos + kl.RECORD_HEADER + int.from_bytes(stream[pos + 3 : pos + 5], "big")
        if end > len(stream):
            break
        pos = end
    return stream[:pos]


def _plaintext_records(client: bytes, server: bytes) -> tuple[list, list]:
    """The whole plaintext records of both streams, up to the first encrypted one (for a
    connection that cannot be decrypted)."""
    out = []
    for sender, stream in (("client", client), ("server", server)):
        recs, pos, pending = [], 0, bytearray()
        while pos + kl.RECORD_HEADER <= len(stream) and stream[pos] in (20, 21, 22):
            end = pos + kl.RECORD_HEADER + int.from_bytes(stream[pos + 3 : pos + 5], "big")
            if end > len(stream):
                break
            done = []
            if stream[pos] == kl.HANDSHAKE:
                pending += stream[pos + kl.RECORD_HEADER : end]
                while len(pending) >= 4 and len(pending) >= 4 + int.from_bytes(pending[1:4], "big"):
                    total = 4 + int.from_bytes(pending[1:4], "big")
                    done.append((kl.HANDSHAKE_NAMES.get(pending[0], "unknown"), total))
                    del pending[:total]
            recs.append(TlsRecord(sender, end, stream[pos], tuple(done)))
            pos = end
        out.append(recs)
    return out[0], out[1]


def _messages(w: Wire, conn: pcap.Connection | None) -> None:
    """Messages in order with their times: for the client's, the first transmission of
    their record's last byte; for the server's, the arrival that completed their record's
    bytes in order (on a lossy link, the retransmission that filled the last hole before
    it: `phases.delivered`)."""
    hellos = sum(1 for r in w.client_records for m, _ in r.messages if m == "ClientHello")
    w.hello_retry = hellos > 1
    seen_server_hello = False
    arrived = {}
    if conn is not None:
        arrived = phases.delivered(conn, False, [r.end for r in w.server_records])
    for sender, recs in (("client", w.client_records), ("server", w.server_records)):
        for r in recs:
            at = None
            if conn is not None and sender == "server":
                at = arrived.get(r.end)
            elif conn is not None:
                try:
                    at = phases.covering(conn, True, r.end).ts_ns
                except phases.AnalysisError:
                    at = None
            for name, length in r.messages:
                shown = name
                if sender == "server" and name == "ServerHello":
                    if w.hello_retry and not seen_server_hello:
                        shown = HELLO_RETRY
                    seen_server_hello = True
                code = TYPE_CODES.get(name, TYPE_CODES.get(name.lower(), -1))
                w.messages.append(Message(sender, shown, code, length, r.end, at))
    w.messages.sort(key=lambda m: (m.at_ns is None, m.at_ns or 0, m.sender != "client"))
    first_hello = w.first("client", "ClientHello")
    w.client_hello_bytes = first_hello.length if first_hello else None
    if w.hello_retry:
        _hello_retry_cost(w)


def _hello_retry_cost(w: Wire) -> None:
    """Bytes the retry added (the HelloRetryRequest's records and the second ClientHello's,
    with any ChangeCipherSpec between) and the round trip it took (first ClientHello out to
    the HelloRetryRequest in)."""
    hrr = w.first("server", HELLO_RETRY)
    hellos = [m for m in w.messages if m.sender == "client" and m.name == "ClientHello"]
    if hrr is None or len(hellos) < 2:
        return
    w.hello_retry_bytes = hrr.record_end + hellos[1].record_end - hellos[0].record_end
    if hrr.at_ns is not None and hellos[0].at_ns is not None:
        w.hello_retry_ns = hrr.at_ns - hellos[0].at_ns


def _flight_span(w: Wire) -> tuple[int, int] | None:
    """Stream offsets [start, end) of the server's flight: from its (final) ServerHello's
    record to its Finished's."""
    sh = [m for m in w.messages if m.sender == "server" and m.name == "ServerHello"]
    fin = w.first("server", "Finished")
    if not sh or fin is None:
        return None
    ends = sorted(r.end for r in w.server_records)
    sh_end = sh[-1].record_end
    start = max((e for e in ends if e < sh_end), default=0)
    return start, fin.record_end


def coalesced_segment_size(conn: pcap.Connection, advmss: int) -> int | None:
    """When the client's interface merged received segments before the capture saw them
    (GRO on a real NIC: a packet from the server longer than the MSS the client
    advertised), the segment size the other packets show; None when nothing was merged."""
    sizes = [s.payload_len for s in conn.segments if not s.from_client and s.payload_len]
    if not sizes or max(sizes) <= advmss:
        return None
    return max((n for n in sizes if n <= advmss), default=advmss)


def _flight(w: Wire, conn: pcap.Connection, mss: int, advmss: int) -> None:
    span = _flight_span(w)
    if span is None:
        return
    start, end = span
    w.flight_bytes = end - start
    size = coalesced_segment_size(conn, advmss)
    if size is None:
        w.flight_segments = phases.segments_carrying(conn, False, start, end)
    else:  # merged packets: the segments their bytes needed
        w.flight_segments = -(-w.flight_bytes // size)
        w.note = (
            f"the capture holds merged packets (receive offload on the client's interface): "
            f"segments counted as bytes / {size}"
        )
    if w.rtt_ns:
        w.ack_waits, w.ack_wait_ns, before = flight_waits(conn, start, end, w.rtt_ns, mss)
        if before is not None:
            segments, before_bytes = before
            w.before_wait_bytes = before_bytes
            w.before_wait_segments = segments if size is None else -(-before_bytes // size)
    sh = [m for m in w.messages if m.sender == "server" and m.name == "ServerHello"]
    hellos = [m for m in w.messages if m.sender == "client" and m.name == "ClientHello"]
    if sh and hellos and sh[-1].at_ns and hellos[-1].at_ns and w.rtt_ns:
        w.server_wait_ns = max(0, sh[-1].at_ns - hellos[-1].at_ns - w.rtt_ns)


def flight_waits(
    conn: pcap.Connection, start: int, end: int, rtt_ns: int, mss: int
) -> tuple[int, int, tuple[int, int] | None]:
    """(times the server's flight [start, end) waited for the client's ACK, ns the client
    waited in them, (segments, bytes) of the flight received before the first wait), from
    the client's capture (module docstring): the segments before the first wait are the
    server's initial congestion window as the client saw it."""
    data, seen = [], start
    for s in conn.segments:
        if s.from_client or s.payload_len == 0 or s.end <= seen or s.start >= end:
            continue
        data.append(s)
        seen = s.end
    acks = [s for s in conn.segments if s.from_client and s.flags & ACK and not s.flags & SYN]
    waits, waited, before = 0, 0, None
    epoch = data[0].ts_ns if data else 0  # when the current window's first segment came
    acked = start  # flight bytes the client had acknowledged when that window began
    received = 0  # flight bytes received in the current window
    for i, (prev, cur) in enumerate(zip(data, data[1:], strict=False)):
        received += prev.end - max(prev.start, start)
        gap = cur.ts_ns - prev.ts_ns
        # The client's first ACK of this window's data: what released the next window.
        first_ack = next((a for a in acks if epoch <= a.ts_ns < cur.ts_ns and a.ack > acked), None)
        if first_ack is None or gap < MIN_GAP_RTT * rtt_ns or received < 2 * mss:
            continue
        if abs(cur.ts_ns - first_ack.ts_ns - rtt_ns) <= RTT_TOLERANCE * rtt_ns:
            waits += 1
            waited += gap
            if before is None:
                before = (i + 1, cur.start - start)
            acked = max([a.ack for a in acks if a.ts_ns < cur.ts_ns] + [acked])
            epoch, received = cur.ts_ns, 0
    return waits, waited, before


# --- the client's own events ------------------------------------------------------------------


def from_events(record: dict) -> Wire:
    """One connection from the client stack's message events (no capture): the messages
    and the times the stack handled them; no segments, no round trips."""
    w = Wire(source="client")
    w.client_records = tls_records.from_events(record, "client")
    w.server_records = tls_records.from_events(record, "server", direction="recv")
    times = {}
    for ev in record.get("events") or []:
        if ev.get("ev") == "handshake":
            sender = "client" if ev.get("dir") == "sent" else "server"
            times.setdefault((sender, int(ev["offset_end"])), int(ev["t"]))
        if ev.get("ev") == "alert" and ev.get("dir") == "recv" and w.alert is None:
            w.alert = (int(ev["level"]), int(ev["description"]))
    _messages(w, None)
    w.messages = [
        Message(m.sender, m.name, m.type_code, m.length, m.record_end,
                times.get((m.sender, m.record_end)))
        for m in w.messages
    ]  # fmt: skip
    w.messages.sort(key=lambda m: (m.at_ns is None, m.at_ns or 0))
    span = _flight_span(w)
    if span is not None:
        w.flight_bytes = span[1] - span[0]
    return w


def agree(capture: Wire, events: Wire) -> bool | None:
    """Whether the stack's own events name the same records as the capture (those the
    client read: the capture may hold more the client never read); None without events. A
    stack that reports no messages (rustls, wolfSSL: the engine reads their record headers
    off the socket) is held to the records' boundaries and types only."""
    if not events.client_records and not events.server_records:
        return None
    with_messages = any(r.messages for r in events.client_records + events.server_records)
    for mine, theirs in (
        (capture.client_records, events.client_records),
        (capture.server_records, events.server_records),
    ):
        if not with_messages:
            mine = [r._replace(messages=()) for r in mine]
        if mine[: len(theirs)] != theirs:
            return False
    return True
