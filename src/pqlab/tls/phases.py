"""Taking one TLS 1.3 handshake apart from the two packet captures, without decrypting.

Inputs per handshake: the connection as seen by the client's capture and by the server's
capture (pqlab.pcap.Connection), and the TLS records each side wrote, in order, with the
cumulative TCP stream offset at the end of each record (from the engine's message
callbacks). A TLS message "happens" at the TCP segment that carries the last byte of the
record completing it: for the sender, the first transmission of that byte (when its work
on the message was done and the message went on the wire: `covering`); for the receiver,
the arrival that completed the message's bytes *in order*, which is when its TCP stack could
hand them on (an encrypted record is only usable once its tag is in, and only once every
byte before it is: `delivered`). On a link without loss both are the one segment; with loss
the receiver's is the segment, or the retransmission, that filled the last hole before the
message's end, so a lost segment's recovery time falls in the phases that waited for it
("Server Hello sending", "Server Hello rcv -> Certificate rcv", "Finished sending", ...),
never in a side's processing, and the points keep the order the flow gives them.

Retransmissions (`retransmissions`: segments that carry sequence space their sender's
capture showed going out before) are counted per direction over the connection and per
phase, at their time in the sender's capture (`phase_retransmissions`).

Points of the flow (the document's figure 19), client side 1-9, server side A-I:
  1 client sends SYN            A server receives SYN        B server sends SYN/ACK
  2 client receives SYN/ACK     3 client sends ACK           C server receives ACK
  4 client sends ClientHello    D server receives it         E server sends ServerHello
  F server sends Certificate    G server sends CertificateVerify   H server sends Finished
  5/6/7/8 client receives ServerHello/Certificate/CertificateVerify/Finished
  9 client sends Finished       I server receives it
In mutual TLS the client's second flight adds, before 9:
  9c client sends Certificate   Ic server receives it
  9v client sends CertificateVerify   Iv server receives it
Both namespaces run on one kernel and capture with CLOCK_REALTIME kernel timestamps, so a
difference between a client point and a server point needs no clock correction.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from dataclasses import dataclass, field

from pqlab.pcap import ACK, FIN, SYN, Connection, Segment
from pqlab.tls.flight import OPENSSL, Flight, WriteModel, document_case, segments_through
from pqlab.tls.records import TlsRecord

# Phase name (as in the document's legend), from point, to point, colour family.
CLIENT_PHASES = [
    ("SYN sending", "1", "A", "transmission"),
    ("SYN rcv -> ACK/SYN send", "A", "B", "tcp"),
    ("ACK/SYN sending", "B", "2", "transmission"),
    ("ACK/SYN send -> ACK send", "2", "3", "tcp"),
    ("ACK send -> Client Hello send", "3", "4", "client"),
    ("Client Hello sending", "4", "D", "transmission"),
    ("Client Hello rcv -> Server Hello send", "D", "E", "server"),
    ("Server Hello sending", "E", "5", "transmission"),
    ("Server Hello rcv -> Certificate rcv", "5", "6", "waiting"),
    ("Certificate rcv -> Certificate Verify rcv", "6", "7", "waiting"),
    ("Certificate Verify rcv -> Finished rcv", "7", "8", "waiting"),
    ("Finished rcv -> Finished send", "8", "9", "client"),
]
SERVER_PHASES = [
    ("SYN sending", "1", "A", "transmission"),
    ("SYN rcv -> ACK/SYN send", "A", "B", "tcp"),
    ("ACK/SYN sending", "B", "2", "transmission"),
    ("ACK/SYN send -> ACK send", "2", "3", "tcp"),
    ("ACK sending", "3", "C", "transmission"),
    ("ACK rcv -> Client Hello rcv", "C", "D", "client"),
    ("Client Hello rcv -> Server Hello send", "D", "E", "server"),
    ("Server Hello send -> Certificate send", "E", "F", "server"),
    ("Certificate send -> Certificate Verify send", "F", "G", "server"),
    ("Certificate Verify send -> Finished send", "G", "H", "server"),
    ("Finished sending", "H", "8", "transmission"),
    ("Finished rcv -> Finished send", "8", "9", "client"),
]
VIEWS = {"client": CLIENT_PHASES, "server": SERVER_PHASES}
# Mutual TLS: the client's Certificate and CertificateVerify are phases of both views (the
# document's legend extended), in place of the single "Finished rcv -> Finished send".
CLIENT_FLIGHT_PHASES = [
    ("Finished rcv -> Client Certificate send", "8", "9c", "client"),
    ("Client Certificate send -> Client Certificate Verify send", "9c", "9v", "client"),
    ("Client Certificate Verify send -> Finished send", "9v", "9", "client"),
]
MUTUAL_VIEWS = {view: table[:-1] + CLIENT_FLIGHT_PHASES for view, table in VIEWS.items()}

# Which record completes which point: (sender, message, point at sender, point at receiver).
MESSAGE_POINTS = [
    ("client", "ClientHello", "4", "D"),
    ("server", "ServerHello", "E", "5"),
    ("server", "Certificate", "F", "6"),
    ("server", "CertificateVerify", "G", "7"),
    ("server", "Finished", "H", "8"),
    ("client", "Finished", "9", "I"),
]
MUTUAL_MESSAGE_POINTS = [
    ("client", "Certificate", "9c", "Ic"),
    ("client", "CertificateVerify", "9v", "Iv"),
]


class AnalysisError(Exception):
    """A handshake whose captures do not contain what the analysis needs."""


@dataclass
class Handshake:
    points: dict[str, int]
    phases: dict[str, list[tuple[str, int]]]  # view -> [(phase, ns)]
    handshake_ns: int  # 1 -> 8: SYN sent to the server's Finished received (established)
    total_ns: int  # 1 -> 9: the sum of the phases of either view
    client_processing_ns: int  # 5 -> 9: ServerHello received to client Finished sent
    flight: dict = field(default_factory=dict)
    views: dict = field(default_factory=lambda: VIEWS)  # view -> its phase table
    # view -> segments retransmitted (either direction) during each of its phases
    phase_retransmissions: dict[str, list[int]] = field(default_factory=dict)
    # "client" (client to server) / "server": the connection's retransmitted segments and
    # their payload bytes, each in its sender's capture
    retransmitted: dict[str, tuple[int, int]] = field(default_factory=dict)


class Messages:
    """What one handshake's TLS records say, whatever its packets: where each message ends
    in its sender's stream, the records' spans, the messages' sizes, and the flight the
    server's write model makes of them (`flight_plan`). Made once per distinct list of
    records (`messages_of`): a cell's handshakes mostly write the very same records."""

    def __init__(self, records: tuple[TlsRecord, ...]):
        self.records = records
        ends: dict[tuple[str, str], int] = {}
        for r in records:
            for name, _ in r.messages:
                key = (r.sender, name)
                if key not in ends or r.end > ends[key]:
                    ends[key] = r.end
        self.ends = ends
        self.mutual = ("client", "Certificate") in ends
        self.sizes = {side: message_sizes(records, side) for side in ("server", "client")}
        self._spans: dict[tuple[str, str], tuple[int, int]] = {}
        self._plans: dict[tuple, dict] = {}

    def end(self, sender: str, name: str) -> int:
        """Stream offset at the end of the last record carrying (part of) message `name`."""
        end = self.ends.get((sender, name))
        if end is None:
            raise AnalysisError(f"no {name} from the {sender} in the TLS records")
        return end

    def span(self, sender: str, name: str) -> tuple[int, int]:
        """Stream offsets [start, end) of the records carrying message `name` (record
        headers included): from the end of the sender's record before the first one
        carrying it."""
        key = (sender, name)
        if key not in self._spans:
            mine = sorted((r for r in self.records if r.sender == sender), key=lambda r: r.end)
            start = None
            for prev_end, r in zip([0, *[x.end for x in mine]], mine, strict=False):
                if any(m == name for m, _ in r.messages):
                    start = prev_end
                    break
            if start is None:
                raise AnalysisError(f"no {name} from the {sender} in the TLS records")
            self._spans[key] = (start, self.end(sender, name))
        return self._spans[key]

    def flight_plan(self, write_model: WriteModel, mss: int, initcwnd: int) -> dict:
        """The server's flight from ServerHello to Finished as its records and the write
        model make it: its ends, the predicted writes, document 000's case and whether the
        window runs out before CertificateVerify."""
        key = (write_model, mss, initcwnd)
        if key not in self._plans:
            self._plans[key] = self._flight_plan(write_model, mss, initcwnd)
        return self._plans[key]

    def _flight_plan(self, write_model: WriteModel, mss: int, initcwnd: int) -> dict:
        fin_end = self.end("server", "Finished")
        measured = Flight(
            self.end("server", "ServerHello"),
            self.end("server", "Certificate"),
            self.end("server", "CertificateVerify"),
            fin_end,
        )
        server_records = sorted(
            (r for r in self.records if r.sender == "server" and r.end <= fin_end),
            key=lambda r: r.end,
        )
        sizes, prev = [], 0
        for r in server_records:
            sizes.append(r.end - prev)
            prev = r.end
        predicted = write_model.writes(sizes)
        return {
            "fin_end": fin_end,
            "cert_end": measured.through_certificate,
            "cv_end": measured.through_certificate_verify,
            "predicted": predicted,
            "document_case": document_case(measured, write_model),
            "cv_stall_predicted": segments_through(
                measured.through_certificate_verify, predicted, mss
            )
            > initcwnd,
        }


@functools.lru_cache(maxsize=256)
def messages_of(records: tuple[TlsRecord, ...]) -> Messages:
    """The `Messages` of a handshake's records (the same records give the same object)."""
    return Messages(records)


def _messages(records: list[TlsRecord] | Messages) -> Messages:
    return records if isinstance(records, Messages) else messages_of(tuple(records))


def message_end(records: list[TlsRecord] | Messages, sender: str, name: str) -> int:
    """Stream offset at the end of the last record carrying (part of) message `name`."""
    return _messages(records).end(sender, name)


def message_span(records: list[TlsRecord] | Messages, sender: str, name: str) -> tuple[int, int]:
    """Stream offsets [start, end) of the records carrying message `name` (`Messages.span`)."""
    return _messages(records).span(sender, name)


def segments_carrying(conn: Connection, from_client: bool, start: int, end: int) -> int:
    """How many TCP segments carried stream bytes [start, end) in one direction, counting
    each byte's first transmission only (retransmissions do not add segments)."""
    count, sent = 0, 0
    for s in conn.payload_segments(from_client):
        new_from = max(s.start, sent)  # bytes before `sent` were on the wire already
        if s.end <= new_from:
            continue
        if new_from < end and s.end > start:
            count += 1
        sent = s.end
    return count


def hello_segments(
    client_conn: Connection, server_conn: Connection, records: list[TlsRecord] | Messages
) -> tuple[int, int]:
    """Segments that carried the ClientHello (client capture) and the ServerHello (server
    capture): document 000 says each needs at most two, even with ML-KEM-1024."""
    m = _messages(records)
    ch = segments_carrying(client_conn, True, *m.span("client", "ClientHello"))
    sh = segments_carrying(server_conn, False, *m.span("server", "ServerHello"))
    return ch, sh


def client_flight(client_conn: Connection, records: list[TlsRecord] | Messages) -> tuple[int, int]:
    """The client's second flight (after the ClientHello: its Certificate and
    CertificateVerify in mutual TLS, and its Finished), in TLS bytes and in the segments of
    the client capture that carried it."""
    m = _messages(records)
    start, end = m.end("client", "ClientHello"), m.end("client", "Finished")
    return end - start, segments_carrying(client_conn, True, start, end)


def connection_bytes(conn: Connection) -> dict[str, int]:
    """The whole connection each way: TCP payload bytes (every segment's tcp.len,
    retransmissions included, as a packet count sums it) and IP bytes (headers included)."""
    payload, ip = [0, 0], [0, 0]  # [server, client]
    for s in conn.segments:
        payload[s.from_client] += s.end - s.start
        ip[s.from_client] += s.ip_len
    return {
        "client_payload": payload[1],
        "server_payload": payload[0],
        "client_ip": ip[1],
        "server_ip": ip[0],
    }


def message_sizes(records: list[TlsRecord], sender: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for r in records:
        if r.sender == sender:
            for name, length in r.messages:
                sizes[name] = sizes.get(name, 0) + length
    return sizes


def covering(conn: Connection, from_client: bool, end: int) -> Segment:
    """The first segment (in capture order) of one direction carrying stream byte end-1: in
    the sender's capture, that byte's first transmission."""
    for s in conn.payload_segments(from_client):
        if s.start < end <= s.end:
            return s
    side = "client" if from_client else "server"
    raise AnalysisError(f"no captured {side} segment carries stream byte {end - 1}")


def delivered(conn: Connection, from_client: bool, ends: list[int]) -> dict[int, int]:
    """For each stream offset of `ends`, when one direction's bytes 0..end-1 had all arrived
    in this capture (the receiver's): the time of the segment, or retransmission, that
    completed them in order. One pass; a lost segment holds back every end after it until
    its retransmission comes, whatever arrived meanwhile. An end the capture never
    completes is left out (`delivered_at` makes that an error)."""
    want = sorted(set(ends))
    out: dict[int, int] = {}
    have, i = 0, 0  # bytes 0..have-1 are in; want[i] is the next end waited for
    ahead: list[tuple[int, int]] = []  # segments beyond a hole, by start
    for s in conn.payload_segments(from_client):
        if s.start > have:
            heapq.heappush(ahead, (s.start, s.end))
            continue
        if s.end <= have:
            continue  # bytes already in: a retransmission of what arrived before
        have = s.end
        while ahead and ahead[0][0] <= have:
            have = max(have, heapq.heappop(ahead)[1])
        while i < len(want) and want[i] <= have:
            out[want[i]] = s.ts_ns
            i += 1
        if i == len(want):
            break
    return out


def delivered_at(conn: Connection, from_client: bool, ends: list[int]) -> dict[int, int]:
    """`delivered`, every end of which must have been completed."""
    out = delivered(conn, from_client, ends)
    if len(out) < len(ends) and (missing := sorted(set(ends) - out.keys())):
        side = "client" if from_client else "server"
        raise AnalysisError(
            f"the capture never holds the {side}'s stream bytes 0..{missing[0] - 1} "
            "complete (a segment the capture lost)"
        )
    return out


def retransmissions(conn: Connection, from_client: bool) -> list[Segment]:
    """The segments of one direction that carry sequence space an earlier segment of it in
    this capture carried (a SYN again, data bytes again, a FIN again), in capture order:
    what Wireshark marks as retransmissions in the sender's own capture. Pure ACKs carry
    none and are never counted."""
    out: list[Segment] = []
    sent = -1  # sequence space sent so far: the SYN is -1..0, then the bytes, then a FIN
    for s in conn.segments:
        if s.from_client != from_client:
            continue
        start, end, flags = s.start, s.end, s.flags
        if flags & (SYN | FIN):
            if flags & SYN:
                start = -1
            else:
                end += 1
        elif end == start:
            continue  # no sequence space: a pure ACK
        if start < sent:
            out.append(s)
        elif end > sent:
            sent = end
    return out


def phase_retransmissions(p: dict[str, int], resent: list[int]) -> dict[str, list[int]]:
    """Per view, how many of the retransmissions at times `resent` (sorted) fell in each of
    its phases: at or after the phase's first point and before its last (a view's phases
    follow each other, so each retransmission from SYN to the client's Finished is counted
    once per view)."""
    views = views_of(p)
    if not resent:
        return {view: [0] * len(table) for view, table in views.items()}
    out = {}
    for view, table in views.items():
        out[view] = [
            max(0, bisect.bisect_left(resent, p[b]) - bisect.bisect_left(resent, p[a]))
            for _, a, b, _ in table
        ]
    return out


def _first(conn: Connection, pred, what: str) -> Segment:
    for s in conn.segments:
        if pred(s):
            return s
    raise AnalysisError(f"capture has no {what}")


def tcp_points(conn: Connection) -> tuple[int, int, int]:
    """SYN, SYN/ACK and the client's handshake ACK in one capture. The ACK point is the
    first client segment acknowledging the SYN/ACK: normally the pure ACK; if that was
    lost on a lossy link, the ClientHello, which completes the TCP handshake itself."""
    syn = _first(conn, lambda s: s.from_client and s.flags & SYN and not s.flags & ACK, "SYN")
    synack = _first(
        conn, lambda s: not s.from_client and s.flags & SYN and s.flags & ACK, "SYN/ACK"
    )
    ack = _first(
        conn,
        lambda s: s.from_client and not s.flags & SYN and s.flags & ACK and s.ts_ns >= synack.ts_ns,
        "client ACK after the SYN/ACK",
    )
    return syn.ts_ns, synack.ts_ns, ack.ts_ns


def points(
    client_conn: Connection, server_conn: Connection, records: list[TlsRecord] | Messages
) -> dict[str, int]:
    m = _messages(records)
    p: dict[str, int] = {}
    p["1"], p["2"], p["3"] = tcp_points(client_conn)
    p["A"], p["B"], p["C"] = tcp_points(server_conn)
    messages = MESSAGE_POINTS + (MUTUAL_MESSAGE_POINTS if m.mutual else [])
    for sender in ("client", "server"):
        from_client = sender == "client"
        sender_conn = client_conn if from_client else server_conn
        receiver_conn = server_conn if from_client else client_conn
        mine = [(m.end(sender, name), a, b) for s, name, a, b in messages if s == sender]
        arrived = delivered_at(receiver_conn, from_client, [end for end, _, _ in mine])
        for end, at_sender, at_receiver in mine:
            p[at_sender] = covering(sender_conn, from_client, end).ts_ns
            p[at_receiver] = arrived[end]
    return p


def views_of(p: dict[str, int]) -> dict:
    """The phase tables of a handshake's points: mutual TLS has the client's flight."""
    return MUTUAL_VIEWS if "9c" in p else VIEWS


def phases_from_points(p: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    out = {}
    for view, table in views_of(p).items():
        out[view] = [(name, p[b] - p[a]) for name, a, b, _ in table]
    return out


class _FlightReplay:
    """The server capture replayed up to the segment carrying the end of Finished: flight
    segments and stalls on the congestion window.

    A segment "stalled" when an ACK of new data arrived since the previous flight segment and
    either (a) the replayed window was full at that ACK (initcwnd, slow-start growth when at
    least half the window was in use, RFC 7661; Linux counts segments), or (b) the segment
    was handed to the kernel in the same write as the previous one (so it was ready at once)
    yet left only after the ACK, closer to the ACK than to its predecessor: whatever the
    kernel's window was, the ACK released it.

    Rounds, as the wire model counts them (`pqlab.tls.wire`): a segment is in round 1
    unless the window was full when the ACK before it arrived (case a), then it is one
    round after the newest segment that ACK acknowledged; never before the segment ahead of
    it. (A segment held by something else, such as the kernel's own queueing on a link
    faster than the CPU, waits in the same round.)

    The flight segments' ends only grow (a segment ending no further is a retransmission),
    and so do their rounds: the segments an ACK covers are a prefix of them, found by
    bisection."""

    def __init__(self, predicted_writes: list[int], initcwnd: int):
        self.predicted = predicted_writes
        self.cwnd = initcwnd
        self.snd_una = 0
        self.segs: list[int] = []  # stream offset at the end of each flight segment
        self.max_end = 0
        self.full_at_ack = False
        self.last_ack_ns: int | None = None
        self.stalls = 0
        self.stall_wait_ns = 0
        self.prev_seg_ts: int | None = None
        self.prev_write: int | None = None
        self.rounds: list[int] = []  # the round of each flight segment
        self.max_in_flight = 0  # the most flight segments unacknowledged at once
        self.acked_round = 0  # the round of the newest segment the last ACK acknowledged

    def write_of(self, end: int) -> int:
        """Which of the predicted writes (stream offsets, in order) carried stream byte
        end-1."""
        return bisect.bisect_left(self.predicted, end)

    def ack(self, seg: Segment) -> None:
        if not (seg.flags & ACK and seg.ack > self.snd_una):
            return
        acked_before = bisect.bisect_right(self.segs, self.snd_una)
        acked = bisect.bisect_right(self.segs, seg.ack)
        outstanding = len(self.segs) - acked_before
        newly = acked - acked_before
        if outstanding >= self.cwnd:
            self.full_at_ack = True
        if 2 * outstanding >= self.cwnd:
            self.cwnd += newly
        self.snd_una = seg.ack
        self.last_ack_ns = seg.ts_ns
        self.acked_round = self.rounds[acked - 1] if acked else 0

    def data(self, seg: Segment) -> None:
        if seg.payload_len == 0 or seg.flags & SYN:
            return
        if seg.end <= self.max_end:
            return  # a retransmission: no new flight segment
        write = self.write_of(seg.end)
        prev, ack = self.prev_seg_ts, self.last_ack_ns
        held = False
        if prev is not None and ack is not None and ack > prev:
            held = self.full_at_ack
            released = write == self.prev_write and (seg.ts_ns - ack < ack - prev)
            if self.full_at_ack or released:
                self.stalls += 1
                self.stall_wait_ns += seg.ts_ns - prev
        self.full_at_ack = False
        base = self.acked_round + 1 if held else 1
        self.rounds.append(max(base, self.rounds[-1] if self.rounds else 1))
        self.segs.append(seg.end)
        in_flight = len(self.segs) - bisect.bisect_right(self.segs, self.snd_una)
        self.max_in_flight = max(self.max_in_flight, in_flight)
        self.max_end = seg.end
        self.prev_seg_ts, self.prev_write = seg.ts_ns, write


def server_flight(
    client_conn: Connection,
    server_conn: Connection,
    records: list[TlsRecord] | Messages,
    mss: int,
    initcwnd: int,
    write_model: WriteModel = OPENSSL,
    writes: list[tuple[int, int]] | None = None,
    resent: list[Segment] | None = None,
) -> dict:
    """What the server sent from ServerHello to Finished, as seen in the server's capture:
    segments, bytes, where the stack's writes split it (its write model, `pqlab.tls.flight`;
    `writes`: its socket writes as its io events report them), whether and for how many
    rounds it waited for ACKs. `resent`: the server's `retransmissions`, when known."""
    plan = _messages(records).flight_plan(write_model, mss, initcwnd)
    fin_end, predicted = plan["fin_end"], list(plan["predicted"])

    last = covering(server_conn, False, fin_end)
    if resent is None:
        resent = retransmissions(server_conn, False)
    replay = _FlightReplay(predicted, initcwnd)
    for seg in server_conn.segments:
        if seg.ts_ns > last.ts_ns:
            break
        if seg.from_client:
            replay.ack(seg)
        else:
            replay.data(seg)
    segs = replay.segs
    seg_sizes = [b - a for a, b in zip([0, *segs[:-1]], segs, strict=True)]
    observed = [end for end, n in zip(segs[:-1], seg_sizes[:-1], strict=True) if n < mss]
    return {
        "segments": len(segs),
        # Document 000's 10-, 13- and 16-segment cases: ServerHello to CertificateVerify.
        "segments_through_certificate_verify": min(
            bisect.bisect_left(segs, plan["cv_end"]) + 1, len(segs)
        ),
        "retransmissions": sum(1 for r in resent if r.ts_ns <= last.ts_ns and r.end > r.start),
        "bytes": fin_end,
        "bytes_through_certificate": plan["cert_end"],
        "writes_predicted": len(predicted),
        "flush_offsets_predicted": predicted,
        "short_segment_ends": observed,
        "split_by_write_buffer": len(predicted) > 1,
        "cwnd_stalls": replay.stalls,
        "cwnd_stall_wait_ns": replay.stall_wait_ns,
        # Document 000's section 4-3-2 for this flight: its case (1-3, buffering stacks) and
        # whether the window runs out before CertificateVerify (conditions 1-3).
        "document_case": plan["document_case"],
        "cv_stall_predicted": plan["cv_stall_predicted"],
        "flight_rounds": replay.rounds[-1] if replay.rounds else 0,
        "max_in_flight": replay.max_in_flight,
        "server_writes": [end for _, end in writes or [] if end <= fin_end],
    }


def wire_bytes(conn: Connection, until_ns: int) -> tuple[int, int]:
    """IP bytes (headers included) each way from the SYN up to `until_ns` inclusive."""
    client = sum(s.ip_len for s in conn.segments if s.from_client and s.ts_ns <= until_ns)
    server = sum(s.ip_len for s in conn.segments if not s.from_client and s.ts_ns <= until_ns)
    return client, server


# Every pair of points whose order the flow fixes: a cause and what follows from it.
ORDER = (
    ("1", "A"),
    ("A", "B"),
    ("B", "2"),
    ("2", "3"),
    ("3", "C"),
    ("3", "4"),
    ("4", "D"),
    ("D", "E"),
    ("E", "F"),
    ("F", "G"),
    ("G", "H"),
    ("E", "5"),
    ("5", "6"),
    ("6", "7"),
    ("7", "8"),
    ("H", "8"),
    ("8", "9"),
)


MUTUAL_ORDER = (("8", "9c"), ("9c", "9v"), ("9v", "9"), ("9c", "Ic"), ("9v", "Iv"))


def order_disagreements(p: dict[str, int], clock_tolerance_ns: float = 0) -> list[tuple]:
    """Pairs of points in the wrong order, as (a, b, how far b precedes a in ns). A pair
    whose two points come from one capture must never be out of order, nor a pair across
    the two captures by more than `clock_tolerance_ns` (the uncertainty of the offset
    between their clocks; 0 when they share one): either raises AnalysisError. Pairs across
    captures out of order by less are returned: what two clocks known only that well can
    show when the hosts are close (a LAN, or two namespaces of one machine seen as hosts)."""
    out = []
    for a, b in ORDER + (MUTUAL_ORDER if "9c" in p else ()):
        if p[b] >= p[a]:
            continue
        cross = a.isdigit() != b.isdigit()
        gap = p[a] - p[b]
        if not cross or gap > clock_tolerance_ns:
            why = (
                f"by more than the clock offset's uncertainty ({clock_tolerance_ns:.0f} ns)"
                if cross and clock_tolerance_ns
                else ""
            )
            raise AnalysisError(
                f"point {b} ({p[b]}) precedes point {a} ({p[a]}): the two captures "
                f"disagree about the order of events{' ' + why if why else ''}"
            )
        out.append((a, b, gap))
    return out


def analyse(
    client_conn: Connection,
    server_conn: Connection,
    records: list[TlsRecord] | Messages,
    mss: int = 1448,
    initcwnd: int = 10,
    clock_tolerance_ns: float = 0,
    write_model: WriteModel = OPENSSL,
    writes: list[tuple[int, int]] | None = None,
) -> Handshake:
    """One handshake taken apart. `clock_tolerance_ns`: how far the two captures' clocks may
    disagree (see `order_disagreements`); `writes`: the server's socket writes (start time,
    stream offset at their end), recorded beside the flight."""
    records = _messages(records)
    p = points(client_conn, server_conn, records)
    disagreements = order_disagreements(p, clock_tolerance_ns)
    resent = {
        "client": retransmissions(client_conn, True),
        "server": retransmissions(server_conn, False),
    }
    flight = server_flight(
        client_conn, server_conn, records, mss, initcwnd, write_model, writes, resent["server"]
    )
    flight["order_disagreements"] = len(disagreements)
    flight["client_wire_bytes"], flight["server_wire_bytes"] = wire_bytes(client_conn, p["9"])
    flight["client_hello_segments"], flight["server_hello_segments"] = hello_segments(
        client_conn, server_conn, records
    )
    flight["message_sizes"] = {
        **{f"server {k}": v for k, v in records.sizes["server"].items()},
        **{f"client {k}": v for k, v in records.sizes["client"].items()},
    }
    flight["client_flight_bytes"], flight["client_flight_segments"] = client_flight(
        client_conn, records
    )
    flight["connection"] = connection_bytes(client_conn)
    times = sorted(s.ts_ns for side in resent.values() for s in side)
    return Handshake(
        points=p,
        phases=phases_from_points(p),
        views=views_of(p),
        handshake_ns=p["8"] - p["1"],
        total_ns=p["9"] - p["1"],
        client_processing_ns=p["9"] - p["5"],
        flight=flight,
        phase_retransmissions=phase_retransmissions(p, times),
        retransmitted={
            side: (len(segs), sum(s.end - s.start for s in segs)) for side, segs in resent.items()
        },
    )
